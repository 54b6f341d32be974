"""Everything the screen shows, from the computation, the position and the modes (no Textual).

The modes are what the learner toggles: decimals, hand rounding, the what-if table, the
KV-cache decode view and the predict-then-reveal quiz. The app keeps one Position and
one Modes; this module turns them into panes and text.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from qkv_tui.core.engine import Computation
from qkv_tui.display.decode_view import decode_explanation, decode_panes
from qkv_tui.display.tiled_view import tiled_explanation, tiled_panes
from qkv_tui.display.view import Explanation, PaneSpec, View, hand_note, whatif_lines
from qkv_tui.teach.decode import Decode, decode
from qkv_tui.teach.handcalc import compute_hand
from qkv_tui.teach.quiz import Question, Score, hide_result
from qkv_tui.teach.stepper import Position
from qkv_tui.teach.summary import MAX_ROWS, closing_summary
from qkv_tui.teach.tiled import TiledHead, tiled
from qkv_tui.teach.trace import Trace

MIN_DECIMALS, MAX_DECIMALS = 1, 8  # at 0 a weight row reads 0 0 0: it must visibly sum to 1


@dataclass(frozen=True)
class Modes:
    decimals: int = 3  # shown after the point (the seed uses 3)
    hand: bool = False  # every intermediate rounded to the shown decimals before it is used
    whatif: bool = False  # the current query row's softmax with and without scaling, at wider heads
    decode: bool = False  # a side view (the KV cache or FlashAttention's tiles) instead of the operation trace
    decode_step: int = 0  # the step in the side view: a prefill/decode step, or a tile operation
    side: str = "cache"  # which side view: "cache" (prefill, decode, paged cache) or "tiles" (FlashAttention)
    schedule: str = "prefill"  # the cache view's schedule: "prefill", "chunked" or "tokens"
    quiz: Score | None = None  # predict-then-reveal is on when this is set
    question: Question | None = None  # what the learner is being asked now; its result is hidden
    message: str = ""  # the quiz's last word to the learner


@dataclass(frozen=True)
class Frame:
    explanation: Explanation
    focus: list[PaneSpec]
    extra: list[PaneSpec]
    notes: tuple[str, ...]  # lines added under the explanation (hand rounding, what-if)
    description: str  # the scenario's description, on its first screen


class Presenter:
    """Builds Frames (what one screen shows, as plain data); keeps each mode's traces and views, so toggling back is free."""

    def __init__(self, comp: Computation, trace: Trace | None = None) -> None:
        self.comp = comp
        self.exact = trace if trace is not None else Trace(comp)
        self._views: dict[int | None, View] = {None: View(self.exact)}
        self._decoded: dict[str, Decode] = {}
        self._tiled: dict[int, TiledHead] = {}

    def view(self, modes: Modes) -> View:
        key = modes.decimals if modes.hand else None
        if key not in self._views:
            assert key is not None
            self._views[key] = View(Trace(compute_hand(self.comp, key)))
        return self._views[key]

    @property
    def decoded(self) -> Decode:
        return self.decoding("prefill")

    def decoding(self, schedule: str) -> Decode:
        if schedule not in self._decoded:
            self._decoded[schedule] = decode(self.comp, schedule)
        return self._decoded[schedule]

    def tiles(self, head: int) -> TiledHead:
        if head not in self._tiled:
            self._tiled[head] = tiled(self.comp, head)
        return self._tiled[head]

    def side_steps(self, modes: Modes, head: int) -> int:
        """Steps of the side view in force: decode steps, or tile operations (the same for every head)."""
        if modes.side == "tiles":
            return len(self.tiles(head))
        return self.decoding(modes.schedule).count

    def frame(self, pos: Position, modes: Modes) -> Frame:
        if modes.decode:
            step = min(modes.decode_step, self.side_steps(modes, pos.head) - 1)
            if modes.side == "tiles":
                th = self.tiles(pos.head)
                focus, extra = tiled_panes(th, step, modes.decimals)
                return Frame(tiled_explanation(th, step, modes.decimals), focus, extra, (), "")
            dec = self.decoding(modes.schedule)
            focus, extra = decode_panes(dec, step, pos.head, modes.decimals)
            return Frame(decode_explanation(dec, step, pos.head, modes.decimals), focus, extra, (), "")
        view = self.view(modes)
        hidden = modes.question is not None and modes.question.index == pos.index
        focus, extra = view.panes(pos, modes.decimals, overview=True, hide_current=hidden)
        ex = view.explain(pos, modes.decimals)
        if hidden:  # the learner predicts: no result, no details that give it away (teach/quiz.py)
            assert modes.question is not None
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
        return Frame(ex, focus, extra, tuple(notes), description)

    def _closing(self, pos: Position, modes: Modes) -> list[str]:
        """After the last operation: what was computed, where each token looked, the checks, what next."""
        lines = list(closing_summary(self.comp, pos.head, len(self.exact), modes.decimals))
        others = ["m the map of every row"] if self.comp.scenario.n > MAX_ROWS else []
        if len(self.comp.heads) > 1:
            others.append("tab another head")
        others += ["k the KV cache", "t FlashAttention's tiles", "home then p to predict every result"]
        lines.append("Next: " + " · ".join(others))
        return lines

    def _whatif(self, pos: Position, modes: Modes) -> list[str]:
        op = self.exact.op(pos.index, modes.decimals)
        sc = self.comp.scenario
        # the query row being worked on; outside the per-row stages, the first row
        row = op.row if op.segment.stage in ("score", "scale", "softmax", "mix") and op.row is not None else 0
        # the table is built from the row's scores: before they are all computed it would show the future
        if self.exact.filled("scores", pos.head, pos.index) < (row + 1) * sc.m:
            return [f"what if (w): the scaling table for row {sc.labels[row]} appears once its scores are all"
                    " computed (stage Score)"]
        return whatif_lines(self.comp.heads[pos.head], sc.allow, row, sc.labels[row], sc.key_labels, modes.decimals)
