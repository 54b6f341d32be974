"""The soft-cap as a part of a head's pass: the scaled scores capped at c·tanh(s/c) (kernels/softcap.py CapSpec),
built for core/head_parts.py's HEAD_PARTS."""

from __future__ import annotations

from typing import Any

from qkv_tui.kernels.softcap import CapSpec


def softcap_part(run: Any) -> Any:
    """Each head's cap where it has one (``run`` is core/head_parts.py's Run)."""
    heads = run.sc.heads
    return lambda h: None if (cap := heads[h].softcap) is None else CapSpec(cap)
