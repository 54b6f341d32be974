"""The [differential] stages declare their overview panes as the one-map stages do: on a screen with room for
context, the viewed head's own later panes (mixed, normed, its output) come before the other heads' outputs."""

from __future__ import annotations

from qkv_tui import compute
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.display.view import View
from qkv_tui.teach.stepper import Position, Stepper
from qkv_tui.teach.trace import Trace

from .test_differential_backward_stages import DIFF_BACK
from .test_differential_builtin import BUILTIN
from .test_differential_learns_builtin import BUILTIN as LEARNS


def test_the_viewed_heads_later_panes_come_before_the_other_heads_outputs() -> None:
    trace = Trace(compute(parse_scenario(BUILTIN.read_text(encoding="utf-8"), BUILTIN.name)))
    view = View(trace)
    for head in (0, 1):
        pos = Stepper(trace).stage(Position(0, head), trace.stage_keys.index("diff_score_1") + 1)
        keys = view.overview_keys(pos)
        own = [(name, head) for name in ("scaled_1", "scaled_2", "mixed", "normed", "output")]
        assert all(k in keys for k in own), keys
        other = ("output", 1 - head)
        assert keys.index(other) > max(keys.index(k) for k in own)


def test_each_backward_scale_declares_its_dscores() -> None:
    trace = Trace(compute(parse_scenario(LEARNS.read_text(encoding="utf-8"), LEARNS.name)))
    assert "ddiff_scale_1" in DIFF_BACK
    keys = View(trace).overview_keys(Position(0, 0))
    assert ("dscores_1", 0) in keys and ("dscores_2", 0) in keys
