"""Text as a terminal can show it: control characters made visible (no Textual, no Rich).

A scenario's labels and names are the author's own words. A newline, a tab or an escape
byte inside one would start a new screen line or a terminal command in the middle of a
pane, so each is drawn as its Unicode "control picture" (newline as ␊), one cell wide,
like the character it stands for.
"""

from __future__ import annotations

import re
import unicodedata

from qkv_tui.core.fmt import cell_len

REPLACEMENT = "\ufffd"  # �: C1 controls and line separators have no picture of their own
_PICTURES = {**{i: chr(0x2400 + i) for i in range(0x20)}, 0x7F: "\u2421"}  # ␀ … ␟, ␡


def pictured(text: str) -> str:
    """``text`` with every control character and line separator replaced by a visible one."""
    if text.isprintable() or not any(_is_control(ch) for ch in text):
        return text
    return "".join(_PICTURES.get(ord(ch), REPLACEMENT) if _is_control(ch) else ch for ch in text)


def _is_control(ch: str) -> bool:
    return unicodedata.category(ch) in ("Cc", "Zl", "Zp")


# --- wrapping arithmetic at term boundaries ----------------------------------------------

# Where a long line may break, strongest first. A break goes before an operator (the next
# line starts "= 1.414" or "+ 0.707·0") and after punctuation (a line ends "row max 2.887;").
# Inside brackets and parentheses nothing breaks: "e^(0.577 − 2.887)" and "[1, 0, 1]" stay whole.
_BEFORE = {"→": 0, "|": 1, "=": 2, "≈": 2, "+": 3, "−": 3, "-": 3, "·": 3, "/": 3, "×": 3, "≤": 3, "≥": 3, "<": 3, ">": 3}
_AFTER = {";": 0, ":": 0, ",": 1}
_WORD = 4  # an ordinary space between words of prose


