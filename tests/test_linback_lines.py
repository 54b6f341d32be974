"""The calculator rule over the backward lines of [linear] and [deltanet] (teach/stages/linear.py's dLinear,
teach/stages/deltanet.py's dDelta, and the shared stages after them), at 1–8 decimals, exact and by hand; and
each cell is the gradient its pane shows."""

from __future__ import annotations

import numpy as np
import pytest

from qkv_tui import compute
from qkv_tui.core.scenario import Scenario, parse_scenario
from qkv_tui.teach.handcalc import compute_hand
from qkv_tui.teach.trace import Trace

from .test_backward_lines import BACKWARD_STAGES, SCENARIOS, assert_cells_are_gradients, stage_text
from .test_calculator import assert_holds, check_text
from .test_linback_torch import COMPUTED, DELTA, MIXED, _linear_text

STATE_STAGES = (*BACKWARD_STAGES, "dlinear", "ddelta", "dgates")
ROPE = "\n[rope]\nlayout = \"half\"\nbase = 10.0\n"


def cases() -> dict[str, str]:
    out = {"linear_elu": _linear_text("elu1", True), "linear_relu": _linear_text("relu", False),
           "linear_identity": _linear_text("identity", False), "linear_rope": _linear_text("elu1", True, ROPE),
           "delta_computed": DELTA.format(gates=COMPUTED), "delta_mixed": DELTA.format(gates=MIXED)}
    for name in ("linear", "deltanet"):
        text = (SCENARIOS / f"{name}.toml").read_text()
        out[f"builtin_{name}"] = text + "\n[backward]\ntarget = [[1, 0], [0, 1], [0.5, 0.5]]\n"
    return out


CASES = cases()


def scenario(name: str) -> Scenario:
    return parse_scenario(CASES[name], f"{name}.toml")


def text_of(trace: Trace, decimals: int) -> str:
    return stage_text(trace, STATE_STAGES, decimals)


@pytest.mark.parametrize("decimals", range(1, 9))
@pytest.mark.parametrize("name", sorted(CASES))
def test_every_state_backward_line_checks_out(name: str, decimals: int) -> None:
    trace = Trace(compute(scenario(name)))
    assert {"dlinear", "ddelta"} & set(trace.stage_keys)
    assert not {"dmix", "dsoftmax", "dscale", "dscore"} & set(trace.stage_keys)
    assert_holds(check_text(text_of(trace, decimals)))


@pytest.mark.parametrize("decimals", [1, 2, 3, 4])
@pytest.mark.parametrize("name", sorted(CASES))
def test_hand_rounded_state_backward_lines_check_out(name: str, decimals: int) -> None:
    comp = compute_hand(compute(scenario(name)), decimals)
    assert_holds(check_text(text_of(Trace(comp), decimals), whole=False))


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_state_backward_cell_is_the_gradient(name: str) -> None:
    trace = Trace(compute(scenario(name)))
    assert_cells_are_gradients(trace, STATE_STAGES)
    assert np.isfinite(trace.matrix("dX_in", None)).all()
