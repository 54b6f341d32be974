"""Session: the app as the live instrument (ui/live.py) sees it, an App with one scenario, its
computation, one position and one set of modes, and the moves that change them.

QKVApp (ui/app.py) is a Session; Live is given one, so it names no app class and app.py and
live.py do not import each other. Live changes the app only through what is declared here:
``install`` swaps the computation, ``move_to`` and the actions move, ``modes`` is replaced whole.
"""

from __future__ import annotations

from textual.app import App
from textual.geometry import Size
from textual.reactive import reactive

from qkv_tui.core.engine import Computation
from qkv_tui.core.scenario import Scenario
from qkv_tui.display.modes import Modes
from qkv_tui.display.presenter import Presenter
from qkv_tui.teach.stepper import Position, Stepper
from qkv_tui.teach.trace import Trace


class Session(App[None]):
    """The state Live reads, and the public moves it makes (QKVApp implements them)."""

    position: reactive[Position] = reactive(Position(0, 0), init=False, repaint=False)
    """The current operation and the head in view."""

    modes: reactive[Modes] = reactive(Modes(), init=False, repaint=False)
    """Decimals, hand rounding, what-if, the view in front and the quiz: what the learner has switched on."""

    scenario: Scenario
    comp: Computation
    trace: Trace
    stepper: Stepper
    presenter: Presenter
    ready: bool  # the widgets exist: after mount, and until the app begins to exit

    @property
    def term(self) -> Size:
        """The terminal's size, as of the latest resize (App.size lags one resize behind)."""
        raise NotImplementedError

    @property
    def at_end(self) -> bool:
        """Nothing further to step to, in the view in front."""
        raise NotImplementedError

    def redraw(self) -> None:
        """Make every widget show the current position and modes."""
        raise NotImplementedError

    def install(self, scenario: Scenario, comp: Computation, position: Position | None = None) -> None:
        """Show another computation; the position is kept where it still exists."""
        raise NotImplementedError

    def move_to(self, position: Position) -> None:
        """Go somewhere in the trace (a pending quiz question is left unanswered)."""
        raise NotImplementedError

    # the actions the command palette and autoplay run (each a key of the app's too)
    def action_next(self) -> None:
        raise NotImplementedError

    def action_prev(self) -> None:
        raise NotImplementedError

    def action_next_stage(self) -> None:
        raise NotImplementedError

    def action_prev_stage(self) -> None:
        raise NotImplementedError

    def action_first(self) -> None:
        raise NotImplementedError

    def action_last(self) -> None:
        raise NotImplementedError

    def action_goto(self) -> None:
        raise NotImplementedError

    def action_stage(self, number: int) -> None:
        raise NotImplementedError

    def action_side(self, name: str) -> None:
        raise NotImplementedError

    def action_quiz(self) -> None:
        raise NotImplementedError

    def action_whatif(self) -> None:
        raise NotImplementedError

    def action_hand(self) -> None:
        raise NotImplementedError

    def action_decimals(self, by: int) -> None:
        raise NotImplementedError

    def action_heatmap(self) -> None:
        raise NotImplementedError

    def action_notes(self) -> None:
        raise NotImplementedError

    def action_help(self) -> None:
        raise NotImplementedError
