"""[value_scale] as a part of a head's pass: every head's V multiplied by the table's factor
(kernels/value_scale.py), built for core/head_parts.py's HEAD_PARTS. Apart from the table's keys
(core/variants/value_scale.py) because the loader imports those and the builders import the loader."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from qkv_tui.core.variants.value_scale import TABLE


def value_scale_part(run: Any) -> Callable[[int], Any] | None:
    """Every head's share: the same factor (``run`` is head_parts' Run, not imported: it imports this module)."""
    factor = TABLE.of(run.sc)
    if factor is None:
        return None
    from qkv_tui.kernels.value_scale import ValueScaleSpec

    spec = ValueScaleSpec(factor)
    return lambda h: spec
