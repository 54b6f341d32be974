"""Everything the screen shows, from the computation, the position and the modes (no Textual).

The modes are what the learner toggles: decimals, hand rounding, the what-if table, the
KV-cache decode view and the predict-then-reveal quiz. The app keeps one Position and
one Modes; this module turns them into panes and text.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from qkv_tui.core.engine import Computation
from qkv_tui.screen.decode_view import decode_explanation, decode_panes
from qkv_tui.screen.view import Explanation, PaneSpec, View, hand_note, whatif_lines
from qkv_tui.teach.decode import Decode, decode
from qkv_tui.teach.handcalc import compute_hand
from qkv_tui.teach.quiz import Question, Score, hide_result
from qkv_tui.teach.stepper import Position
from qkv_tui.teach.trace import Trace

MIN_DECIMALS, MAX_DECIMALS = 1, 8  # at 0 a weight row reads 0 0 0: it must visibly sum to 1


@dataclass(frozen=True)
class Modes:
    decimals: int = 3  # shown after the point (the seed uses 3)
    hand: bool = False  # every intermediate rounded to the shown decimals before it is used
    whatif: bool = False  # the current query row's softmax with and without scaling, at wider heads
    decode: bool = False  # the KV-cache decode view instead of the operation trace
    decode_step: int = 0  # the token being generated, in the decode view
    quiz: Score | None = None  # predict-then-reveal is on when this is set
    question: Question | None = None  # what the learner is being asked now; its result is hidden
    message: str = ""  # the quiz's last word to the learner


@dataclass(frozen=True)
class Screen:
    explanation: Explanation
    focus: list[PaneSpec]
    extra: list[PaneSpec]
    notes: tuple[str, ...]  # lines added under the explanation (hand rounding, what-if)
    description: str  # the scenario's description, on its first screen


class Presenter:
    """Builds Screens; keeps the traces and views of each mode so toggling back costs nothing."""

    def __init__(self, comp: Computation, trace: Trace | None = None) -> None:
        self.comp = comp
        self.exact = trace if trace is not None else Trace(comp)
        self._views: dict[int | None, View] = {None: View(self.exact)}

    def view(self, modes: Modes) -> View:
        key = modes.decimals if modes.hand else None
        if key not in self._views:
            assert key is not None
            self._views[key] = View(Trace(compute_hand(self.comp, key)))
        return self._views[key]

    @cached_property
    def decoded(self) -> Decode:
        return decode(self.comp)

    def screen(self, pos: Position, modes: Modes) -> Screen:
        if modes.decode:
            step = min(modes.decode_step, self.comp.scenario.n - 1)
            focus, extra = decode_panes(self.decoded, step, pos.head, modes.decimals)
            return Screen(decode_explanation(self.decoded, step, pos.head, modes.decimals), focus, extra, (), "")
        view = self.view(modes)
        hidden = modes.question is not None and modes.question.index == pos.index
        focus, extra = view.panes(pos, modes.decimals, overview=True, hide_current=hidden)
        ex = view.explain(pos, modes.decimals)
        if hidden:  # the learner predicts: no result, no details that give it away
            ex = replace(ex, arithmetic=hide_result(ex.arithmetic), details=())
        notes: list[str] = []
        if modes.hand and not hidden:
            notes.append(hand_note(self.exact, view.trace, pos.index, modes.decimals))
        if modes.whatif:
            notes += self._whatif(pos, modes)
        description = self.comp.scenario.description if pos.index == 0 else ""
        return Screen(ex, focus, extra, tuple(notes), description)

    def _whatif(self, pos: Position, modes: Modes) -> list[str]:
        op = self.exact.op(pos.index, modes.decimals)
        sc = self.comp.scenario
        # the query row being worked on; before the scores exist, the first row
        row = op.row if op.segment.stage in ("score", "scale", "softmax", "mix") else 0
        return whatif_lines(self.comp.heads[pos.head], sc.allow, row, sc.tokens[row], sc.key_tokens, modes.decimals)
