"""[linear] as a part of a head's pass: linear attention's map in place of the softmax (kernels/linear.py), built for
core/head_parts.py's HEAD_PARTS."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from qkv_tui.core.scenario import Scenario

if TYPE_CHECKING:  # the kernel loads with a scenario that has [linear]
    from qkv_tui.kernels.linear import LinearSpec


def linear_spec(sc: Scenario) -> LinearSpec | None:
    if sc.linear is None:
        return None
    from qkv_tui.kernels.linear import LinearSpec

    return LinearSpec(sc.linear.feature, sc.linear.normalize)


def linear_part(run: Any) -> Any:
    """Every head's spec where the scenario has [linear] (``run`` is core/head_parts.py's Run)."""
    spec = linear_spec(run.sc)
    return None if spec is None else lambda h: spec
