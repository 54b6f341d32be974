"""The output gate as a part of a head's pass: the head's output times sigmoid(X̂·W_G) (kernels/gate.py GateSpec),
built for core/head_parts.py's HEAD_PARTS."""

from __future__ import annotations

from typing import Any

from qkv_tui.kernels.gate import GateSpec


def gate_part(run: Any) -> Any:
    """Each head's gate where it has one (``run`` is core/head_parts.py's Run)."""
    heads = run.sc.heads
    return lambda h: None if (W_G := heads[h].W_G) is None else GateSpec(W_G)
