"""What the learner has switched on: decimals, hand rounding, the what-if table, the view in
front (the operation trace or one of the side views of display/side_views.py) and the quiz."""

from __future__ import annotations

from typing import TYPE_CHECKING

from qkv_tui.base.fixed import fixed

if TYPE_CHECKING:  # the quiz's module loads when the quiz is first switched on, not with the first screen
    from qkv_tui.teach.quiz import Question, Score

MIN_DECIMALS, MAX_DECIMALS = 1, 8  # at 0 a weight row reads 0 0 0: it must visibly sum to 1
TRACE = "trace"  # the operation trace: the view that is no side view
PROSE = ("shown", "hidden", "blank")  # what f cycles through (display/presenting.py)


@fixed(eq=True)
class Modes:
    """The display's switches: decimals, hand rounding, what-if and the side view in front."""

    decimals: int = 3  # shown after the point (the seed uses 3)
    hand: bool = False  # every intermediate rounded to the shown decimals before it is used
    whatif: bool = False  # the current query row's softmax with and without scaling, at wider heads
    view: str = TRACE  # the view in front: the trace, or a side view's name ("cache", "tiles")
    side_step: int = 0  # the step in the side view: a prefill/decode step, or a tile operation
    schedule: str = "prefill"  # the cache view's schedule: "prefill", "chunked" or "tokens"
    quiz: Score | None = None  # predict-then-reveal is on when this is set
    question: Question | None = None  # what the learner is being asked now; its result is hidden
    message: str = ""  # the quiz's last word to the learner
    quiz_view: str = TRACE  # the view the quiz was switched on in: it asks there only, and keeps its score
    prose: str = "shown"  # one of PROSE: the explanation's sentences, or all but the stage bar, put away
    heads_layer: int | None = None  # the heads view's layer of a model ([ ]); None: the scenario's own

    @property
    def side(self) -> bool:
        """A side view is in front (the trace's keys and its quiz do not act there)."""
        return self.view != TRACE

    @property
    def asking(self) -> bool:
        """The quiz is on in the view in front (the score stays while another view is open)."""
        return self.quiz is not None and self.quiz_view == self.view
