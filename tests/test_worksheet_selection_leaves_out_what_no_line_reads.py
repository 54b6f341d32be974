"""A --stages/--heads worksheet prints what its questions read and no more (issue 34, edges/worksheet/select.py): the
``backward`` group leaves out the gradient of a weight [backward] does not train (no SGD step reads it) and says so,
naming its stage still asks it; the mask is printed where an asked forward table reads it; and every [backward]
scenario's one-head backward sheet still prints every operand its lines read, before the line."""

from __future__ import annotations

import pytest

from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import load_scenario
from qkv_tui.edges.worksheet.make import build
from qkv_tui.edges.worksheet.sheet import Grid, sheet

from .test_worksheet_stages_and_heads import check_questions_read_the_page

# the built-ins whose backward the worksheet prints: every one with [backward]
BACKWARD = ("learn_to_look", "differential_learns", "mla_learns", "next_token_adamw", "deltanet_learns")


def keys(name: str, **kw: object) -> set[str]:
    return {t.key for t in build(compute(load_scenario(name)), "100%", **kw).tables}  # type: ignore[arg-type]


def test_the_backward_group_leaves_out_the_gradients_no_step_moves() -> None:
    comp = compute(load_scenario("differential_learns"))
    assert comp.scenario.backward is not None and set(comp.scenario.backward.train) == {
        "lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"}
    ws = build(comp, "100%", stages="backward", heads=[1])
    printed = {t.key for t in ws.tables}
    assert not printed & {"dW_Q.0", "dW_K.0", "dW_V.0"}
    assert "X" not in printed  # only dW = Xᵀ·d… read X
    assert {"dQu.0", "dKu.0", "dlamv.0", "sgd.lambda_vectors.0"} <= printed  # what the λ step reads stays
    assert ws.idle == ("dW_Q", "dW_K", "dW_V")
    assert "It leaves out dW_Q, dW_K, dW_V: [backward] does not train those weights" in ws.markdown()
    check_questions_read_the_page(ws)


def test_naming_the_stage_asks_them() -> None:
    comp = compute(load_scenario("differential_learns"))
    ws = build(comp, "100%", stages="dProject", heads=[1])
    assert ws.asked is not None and {"dW_Q.0", "dW_K.0", "dW_V.0"} <= ws.asked and ws.idle == ()
    assert "X" in {t.key for t in ws.tables}  # given, for them to read
    assert "leaves out" not in ws.markdown()
    ranged = build(comp, "100%", stages="dScore..dProject", heads=[1])
    assert ranged.asked is not None and "dW_V.0" in ranged.asked
    check_questions_read_the_page(ws)


def test_a_trained_weights_gradient_stays() -> None:
    """learn_to_look trains W_Q and W_K: their gradients and SGD steps stay, W_V's gradient goes."""
    printed = keys("learn_to_look", stages="backward", heads=[1])
    assert {"dW_Q.0", "dW_K.0", "sgd.W_Q.0", "sgd.W_K.0"} <= printed
    assert "dW_V.0" not in printed
    assert "dW_V.0" in keys("learn_to_look")  # the full sheet asks every table


def test_the_mask_is_printed_where_a_forward_question_reads_it() -> None:
    comp = compute(load_scenario("differential_learns"))
    assert not comp.scenario.allow.all()

    def has_mask(**kw: object) -> bool:
        page = sheet(build(comp, "100%", **kw))  # type: ignore[arg-type]
        return any(isinstance(b, Grid) and b.table.key == "mask" for b in page.body)

    assert has_mask()  # the full sheet
    assert has_mask(stages="forward")  # p₁, p₂ and weights are asked: 0 where masked
    assert not has_mask(stages="backward", heads=[1])  # masked cells print as the 0 they are, never blank


@pytest.mark.parametrize("name", BACKWARD)
@pytest.mark.parametrize("heads", [[1], None])
def test_every_backward_sheet_prints_what_its_lines_read(name: str, heads: list[int] | None) -> None:
    ws = build(compute(load_scenario(name)), "100%", stages="backward", heads=heads)
    assert ws.blanks
    check_questions_read_the_page(ws)
