"""Everything the screen shows, from the computation, the position and the modes (no Textual).

The app keeps one Position and one Modes (display/modes.py); this module turns them into a
Frame of panes and text: the operation trace's own, or the open side view's (display/side_views.py).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar, cast

from qkv_tui.core import part_questions as ask
from qkv_tui.core.engine import Computation
from qkv_tui.display.frame import Frame
from qkv_tui.display.modes import Modes
from qkv_tui.display.side_view import SideView, is_empty
from qkv_tui.display.side_views import HEADS, SIDE_VIEWS, shown_for, side_view
from qkv_tui.display.view import View, hand_note, model_layer, whatif_lines
from qkv_tui.teach.handcalc import compute_hand
from qkv_tui.teach.stepper import Position
from qkv_tui.teach.summary import MAX_ROWS, closing_summary
from qkv_tui.teach.trace import Trace

if TYPE_CHECKING:  # the quiz's module loads when the quiz first asks, not with the first screen
    from qkv_tui.teach.quiz import Question

T = TypeVar("T")


class Presenter:
    """Builds Frames (what one screen shows, as plain data); keeps each mode's traces and views, so toggling back is free."""

    def __init__(self, comp: Computation, trace: Trace | None = None) -> None:
        self.comp = comp
        self.exact = trace if trace is not None else Trace(comp)
        self._views: dict[int | None, View] = {None: View(self.exact)}
        self._kept: dict[Hashable, object] = {}  # what the side views built (display/side_view.py Sources)

    def view(self, modes: Modes) -> View:
        key = modes.decimals if modes.hand else None
        if key not in self._views:
            assert key is not None
            self._views[key] = View(Trace(compute_hand(self.comp, key)))
        return self._views[key]

    def kept(self, key: Hashable, build: Callable[[], T]) -> T:
        """What ``build`` makes, made once per key: a side view's decode or tiling, kept while the computation is."""
        if key not in self._kept:
            self._kept[key] = build()
        return cast(T, self._kept[key])

    def side(self, modes: Modes) -> SideView | None:
        """The side view in front, or None in the trace."""
        return side_view(modes.view)

    def side_steps(self, modes: Modes, head: int) -> int:
        """Steps of the side view in force (decode steps, tile operations), 0 in the trace."""
        view = side_view(modes.view)
        return view.steps(self, modes, head) if view is not None else 0

    def side_question(self, modes: Modes, head: int) -> Question | None:
        """The side view's question at its step: the result of the line it asks about (SideView.asks)."""
        side = side_view(modes.view)
        if side is None:
            return None
        step = min(modes.side_step, side.steps(self, modes, head) - 1)
        ex = side.frame(self, modes, step, head).explanation
        line = next((line for line in (ex.arithmetic, *ex.details) if line.startswith(side.asks)), None)
        from qkv_tui.teach.quiz import about_line

        return None if line is None else about_line(step, line, side.name)

    def frame(self, pos: Position, modes: Modes) -> Frame:
        shown = self._frame(pos, modes)
        layer = model_layer(self.comp.scenario)
        if layer is None or modes.view == HEADS.name:  # the heads view counts the layers itself ("layer 1 (0 … 3)")
            return shown
        # enter in the heads view opens another layer of the model: the title is still the file's
        return replace(shown, explanation=replace(shown.explanation, layer=f"layer {layer}"))

    def _frame(self, pos: Position, modes: Modes) -> Frame:
        side = side_view(modes.view)
        if side is not None:
            step = min(modes.side_step, side.steps(self, modes, pos.head) - 1)
            shown = side.frame(self, modes, step, pos.head)
            asked = modes.question
            if asked is None or asked.side != side.name or asked.index != step:
                return shown
            # the learner predicts: the lines up to the asked one, that one ending "= ?", and the panes
            # as they stood before this step (they would show its result)
            ex = shown.explanation
            lines = (ex.arithmetic, *ex.details)
            at = next((i for i, line in enumerate(lines) if line.startswith(side.asks)), 0)
            lines = (*lines[:at], asked.arithmetic)
            before = side.frame(self, modes, step - 1, pos.head) if step else shown
            return Frame(replace(ex, arithmetic=lines[0], details=lines[1:]), before.focus, before.extra, (), "")
        view = self.view(modes)
        hidden = modes.question is not None and not modes.question.side and modes.question.index == pos.index
        focus, extra = view.panes(pos, modes.decimals, overview=True, hide_current=hidden)
        ex = view.explain(pos, modes.decimals)
        if hidden:  # the learner predicts: no result, no details that give it away (teach/quiz.py)
            assert modes.question is not None
            from qkv_tui.teach.quiz import hide_result

            ex = replace(ex, arithmetic=modes.question.arithmetic or hide_result(ex.arithmetic), details=())
        notes: list[str] = []
        if modes.hand and not hidden:
            notes.append(hand_note(self.exact, view.trace, pos.index, modes.decimals))
        if modes.whatif and hidden:  # the table holds the row's weights: the answer, or a step to it
            notes.append("what if (w): the scaling table waits until this question is answered")
        elif modes.whatif:
            notes += self._whatif(pos, modes)
        if pos.index == len(view.trace) - 1 and not hidden:
            notes += self._closing(pos, modes)
        description = self.comp.scenario.description if pos.index == 0 else ""
        schedule = self.comp.scenario.input.schedule_text  # a model's layers, beside what it says of the model
        if pos.index == 0 and schedule:
            description = f"{description}\n\n{schedule}" if description else schedule
        return Frame(ex, focus, extra, tuple(notes), description)

    def _closing(self, pos: Position, modes: Modes) -> list[str]:
        """After the last operation: what was computed, where each token looked, the checks, what next."""
        lines = list(closing_summary(self.comp, pos.head, len(self.exact), modes.decimals))
        others = ["m the map of every row"] if self.comp.scenario.n > MAX_ROWS else []
        if len(self.comp.heads) > 1:
            others.append("tab another head")
        # a view with only a line that says why it shows nothing here is not offered (display/side_view.py empty)
        others += [f"{view.key} {self._closing_words(view)}" for view in SIDE_VIEWS
                   if view.closing and shown_for(view, self.comp.scenario) and not is_empty(view, self)]
        others.append("home then p to predict every result")
        lines.append("Next: " + " · ".join(others))
        return lines

    def _closing_words(self, view: SideView) -> str:
        """What the "Next:" line calls a view: as a part of a head names what it shows there, or as the view does."""
        said = [words for hr in self.comp.heads for words in ask.said(hr, f"closing.{view.name}")]
        return said[0] if said else view.closing

    def _whatif(self, pos: Position, modes: Modes) -> list[str]:
        from qkv_tui.display.state_view import carries_state  # with the views that draw a state, not at start-up

        if carries_state(self.comp):  # a softmax table beside a state head would teach a softmax it never takes
            return ["what if (w): no scaling table here: these heads keep a state, with no softmax to sharpen"]
        op = self.exact.op(pos.index, modes.decimals)
        sc = self.comp.scenario
        # the query row being worked on; outside the per-row stages, the first row
        row = op.row if op.segment.stage in ("score", "scale", "softmax", "mix") and op.row is not None else 0
        # the table is built from the row's scores: before they are all computed it would show the future
        if self.exact.filled("scores", pos.head, pos.index) < (row + 1) * sc.m:
            return [f"what if (w): the scaling table for row {sc.labels[row]} appears once its scores are all"
                    " computed (stage Score)"]
        # the keys the head attends: the scenario's mask, narrowed where a part chooses keys (the indexer)
        return whatif_lines(self.comp.heads[pos.head], self.comp.allow, row, sc.labels[row], sc.key_labels, modes.decimals)
