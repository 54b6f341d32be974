"""Where tab changes what is shown, the header says which head is shown: at [ssd]'s Concat tab switched the
lower panes to head 2's values while the header (``10/10 Concat · op 118/120``) named no head. Embed, Concat and
W_O belong to no one head, but their context panes are the viewed head's matrices."""

from __future__ import annotations

import pytest

from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import load_scenario
from qkv_tui.display.modes import Modes
from qkv_tui.display.view import View
from qkv_tui.teach.stepper import Position
from qkv_tui.teach.trace import Trace


def shown(view: View, pos: Position) -> list[str]:
    focus, extra = view.panes(pos, 3, overview=True)
    return [spec.key for spec in (*focus, *extra)]


@pytest.mark.parametrize("name", ["ssd", "two_heads"])
def test_a_stage_of_no_one_head_names_the_head_its_panes_show(name: str) -> None:
    view = View(Trace(compute(load_scenario(name))))
    heads = view.comp.heads
    concat = next(run for run in view.trace.runs if run.stage == "concat")
    for head in range(len(heads)):
        pos = Position(concat.start, head)
        assert view.explain(pos).head_label == f"{heads[head].name} ({head + 1}/{len(heads)})"
    # what made it needed: tab changes the panes at Concat
    assert shown(view, Position(concat.start, 0)) != shown(view, Position(concat.start, 1))


def test_one_head_is_never_named() -> None:
    view = View(Trace(compute(load_scenario("i_love_ai"))))
    assert {view.explain(Position(run.start, 0)).head_label for run in view.trace.runs} == {""}
    assert Modes().view == "trace"
