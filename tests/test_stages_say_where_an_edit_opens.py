"""The cell an edit opens on at a stage's own input is the stage's answer (StageSpec.edit_cell), so the app's edit
routing (ui/live.py default_cell) names no variant: the gate's W_G, DeltaNet's g and β as the file gives them
(or the weights that compute them), the Scale stage's mask, cap and scale. Each expectation is written here from
the scenario file's own keys, not from the stage code."""

from __future__ import annotations

from qkv_tui.core.cell_edit import InputCell
from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import load_scenario
from qkv_tui.teach.stages.common import Operation
from qkv_tui.teach.trace import Trace


def _ops(trace: Trace, stage: str) -> list[Operation]:
    return [trace.op(i) for seg in trace.segments if seg.stage == stage for i in range(seg.start, seg.stop)]


def _edit_cell(trace: Trace, op: Operation) -> InputCell | None:
    return trace.spec(op.segment.stage).edit_cell(trace, op)


def test_the_gate_opens_on_its_weights_column_and_gated_on_nothing_of_its_own() -> None:
    trace = Trace(compute(load_scenario("gated")))
    ops = _ops(trace, "gate")
    assert ops
    for op in ops:
        if op.segment.target == "gate":
            assert _edit_cell(trace, op) == InputCell("W_G", op.head, 0, op.col or 0)
        else:  # gated = out ⊙ g reads what other stages made: the app's own rule decides
            assert _edit_cell(trace, op) is None


def test_deltanet_opens_on_the_given_g_and_beta_of_the_token() -> None:
    sc = load_scenario("deltanet")
    assert sc.deltanet is not None and sc.deltanet.g is not None and sc.deltanet.beta is not None  # the file gives both
    trace = Trace(compute(sc))
    delta = _ops(trace, "delta")
    assert delta
    for op in delta:
        cell = _edit_cell(trace, op)
        assert cell is not None and cell.head is None and (cell.row, cell.col) == (op.row, op.head)
        assert cell.matrix in ("dn_g", "dn_beta")
    # δ = (v − kv)·β is the one step of a token that reads β
    said = {str(_edit_cell(trace, op)) for op in delta if op.arithmetic.startswith("δ")}
    assert said and all("dn_beta" in cell for cell in said), said


def test_a_gate_per_key_channel_opens_on_the_token_and_beta_on_its_own_number() -> None:
    sc = load_scenario("kda")
    assert sc.deltanet is not None and sc.deltanet.channels is not None and sc.deltanet.beta is not None
    trace = Trace(compute(sc))
    ops = _ops(trace, "gates")
    if not ops:  # g given per channel and β given: no Gates stage to open from
        return
    width = trace.matrix("dn_g", 0).shape[1] - 1
    for op in ops:
        cell = _edit_cell(trace, op)
        expected = InputCell("X", None, op.row, 0) if (op.col or 0) < width else InputCell("dn_beta", None, op.row,
                                                                                           op.head or 0)
        assert cell == expected


def test_the_scale_stage_opens_on_the_mask_where_it_hides_a_cell_then_on_the_cap_or_the_scale() -> None:
    for name in ("softcap", "causal_mask", "i_love_ai"):
        sc = load_scenario(name)
        trace = Trace(compute(sc))
        capped = any(seg.target == "capped" for seg in trace.segments)
        assert capped == (name == "softcap")
        for op in _ops(trace, "scale"):
            hidden = not sc.allow[op.row, op.col or 0]
            masks_here = op.segment.target == "capped" or not capped  # under a cap the mask comes after it
            if masks_here and hidden:
                expected = InputCell("mask", None, op.row, op.col or 0)
            elif op.segment.target == "capped":
                expected = InputCell("softcap", op.head)
            else:
                expected = InputCell("scale")
            assert _edit_cell(trace, op) == expected


def test_a_stage_without_an_input_of_its_own_leaves_the_edit_to_the_app() -> None:
    trace = Trace(compute(load_scenario("i_love_ai")))
    for stage in ("embed", "project", "score", "softmax", "mix"):
        for op in _ops(trace, stage)[:6]:
            assert _edit_cell(trace, op) is None