def wrap(text: str, width: int, indent: int = 2, prose: bool = False) -> list[str]:
    """``text`` cut into lines of at most ``width`` cells, continuation lines indented by ``indent``.

    Arithmetic breaks only between terms (before an operator, after a comma or colon, never
    inside brackets), preferring the strongest boundary that still fills at least half the line;
    a single term wider than the line is cut by cells as a last resort. ``prose`` fills each
    line with as many words as fit: a sentence reads best without early breaks at its commas.
    """
    width = max(width, 1)
    lead = min(len(text) - len(text.lstrip(" ")), width // 2)  # a line's own indent is kept, and hangs
    indent = min(lead + indent, width // 2)
    if prose:  # every space is a place to break, brackets' too
        pieces = [(piece, _WORD) for piece, _ in _words(text.lstrip(" "), depth_limit=len(text))]
    else:
        pieces = _words(text.lstrip(" "))
    lines: list[str] = []
    start = 0
    while start < len(pieces):
        room = width - lead if not lines else width - indent
        end, used = start, 0  # pieces[start:end] fit in ``used`` cells
        while end < len(pieces):
            size = cell_len(pieces[end][0].lstrip(" ") if end == start else pieces[end][0])
            if used + size > room and end > start and size > width - indent:
                # a term no line can hold: open it up here rather than start a line it will overflow
                inner = _opened(pieces[end][0])
                if len(inner) > 1:
                    pieces[end:end + 1] = [(inner[0][0], pieces[end][1]), *inner[1:]]
                    continue
            if used + size > room:
                break
            used += size
            end += 1
        if end == start:  # one term wider than the line: break inside its brackets, at commas, or cut it
            inner = _opened(pieces[start][0])
            if len(inner) > 1:
                pieces[start:start + 1] = [(inner[0][0], pieces[start][1]), *inner[1:]]
                continue
            head, rest = _cut(pieces[start][0].lstrip(" "), room)
            lines.append(head)
            pieces[start] = (rest, pieces[start][1])
            continue
        if end < len(pieces):  # move the break back to a stronger boundary in the line's second half
            best, level, width_at = end, pieces[end][1], used
            for k in range(end - 1, start, -1):
                width_at -= cell_len(pieces[k][0])
                if width_at < room // 2:
                    break
                if pieces[k][1] < level:
                    best, level = k, pieces[k][1]
            end = best
        lines.append("".join(piece for piece, _ in pieces[start:end]).strip(" "))
        start = end
    if not lines:
        lines.append("")
    return [" " * lead + lines[0], *(" " * indent + rest for rest in lines[1:])]


def _words(text: str, depth_limit: int = 0) -> list[tuple[str, int]]:
    """``text`` as (piece, strength of the boundary before it); the pieces joined give the text back.

    A boundary is a run of spaces outside brackets (or at most ``depth_limit`` deep, for a
    term too long for any line); the piece after it starts with the spaces.
    """
    pieces: list[tuple[str, int]] = []
    depth = 0
    start, level = 0, _WORD
    n = len(text)
    for k, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(depth - 1, 0)
        elif ch == " " and depth <= depth_limit and k > start and text[k - 1] != " " and text[start:k].strip():
            after = k
            while after < n and text[after] == " ":
                after += 1
            if after == n:
                break
            prev, nxt = text[k - 1], text[after]
            standalone = after + 1 == n or text[after + 1] == " "
            if nxt in _BEFORE and standalone:
                boundary = _BEFORE[nxt]
            elif prev in _AFTER:
                boundary = _AFTER[prev]
            elif prev in _BEFORE and (k < 2 or text[k - 2] == " "):
                continue  # just after an operator: a line never ends with "=" or "+"
            else:
                boundary = _WORD
            pieces.append((text[start:k], level))
            start, level = k, boundary
    pieces.append((text[start:], level))
    return pieces


def _opened(term: str) -> list[tuple[str, int]]:
    """A term too wide for a line, split at its shallowest brackets that have a boundary inside:
    ``softmax([0.707, 3.536, …])`` opens inside the list, never inside a number."""
    for depth in range(1, term.count("(") + term.count("[") + term.count("{") + 1):
        inner = _words(term, depth_limit=depth)
        if len(inner) > 1:
            return inner
    return [(term, _WORD)]


def _cut(text: str, room: int) -> tuple[str, str]:
    """The first ``room`` cells of ``text`` and the rest."""
    used = 0
    for k, ch in enumerate(text):
        used += cell_len(ch)
        if used > room:
            return text[:k], text[k:]
    return text, ""


def shorten(text: str, width: int) -> str:
    """``text`` in at most ``width`` cells: whole, or cut (at a word where one is near) and ended with "…"."""
    if cell_len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    head, _ = _cut(text, width - 1)
    space = head.rfind(" ")
    if space >= (width - 1) * 2 // 3:  # a cut between words reads better, if it loses little
        head = head[:space]
    return head.rstrip(" ,;:·-") + "…"


def title_variants(title: str) -> list[str]:
    """A pane's title from fullest to tightest: ``Q = X·W_Q  3×3`` … ``Q=X·W_Q 3×3`` … ``Q 3×3`` … ``Q``.

    The formula and the shape are the point of a title: first the spaces go, then the
    words that only describe (``(embeddings)``, ``+causal mask``), then the formula;
    the shape stays until only the name is left.
    """
    base, _, shape = title.rpartition("  ")
    if not base:
        base, shape = title, ""
    # a remark in parentheses goes whole ("(context, computed once)"), a formula's own brackets stay: a bracket
    # an operator follows is a factor ("output = (1 − λ_init)·normed" read "output =·normed")
    remarks = re.sub(r" +\([^()]*\)(?=\s|$)", "", base)
    plain = " ".join(word for word in remarks.split(" ") if not word.startswith("+") and word != "mask")
    tight = plain.replace(" = ", "=")
    name = base.split(" = ")[0].split(" (")[0]
    variants = [title, f"{base} {shape}", f"{plain} {shape}", f"{tight} {shape}", f"{name} {shape}", name]
    out: list[str] = []
    for v in variants:
        v = v.strip()
        if v and v not in out:
            out.append(v)
    return out
