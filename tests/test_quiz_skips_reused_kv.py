"""The quiz asks only what can be worked out on screen: [shared_kv]'s Reuse stage reads K and V as an earlier
layer cached them (given, like Embed's X), yet ``qkv-tui shared_kv``, 3, p, → asked "What is K[the,1]?"."""

from __future__ import annotations

import pytest

from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import load_scenario
from qkv_tui.teach.quiz import questions
from qkv_tui.teach.trace import Trace
from qkv_tui.ui.app import QKVApp

from .settle import settle


def test_no_question_on_a_reused_cell_and_one_on_a_computed_one() -> None:
    trace = Trace(compute(load_scenario("shared_kv")))
    by_stage: dict[str, list[int]] = {}
    for index in range(len(trace)):
        op = trace.op(index, 3)
        if op.col is not None and op.value is not None:  # a cell with its value: what the quiz could ask
            by_stage.setdefault(op.segment.stage, []).append(index)
    assert by_stage["reuse"], "the scenario has a Reuse stage with cells"
    assert all(questions(trace, i, 3) == [] for i in by_stage["reuse"])
    # Q is computed here, from X and W_Q: asked
    assert all(questions(trace, i, 3) for i in by_stage["project"])


async def test_predicting_through_reuse_asks_no_reused_value() -> None:
    app = QKVApp("shared_kv")
    async with app.run_test(size=(200, 40)) as pilot:
        await settle(pilot)
        await pilot.press("3", "p", "right")
        await settle(pilot)
        op = app.trace.op(app.position.index, 3)
        assert op.segment.stage == "reuse"
        assert app.modes.asking and app.modes.question is None


@pytest.mark.parametrize("name", ["ssd", "differential", "kda"])
def test_every_other_cell_is_still_asked(name: str) -> None:
    """Only a stage whose cells are given is skipped: every cell with a value elsewhere is asked ([ssd]'s stages
    name the table's inputs they print, which is not a flag that they are given)."""
    trace = Trace(compute(load_scenario(name)))
    for index in range(len(trace)):
        op = trace.op(index, 3)
        if op.col is not None and op.value is not None:
            assert questions(trace, index, 3), (name, op.segment.stage, op.arithmetic)
