"""What a side view is: a screen beside the operation trace, stepped on its own (→ ←, home, end),
opened by its key and closed by the same key again.

Each view is one module that holds what it draws (display/decode_view.py, tiled_view.py) and one
``SideView`` entry in display/side_views.py (its key, words and help), which imports the module the
first time the view is used. The app's keys, the command palette, the help, the screenshots'
names and the closing summary's "Next:" line all walk that list, so a new view needs nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Protocol, TypeVar

from qkv_tui.base.fixed import fixed
from qkv_tui.core.engine import Computation
from qkv_tui.core.scenario import Scenario
from qkv_tui.display.frame import Frame
from qkv_tui.display.modes import Modes

T = TypeVar("T")


class Sources(Protocol):
    """What a side view builds from: the computation, and a store that keeps what was built for it
    (a decode per schedule, a tiling per head), so stepping and toggling back cost nothing."""

    @property
    def comp(self) -> Computation: ...

    def kept(self, key: Hashable, build: Callable[[], T]) -> T: ...


@fixed
class SideView:
    """A view shown in place of the trace, and the keys and words that name it."""

    name: str  # Modes.view while it is open; also its word in a screenshot's name
    key: str  # the key that opens it (and, pressed again, returns to the trace)
    label: str  # the footer's word for that key
    title: str  # its entry in the command palette
    summary: str  # the palette's line under the title, after "key: "
    closing: str  # how the last operation's "Next:" line names it, after its key ("": not named there)
    help: tuple[tuple[str, str], ...]  # its rows in the help's table of keys: (keys, what they do)
    steps: Callable[[Sources, Modes, int], int]  # how many steps it has, for a head
    frame: Callable[[Sources, Modes, int, int], Frame]  # the screen at (step, head); step < steps
    shot: Callable[[Modes], str]  # its part of a screenshot's name ("cache", "cache-chunked", "tiles")
    option: Callable[[Modes], Modes] | None = None  # what c does in it (the cache's schedules), if anything
    asks: str = ""  # the start of the line its quiz asks about ("" the first): the number the step computes
    # None: it has something to show for every scenario. Else only where this says so (the Train view needs
    # [backward]): its help row, palette entry and closing line appear only there, and its key is kept out
    # of the footer, so no other scenario's screens change
    applies: Callable[[Scenario], bool] | None = None
    # its own meaning for a trace key ("next_stage", "prev_stage", "row+1", "row-1") given the maps across a row
    # of its grid: the modes after it, or None where the key does nothing there (the heads view's [ ] and ↑ ↓)
    act: Callable[[Sources, Modes, str, int], Modes | None] | None = None
    # what enter opens: (a computation to show instead of the app's, or None; the head whose trace opens)
    enter: Callable[[Sources, Modes], tuple[Computation | None, int]] | None = None
    per_head: bool = True  # the trace's head in view names its screenshots ("-head2"); False where its step does
    in_footer: bool = True  # its key shows in the footer (the heads view's only in the help and the palette)
    quiz: bool = True  # p asks here (a line of it works out a number); False: p does nothing in this view
    # the step it opens at, given the trace's head: the heads view opens on that head (None: its first step)
    opening: Callable[[Sources, Modes, int], int] | None = None
    # whether it has nothing to show for this computation, only one line that says why (a part refuses it, a state
    # has no tiles): the "Next:" line leaves it out, and there no step, head or quiz key acts (key_state; None: never)
    empty: Callable[[Sources], bool] | None = None


# the trace's keys that move in the trace only: a side view gives them a meaning of its own (act) or none
TRACE_ONLY = ("row", "next_stage", "prev_stage", "stage", "goto", "hand", "whatif")
_OTHER_WAY = {"next_stage": ("prev_stage", ()), "prev_stage": ("next_stage", ())}
# what never acts on a view with nothing to show (its one line): a step, a head, the quiz (nothing to predict), the
# view's option, the decimals (no number), autoplay; its key and Esc leave it, and help, quit and the rest still act
NOT_ON_EMPTY = (*TRACE_ONLY, "next", "prev", "first", "last", "head", "quiz", "option", "side_enter", "decimals",
                "autoplay", "explain_page")


def is_empty(view: SideView, sources: Sources) -> bool:
    """Whether the view shows only the line that says why it has nothing here (SideView.empty), asked once."""
    empty = view.empty
    return empty is not None and sources.kept(("empty", view.name), lambda: empty(sources))


def key_state(view: SideView, action: str, parameters: tuple[object, ...],
              acts: Callable[[str, tuple[object, ...]], bool], empty: bool = False) -> bool | None:
    """What a trace key is in a side view, as Textual's check_action reads it: True it acts now; None a key
    of the view that does nothing just now (at an end: shown greyed); False a key that never acts in this
    view (left out of the footer, which lists only what acts there). ``acts(action, parameters)``: whether
    the view's own meaning for that key (SideView.act) does something now; ``empty``: the view shows one line
    here (is_empty), so none of NOT_ON_EMPTY acts.

    Keys other than the trace's own (→ ←, the views' keys, help, quit) are decided elsewhere: True here."""
    if empty:
        return action not in NOT_ON_EMPTY
    if action == "head" and not view.per_head:  # the view's step is the head: the trace's head is behind it
        return False
    if action == "quiz" and not view.quiz:
        return False
    if action not in TRACE_ONLY:
        return True
    if acts(action, parameters):
        return True
    other = ("row", (-parameters[0],)) if action == "row" and parameters and isinstance(parameters[0], int) \
        else _OTHER_WAY.get(action)
    return None if other is not None and acts(*other) else False
