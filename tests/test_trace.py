"""The operation trace: order, stages, values, laziness."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings

from qkv_tui import compute, load_scenario
from qkv_tui.core.fmt import fmt
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.teach.trace import Trace

from .conftest import SCENARIOS
from .strategies import Case, cases


def trace_of(name: str) -> Trace:
    return Trace(compute(load_scenario(name)))


def test_i_love_ai_has_66_operations_in_six_stages() -> None:
    trace = trace_of("i_love_ai")
    assert len(trace) == 3 + 27 + 9 + 9 + 9 + 9 == 66
    assert trace.stage_keys == ["embed", "project", "score", "scale", "softmax", "mix"]
    assert [r.start for r in trace.runs] == [0, 3, 30, 39, 48, 57]
    assert trace.op(0).stage.name == "Embed" and trace.op(65).stage.name == "Mix"


def test_heads_then_concat_then_w_o() -> None:
    trace = trace_of("two_heads")
    assert trace.stage_keys[-2:] == ["concat", "wo"]
    heads = [r.head for r in trace.runs]
    assert heads == [None, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, None, None]
    last = trace.op(len(trace) - 1)
    assert last.arithmetic.startswith("final[AI,3] = concat[AI]·W_O[:,3] = ")


@settings(max_examples=40, deadline=None)
@given(cases())
def test_every_operation_carries_its_engine_value(case: Case) -> None:
    comp = compute(parse_scenario(case.toml, "generated.toml"))
    trace = Trace(comp)
    expected = 0
    for seg in trace.segments:
        assert seg.start == expected
        expected = seg.stop
    assert len(trace) == expected
    for i in range(len(trace)):
        op = trace.op(i)
        if op.col is None:
            continue
        full = trace.matrix(op.segment.target, op.head)
        assert op.value == full[op.row, op.col] or (math.isinf(full[op.row, op.col]) and op.value == full[op.row, op.col])
        shown = fmt(op.value, trace.integral(op.segment.target, op.head))
        if op.segment.stage != "scale":
            assert op.arithmetic.endswith(f"= {shown}") or op.arithmetic.endswith("(masked)")


def test_masked_cells_explain_themselves() -> None:
    trace = trace_of("causal_mask")
    scale = [trace.op(i) for i in range(trace.runs[3].start, trace.runs[3].stop)]
    blocked = [op for op in scale if op.value == -np.inf]
    assert [(op.row, op.col) for op in blocked] == [(0, 1), (0, 2), (1, 2)]
    assert blocked[0].arithmetic == "scaled[I,love] = 5 / √3 = 2.887, masked → −∞"
    assert "comes after" in blocked[0].details[0]
    soft = trace.op(trace.runs[4].start + 1)
    assert soft.arithmetic == "weights[I,love] = e^−∞ / 1.000 = 0 (masked)"
    assert "e^−∞ = 0" in soft.details[1]


def test_cross_attention_labels_keys_with_context_tokens() -> None:
    trace = trace_of("cross_attention")
    texts = [trace.op(i).arithmetic for i in range(len(trace))]
    assert "K[I,0] = X_ctx[I]·W_K[:,0] = 1·0 + 0·0 + 1·1 + 0·1 = 1" in texts
    assert "scores[J',love] = Q[J']·K[love] = 2·1 + 2·0 + 0·2 = 2" in texts


def test_custom_scale_is_shown_as_a_number(write) -> None:
    from .conftest import BASE, HEAD

    trace = Trace(compute(load_scenario(write(BASE + "scale = 2\n" + HEAD))))
    op = trace.op(trace.runs[3].start + 1)
    assert op.arithmetic == "scaled[I,love] = 5 / 2 = 2.500"


def test_long_dot_products_are_elided(write) -> None:
    width = 40
    text = (
        'tokens = ["a", "b"]\n'
        f"X = [{[1] * width}, {[2] * width}]\n"
        f"[[heads]]\nW_Q = {[[1]] * width}\nW_K = {[[1]] * width}\nW_V = {[[1]] * width}\n"
    )
    trace = Trace(compute(load_scenario(write(text))))
    op = trace.op(2)
    assert op.arithmetic == "Q[a,0] = X[a]·W_Q[:,0] = 1·1 + 1·1 + 1·1 + 1·1 + 1·1 + 1·1 + … 32 more … + 1·1 + 1·1 = 40"


def test_operations_are_built_only_when_asked() -> None:
    trace = trace_of("i_love_ai")
    assert trace.op.cache_info().currsize == 0
    trace.op(40)
    assert trace.op.cache_info().currsize == 1
    with pytest.raises(IndexError):
        trace.op(66)


def test_filled_counts_cells_row_major() -> None:
    trace = trace_of("i_love_ai")
    assert trace.filled("Q", 0, 2) == 0
    assert trace.filled("Q", 0, 3) == 1
    assert trace.filled("Q", 0, 65) == 9
    assert trace.filled("X", None, 0) == 4  # one embed operation fills a whole row
    assert trace.filled("W_Q", 0, 0) > 9  # inputs are always complete


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_every_shipped_operation_renders(path) -> None:
    trace = Trace(compute(load_scenario(path)))
    for i in range(len(trace)):
        op = trace.op(i)
        assert op.arithmetic and "nan" not in op.arithmetic


def test_descriptions_are_true() -> None:
    """What the shipped descriptions say the heads do, checked on the computed weights."""
    two = compute(load_scenario("two_heads")).heads[1]  # "every token looks mostly at itself"
    assert "mostly at itself" in load_scenario("two_heads").description
    for i in range(3):
        assert int(np.argmax(two.weights[i])) == i and two.weights[i, i] > 0.5
    split = compute(load_scenario("split_heads"))
    first, second = split.heads[0].weights, split.heads[1].weights
    assert int(np.argmax(first[0])) == 1 and int(np.argmax(first[1])) == 0  # I and love look at each other
    assert np.allclose(first[2], 1 / 3)  # AI spreads evenly
    assert [int(np.argmax(row)) for row in second] == [0, 0, 1]  # one token back; I, first, at itself
    assert all(row.max() > 0.5 for row in second)
    assert len({tuple(row) for row in split.heads[1].Q}) > 1  # head 2's Queries are not all alike


def test_split_scenarios_show_the_wide_matrix_with_slices_labelled() -> None:
    trace = trace_of("split_heads")
    wide = trace.matrix("W_Q_wide", None)
    assert wide.shape == (4, 4)
    assert np.array_equal(wide[:, 2:], trace.matrix("W_Q", 1))
    assert [trace.col_label("W_Q_wide", j) for j in range(4)] == ["h1:0", "h1:1", "h2:0", "h2:1"]
    assert trace.wide_offset("W_Q", 1) == 2
    assert not trace_of("two_heads").split  # [[heads]] were never one matrix


def test_stage_prose_fits_the_scenario() -> None:
    assert "−∞" not in trace_of("i_love_ai").meaning("scale", 0)
    assert "causal mask applies here" in trace_of("causal_mask").meaning("scale", 0)
    cross = trace_of("cross_attention").meaning("project", 0)
    assert "K = X_ctx·W_K" in cross and "from the context" in cross
