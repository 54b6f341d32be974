"""The formula line's rule: softmax(QKᵀ/√dₖ)V with the part being computed marked, where we are, and
the flags, in the fewest cells a width needs (no Textual).

A narrow terminal gets the same facts in fewer cells: tighter gaps, the formula without the parts not
being computed after V, shorter flags and head name, and at last no formula. Where we are (stage,
operation, layer, head) is never cut. A part with nothing to say (a side view's empty counter, a page
with no formula) leaves no separator and no gap behind: never "Train ·    [3 dp]".
"""

from __future__ import annotations

from qkv_tui.base.fixed import fixed
from qkv_tui.core.fmt import cell_len
from qkv_tui.display.text import pictured, shorten
from qkv_tui.display.view import Explanation

SEPARATOR = " · "


@fixed
class Fit:
    """One way of writing the formula line, from roomiest to tightest."""

    gap: str = "   "  # between the formula, where we are, and the flags
    tail: bool = True  # the formula's parts after V (→ concat·W_O) even when not being computed
    compact_flags: bool = False  # [3dp·by hand] rather than [3 dp · by hand]
    name: int = 0  # cells the head's name is cut to; 0 = whole
    formula: bool = True
    short_layer: bool = False  # a model's layer as "L2" rather than "layer 2"


FITS = (Fit(), Fit(gap="  "), Fit(gap="  ", tail=False), Fit(gap="  ", tail=False, compact_flags=True),
        Fit(gap="  ", tail=False, compact_flags=True, name=8),
        Fit(gap="  ", tail=False, compact_flags=True, name=8, short_layer=True),  # the formula's room, from the layer
        # without the formula there is room for the head's name again (a model's "layer 2 · head 2 (2/4)")
        Fit(gap=" ", tail=False, compact_flags=True, formula=False),
        Fit(gap=" ", tail=False, compact_flags=True, name=8, formula=False),
        Fit(gap=" ", tail=False, compact_flags=True, name=4, formula=False))

# each piece is (text, look): "" plain, or one of the line's looks (qkv.tcss: formula--NAME), "bold"
Piece = tuple[str, str]


def status_pieces(ex: Explanation, flags: str, fit: Fit) -> list[Piece]:
    """The line as pieces, the parts that say something joined by the fit's gap, a leading blank first."""
    formula: list[Piece] = []
    if fit.formula:
        after_v = False
        for piece, active in ex.formula:
            if after_v and not fit.tail and not active:
                continue
            formula.append((piece, "active" if active else "formula"))
            after_v = after_v or piece == "V"
    if formula:  # a view whose pieces carry their own spacing ("dV += Pᵀ·dO ") ends where its words do
        formula[-1] = (formula[-1][0].rstrip(), formula[-1][1])
    where: list[Piece] = []
    name, _, count = ex.head_label.rpartition(" (")
    head = ""
    if ex.head_label:
        name = pictured(name)
        head = f"{shorten(name, fit.name) if fit.name else name} ({count}"
    layer = ex.layer.replace("layer ", "L") if fit.short_layer else ex.layer
    for text, look in ((ex.stage_label, "stage"), (ex.counter, "bold"), (layer, "head"), (head, "head")):
        if text:
            where += [(SEPARATOR, "")] * bool(where) + [(text, look)]
    if flags and fit.compact_flags:
        flags = flags.replace(" dp", "dp").replace(" · ", "·")
    pieces: list[Piece] = [(" ", "")]
    for part in (formula, where):
        if part:
            pieces += [(fit.gap, "")] * (len(pieces) > 1) + part
    if flags:  # the gap before the flags in their look, as it always was (the screenshots' runs stay whole)
        pieces.append(((fit.gap if len(pieces) > 1 else "") + f"[{flags}]", "muted"))
    return pieces


def plain(pieces: list[Piece]) -> str:
    return "".join(text for text, _ in pieces)


def fit_status(ex: Explanation, flags: str, width: int) -> list[Piece]:
    """The roomiest way of writing the line that fits ``width`` (the tightest, cut by the widget, if none does)."""
    for fit in FITS:
        pieces = status_pieces(ex, flags, fit)
        if cell_len(plain(pieces)) <= width:
            return pieces
    return pieces
