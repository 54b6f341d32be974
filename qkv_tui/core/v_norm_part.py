"""[v_norm] as a part of a head's pass: every head's V rows RMS-normed (kernels/v_norm.py), built for
core/head_parts.py's HEAD_PARTS; apart from the table's keys (core/variants/v_norm.py), as [value_scale]'s is."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from qkv_tui.core.variants.v_norm import TABLE


def v_norm_part(run: Any) -> Callable[[int], Any] | None:
    """Every head's share: the same eps (``run`` is head_parts' Run, not imported: it imports this module)."""
    eps = TABLE.of(run.sc)
    if eps is None:
        return None
    from qkv_tui.kernels.v_norm import VNormSpec

    spec = VNormSpec(eps)
    return lambda h: spec
