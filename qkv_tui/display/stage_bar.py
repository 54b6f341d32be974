"""The stage bar's rule: which stages and how much of the title a width has room for (no Textual).

``I love AI  1 Embed › 2 Project › [3 Score] › …``: the title tells scenarios apart and the current
stage says where the learner is, so both are on the bar at every width. What gives way, in order:
the other stages' names (a stage with a key keeps the key: "1 Embed" becomes "1"), the title's
length, then the stages far from the current one, which become one "…" on each side. A scenario
with many stages (a backward pass, a model's layers) has stages past the tenth with no key, so
only the last step can make its bar fit.
"""

from __future__ import annotations

from collections.abc import Sequence

from qkv_tui.base.fixed import fixed
from qkv_tui.core.fmt import cell_len
from qkv_tui.display.text import shorten

TITLE_FLOOR = 12  # the title is shortened to no fewer cells than this before stages far from the current one go
ELIDED = "…"  # stands for a run of stages left off the bar
SEPARATOR = " › "
TITLE_GAP = 4  # the title's padding (a cell each side) and the two cells after it


@fixed
class Bar:
    """What the bar shows: the title (shortened, or "" when the scenario has none) and its pieces,
    each (text, state) with state one of "current", "done", "todo"; an elided run is ("…", "done"/"todo")."""

    title: str
    pieces: tuple[tuple[str, str], ...]

    @property
    def plain(self) -> str:
        head = f" {self.title} " + "  " if self.title else ""
        return head + SEPARATOR.join(f" {text} " if state == "current" else text for text, state in self.pieces)

    @property
    def width(self) -> int:
        return cell_len(self.plain)


FORMULA = frozenset("−+·×/(=")  # a name that is a formula ("1 − λ_init") starts with a number and then one of these


def short(label: str) -> str:
    """A stage's label without its name: "1 Embed" is "1"; a stage with no key keeps its first word ("dScore",
    "tile scores" is "tile"), but a name that is a formula stays whole: "1 − λ_init" (stage 13 of [differential], not
    key 1's "1"), and "d(1 − λ_init)", never cut to "d(1"."""
    first, _, rest = label.partition(" ")
    if not rest or (first.isdigit() and rest[0] in FORMULA) or first.count("(") != first.count(")"):
        return label
    return first


def _pieces_width(pieces: Sequence[tuple[str, str]]) -> int:
    cells = sum(cell_len(text) + (2 if state == "current" else 0) for text, state in pieces)
    return cells + cell_len(SEPARATOR) * max(len(pieces) - 1, 0)


def _labelled(stages: Sequence[tuple[str, str]], full: bool) -> list[tuple[str, str]]:
    return [(label if full or state == "current" else short(label), state) for label, state in stages]


def _window(stages: list[tuple[str, str]], lo: int, hi: int) -> list[tuple[str, str]]:
    """Stages lo … hi, with a "…" for each run left off on either side (one stage no wider than "…" stays)."""
    before, after = stages[:lo], stages[hi + 1:]
    pieces: list[tuple[str, str]] = []
    if len(before) == 1 and cell_len(before[0][0]) <= 1:
        pieces += before
    elif before:
        pieces.append((ELIDED, "done" if all(s != "todo" for _, s in before) else "todo"))
    pieces += stages[lo:hi + 1]
    if len(after) == 1 and cell_len(after[0][0]) <= 1:
        pieces += after
    elif after:
        pieces.append((ELIDED, "todo" if all(s != "done" for _, s in after) else "done"))
    return pieces


def _with_title(title: str, pieces: list[tuple[str, str]], width: int) -> Bar:
    room = width - _pieces_width(pieces) - TITLE_GAP
    return Bar(shorten(title, room) if title else "", tuple(pieces))


def fit_bar(title: str, stages: Sequence[tuple[str, str]], width: int) -> Bar:
    """The bar for ``stages`` ((label, state) each, one of them "current") at ``width`` cells.

    The current stage and the title (at least its first letter and "…") are always there, and the
    bar is never wider than ``width`` once that has room for them (50 columns, the app's least, has).
    """
    tlen = cell_len(title)
    for full, least in ((True, tlen), (False, tlen), (False, min(tlen, TITLE_FLOOR))):
        pieces = _labelled(stages, full)
        if _pieces_width(pieces) + (TITLE_GAP + least if title else 0) <= width:
            return _with_title(title, pieces, width)
    labelled = _labelled(stages, False)
    current = next((i for i, (_, state) in enumerate(stages) if state == "current"), None)
    if current is None:  # nothing is current: keep the first stages that fit
        current = 0
    least = TITLE_GAP + min(tlen, TITLE_FLOOR) if title else 0
    lo = hi = current
    while True:  # widen the window a stage at a time, the next stage first, then the one before
        grown = False
        for before, after in ((0, 1), (1, 0)):
            nlo, nhi = lo - before, hi + after
            if nlo >= 0 and nhi < len(labelled) and _pieces_width(_window(labelled, nlo, nhi)) + least <= width:
                lo, hi, grown = nlo, nhi, True
        if not grown:
            break
    pieces = _window(labelled, lo, hi)
    if not title:
        return Bar("", tuple(pieces))
    room = width - _pieces_width(pieces) - TITLE_GAP
    if room < 2:  # not even "I…" beside the current stage and its "…": the current stage's name gives way
        at = next((i for i, (_, state) in enumerate(pieces) if state == "current"), 0)
        text, state = pieces[at]
        pieces[at] = (shorten(text, max(cell_len(text) - (2 - room), 1)), state)
        room = width - _pieces_width(pieces) - TITLE_GAP
    return Bar(shorten(title, max(room, 1)), tuple(pieces))
