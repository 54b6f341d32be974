"""A worksheet as Typst source, and as a PDF typeset in-process by the ``typst`` package (``qkv-tui[pdf]``).

It lays out the blocks of :mod:`qkv_tui.edges.worksheet.sheet`: tables with their numbers right-aligned,
formulas set as math (:mod:`qkv_tui.edges.worksheet.render.formulas`), a name and date line at the top, the answer key
on a page of its own. Every piece of text goes into the source as a string literal (``#"…"``), never as
markup, so a title full of ``#``, ``$`` or ``*`` prints as written.
"""

from __future__ import annotations

import itertools
import math
import re

from qkv_tui.edges.worksheet.content import Blank
from qkv_tui.edges.worksheet.render.formulas import IDENTIFIER, pieces, to_typst, typst_string
from qkv_tui.edges.worksheet.sheet import Grid, Heading, Lines, Sheet, items, minus

EXTRA = "pip install 'qkv-tui[pdf]'"
KEEP = 30  # rows up to which a table is never split across pages
WIDE = 9  # columns beyond which a table gets a landscape page of its own, so sixteen keys fit across


class TypesetError(RuntimeError):
    """Typst refused the page: a formula this writer got wrong. One line, never a traceback."""


class MissingExtraError(RuntimeError):
    """The ``typst`` package is not installed."""


BODY = 9  # pt: the floor for anything a student reads or writes in (tests/test_worksheet_fits_two_pages.py)
MARGIN = 1.0  # cm on every side: room to hold the sheet, no more, so a one-head backward sheet is one page
_PREAMBLE = """#set document(title: {title}, date: none)
#set page(paper: "a4", margin: MARGINcm, numbering: "1 / 1")
#set text(font: "New Computer Modern", size: BODYpt, lang: "en")
#set par(justify: false, leading: 0.4em, spacing: 0.6em)
#set list(spacing: 0.25em, indent: 0pt, body-indent: 0.4em)
#set block(spacing: 0.45em)
#set table(stroke: 0.4pt + luma(120), inset: (x: 3pt, y: 1.1pt))
#show heading: set block(above: 0.8em, below: 0.4em)
#show heading.where(level: 1): set text(size: 12pt)
#show heading.where(level: 2): set text(size: 10.5pt)
""".replace("MARGIN", str(MARGIN)).replace("BODY", str(BODY))


def _text(text: str) -> str:
    if "--" in text:  # the font's TeX ligatures would set --export as an en dash: –export
        return f"#text(ligatures: false, {typst_string(text)})"
    return "#" + typst_string(text) if text else ""


def _prose(text: str, names: tuple[str, ...] = ()) -> str:
    """Words as text, the formulas among them as math (never the scenario's own ``names``), a setting's name
    (``num_heads``) as code."""
    return "".join(to_typst(piece) if formula else _words(piece, names) for formula, piece in pieces(text, names))


def _words(text: str, names: tuple[str, ...]) -> str:
    if not any(IDENTIFIER.search(name) for name in names) and IDENTIFIER.search(text):
        parts = IDENTIFIER.split(text)
        codes = [f"#raw({typst_string(code)})" for code in IDENTIFIER.findall(text)]
        return "".join(_text(part) + (codes[k] if k < len(codes) else "") for k, part in enumerate(parts))
    return _text(text)


def _label(text: str, names: tuple[str, ...]) -> str:
    """A row label or heading: the page's own names with a subscript (``γ_q``, ``W_O``) set as math, never a literal
    ``_``; the scenario's words as written."""
    return _prose(text, names) if "_" in text and text not in names else _text(text)


def _cell(page: Sheet, value: str | Blank, wide: bool = False) -> str:
    if isinstance(value, Blank):
        line = "1.8em" if wide else "2.6em"  # room to write the number in, on the line of its label
        # no taller than a digit, so a row with a blank is as tall as one without and the page's height does not
        # depend on which cells --seed left blank
        return f"[#{typst_string(f'({value.number})')}#h(0.3em)#box(width: {line}, height: 0.6em, stroke: (bottom: 0.5pt))]"
    return f"[{_text(minus(value))}]"


def _table(page: Sheet, block: Grid) -> str:
    t = block.table
    columns = page.columns(t)
    cols = len(columns)
    header = ", ".join([f"[{_prose(t.name, page.names)}]", *(f"[*{_label(t.cols[j], page.names)}*]" for j in columns)])
    wide = cols > WIDE
    rows = []
    for i, label in enumerate(t.rows):
        cells = [_cell(page, page.cell(t, i, j), wide) for j in columns]
        rows.append(", ".join([f"[*{_label(label, page.names)}*]", *cells]))
    size = "8pt" if wide else f"{BODY}pt"
    widths = f"(auto,) + (1fr,) * {cols}" if wide else str(cols + 1)  # never wider than the page
    body = ",\n    ".join(rows)
    inset = ", inset: (x: 2.5pt, y: 3.5pt)" if wide else ""
    return (f"#text(size: {size})[#table(columns: {widths}{inset}, align: (left,) + (right,) * {cols},\n"
            f"    table.header({header}),\n    {body})]")


def _lines(lines: tuple[str, ...] | list[str], names: tuple[str, ...]) -> list[str]:
    out = []
    for bullet, text in items(lines):
        out.append(f"- {_prose(text, names)}" if bullet else f"{_prose(text, names)}\n")
    return out


def _heading(text: str, level: int, names: tuple[str, ...] = ()) -> str:
    if "_" in text:  # a stage named for its matrix: W_O
        return f"#heading(level: {level})[{_label(text, names)}]"
    return f"#heading(level: {level}, {typst_string(text)})"


def _key(page: Sheet, alone: bool) -> list[str]:
    out = [_heading(f"Answer key: {page.title}" if alone else "Answer key", 1), "",
           "#set par(hanging-indent: 2em, spacing: 0.55em)", ""]
    if not page.key:
        out.append(_text("(No blanks on this page.)"))
    for b in page.key:
        out += [f"{_text(f'({b.number}) ')}{to_typst(b.working)}", ""]
    return out


def _questions(page: Sheet) -> list[str]:
    out = [f"#text(size: 13pt, weight: \"bold\")[{_text(f'Worksheet: {page.title}')}]", "",
           "#grid(columns: (auto, 1fr, auto, 5cm), column-gutter: 0.5em, align: bottom,"
           " [Name:], box(width: 100%, stroke: (bottom: 0.5pt))[#v(0.8em)], [Date:],"
           " box(width: 100%, stroke: (bottom: 0.5pt))[#v(0.8em)])", ""]
    text, formula, rest = page.lead
    # the description's words and the line under the title run on as one paragraph
    intro = f"{_prose(page.intro, page.names)} " if page.intro else ""
    out += [f"{intro}{_text(text)}{to_typst(formula) if formula else ''}{_text(rest)}", ""]
    out += _lines(page.rules, page.names)
    out.append("")
    heading = ""  # a section's heading waits for its first table, when that has a page of its own
    # tables so far, set side by side when they fit (_side_by_side), each with the name of the section it opens run
    # in before its caption: a row runs on across sections, so a section of one small table takes no line of its own
    narrow: list[tuple[str, Grid]] = []
    opens = ""  # the name of the section the next table opens, run in
    for n, block in enumerate(page.body):
        fits = isinstance(block, Grid) and _narrow(page, block)
        following = page.body[n + 1] if n + 1 < len(page.body) else None
        opens_narrow = isinstance(block, Heading) and isinstance(following, Grid) and _narrow(page, following)
        # lines that close a section whose tables wait for their row (the scale's rule after the inputs) are set above
        # that row, so the next section's tables may join it
        after = page.body[n + 2] if n + 2 < len(page.body) else None
        if (isinstance(block, Lines) and narrow and isinstance(following, Heading) and isinstance(after, Grid)
                and _narrow(page, after)):
            out += [*_lines(block.lines, page.names), ""]
            continue
        if not (fits or opens_narrow):
            out += _side_by_side(page, narrow)
            narrow = []
        if isinstance(block, Heading):
            if opens_narrow:
                opens = block.text
                continue
            heading = _heading(block.text, 2, page.names)
            if not (isinstance(following, Grid) and len(page.columns(following.table)) > WIDE):
                out += [heading, ""]
                heading = ""
        elif isinstance(block, Lines):
            out += [*_lines(block.lines, page.names), ""]
        elif isinstance(block, Grid) and fits:
            narrow.append((opens, block))
            opens = ""
        elif isinstance(block, Grid):
            table = _captioned(page, block)
            if len(page.columns(block.table)) > WIDE:
                table = f"#page(flipped: true)[{heading}\n\n{table}]" if heading else f"#page(flipped: true)[{table}]"
                heading = ""
            out += [table, ""]
    return out + _side_by_side(page, narrow)


def _narrow(page: Sheet, block: Grid) -> bool:
    return _width(page, block) <= LINE and len(block.table.rows) <= KEEP and len(page.columns(block.table)) <= WIDE


# the page's text width (A4 less the margins) and a table's room beside one or two others, in points
LINE = (21.0 - 2 * MARGIN) / 2.54 * 72
GUTTER = 12.0
HALF = (LINE - GUTTER) / 2
MOST = 6  # tables to a row at most
GAP = 1.0  # the space between two rows of tables, in lines
# a character of a caption in the 9pt font, generously; a bold one of a label; a cell's sides (3pt each and the
# rule); the blank's room to write in after its number (0.3em and 2.6em)
CHAR, BOLD_CHAR, INSET, LINE_ROOM = 4.4, 5.0, 6.4, 2.9 * BODY
# a sub- or superscript's character in a label set as math, and a capital's, in characters
SCRIPT, CAPITAL = 0.7, 1.5
# a printed number's glyphs in the 9pt font, in points (a digit, e and + half an em), as Typst sets them: a table's
# columns are as wide as their widest cell, and rows of tables are cut to fit the line by the sum, so a number's
# width is measured rather than guessed generously (a row one table shorter can cost the page a row)
NUMBER_GLYPH = {".": 2.5, "(": 3.5, ")": 3.5, "−": 7.0, "-": 7.0}
RUN_IN = 10.5  # pt: a section's name run in before its first table's caption, as large as a heading of its own
RUN_IN_CHAR = 6.6


def _chars(text: str) -> float:
    return len(text) + 0.5 * (text.count("-") + text.count("−"))


def _number_width(text: str) -> float:
    return sum(NUMBER_GLYPH.get(ch, BODY / 2) for ch in text)


def _label_chars(text: str, page: Sheet) -> float:
    """A label's length in characters as set, a capital wider than a character (CAPITAL: the W of ``dW_Q``). One set as
    math (_label: ``e^(λ_q1·λ_k1)``) drops the marks of its sub- and superscripts and the brackets around them and
    sets what they hold smaller (SCRIPT), and takes half a character more for the slant."""
    def chars(run: str) -> float:
        return len(run) + sum(ch.isupper() for ch in run) * (CAPITAL - 1)
    if "_" not in text or text in page.names:
        return chars(text)
    script = re.compile(r"[_^](\([^()]*\)|\w+'?)")
    small = re.sub(r"[_^()]", "", "".join(script.findall(text)))
    return chars(script.sub("", text)) + SCRIPT * chars(small) + 0.5


def _width(page: Sheet, block: Grid) -> float:
    """How wide a table prints, estimated from its longest cell in each column. A cell any seed may leave blank
    (Sheet.may_blank) counts as the wider of its number and a blank with the page's last number and its line, so
    the estimate, and the rows of tables cut from it (_rows), are the same whichever cells this seed left blank."""
    t = block.table
    if len(page.columns(t)) > WIDE:
        return LINE
    blank = _number_width(f"({len(page.key)})") + LINE_ROOM
    width = max(_label_chars(t.name, page), *(_label_chars(label, page) for label in t.rows)) * BOLD_CHAR + INSET
    for j in page.columns(t):
        cells = [max(_number_width(minus(t.text(i, j, page.ws.decimals))), blank if page.may_blank(t, i, j) else 0.0)
                 for i in range(len(t.rows))]
        width += max(_label_chars(t.cols[j], page) * BOLD_CHAR, *cells) + INSET
    return width


def _captioned(page: Sheet, block: Grid, opens: str = "") -> str:
    """A table under its caption; ``opens``: the name of the section it opens, set bold before the caption."""
    caption = f"{_prose(block.caption, page.names)}{_text(block.suffix)}{_text(':')}"
    if opens:
        caption = f"#text(size: {RUN_IN}pt, weight: \"bold\")[{_label(opens, page.names)}]#h(0.6em){caption}"
    # a table of a page or less stays with its caption, on one page
    breakable = "true" if len(block.table.rows) > KEEP else "false"
    # the caption sits close over its table, so the rows of tables of a --stages backward sheet take two pages
    return f"#block(breakable: {breakable})[#set block(spacing: 0.35em)\n{caption}\n\n{_table(page, block)}]"


def _side_by_side(page: Sheet, blocks: list[tuple[str, Grid]]) -> list[str]:
    """Consecutive tables, up to MOST to a row where each fits its share of the line (captions wrap within it), so a
    sheet of small tables takes a page or two rather than one column down many. Where the rows break is chosen, as
    a paragraph's lines are, to make the rows together shortest (_rows). A table that opens a section carries the
    section's name run in before its caption."""
    rows = _rows(page, blocks)
    out: list[str] = []
    for row in rows:
        if len(row) == 1:
            opens, block = row[0]
            out += [_captioned(page, block, opens), ""]
            continue
        columns = ", ".join(f"{w:.1f}pt" for w in _shares(page, row))
        cells = ", ".join(f"[{_captioned(page, b, opens)}]" for opens, b in row)
        out += [f"#grid(columns: ({columns}), column-gutter: {GUTTER}pt, align: top, {cells})", ""]
    return out


def _rows(page: Sheet, blocks: list[tuple[str, Grid]]) -> list[list[tuple[str, Grid]]]:
    """The tables cut into rows, in page order, that fit the line and are together the shortest (each row as tall as
    its tallest caption and table, _tall, and a line between rows): greedy filling can leave a long caption
    wrapping down a sliver of a row that the next row had room for."""
    best: list[tuple[float, int]] = [(0.0, 0)]  # for the first k tables: the least height, where their last row starts
    for k in range(1, len(blocks) + 1):
        options = []
        for start in range(k - 1, max(-1, k - 1 - MOST), -1):
            row = blocks[start:k]
            if len(row) > 1 and sum(_width(page, b) for _, b in row) + GUTTER * (len(row) - 1) > LINE:
                break
            options.append((best[start][0] + _tall(page, row) + GAP, start))
        best.append(min(options))
    cuts = []
    k = len(blocks)
    while k:
        cuts.append(k)
        k = best[k][1]
    starts = [0, *reversed(cuts)]
    return [blocks[a:b] for a, b in itertools.pairwise(starts)]


def _tall(page: Sheet, row: list[tuple[str, Grid]]) -> int:
    """A row's height in lines: its tallest caption, wrapped in its share of the line, and table."""
    return max(math.ceil(_caption_width(opens, b) / share) + len(b.table.rows) + 1
               for (opens, b), share in zip(row, _shares(page, row), strict=True))


def _caption_width(opens: str, block: Grid) -> float:
    """A caption's estimated width on one line, with the name of the section it opens run in before it."""
    return _chars(f"{block.caption}{block.suffix}:") * CHAR + (len(opens) + 1) * RUN_IN_CHAR * bool(opens)


def _shares(page: Sheet, row: list[tuple[str, Grid]]) -> list[float]:
    """Each table of a row its estimated width, then what is left of the line where it keeps the row shortest:
    the row is as tall as its tallest caption and table together, so a long caption over a short table gets the
    room to wrap in fewer lines before the rest is shared equally."""
    blocks = [b for _, b in row]
    widths = [_width(page, b) for b in blocks]
    room = LINE - GUTTER * (len(blocks) - 1)
    captions = [_caption_width(opens, b) for opens, b in row]
    rows = [len(b.table.rows) + 1 for b in blocks]
    for tall in range(max(rows) + 1, max(rows) + 1 + max(math.ceil(c / w) for c, w in zip(captions, widths, strict=True))):
        # each caption in the lines its table leaves it under a row this tall (its table's rows and one line at least)
        wanted = [max(w, c / max(1, tall - r)) for w, c, r in zip(widths, captions, rows, strict=True)]
        if sum(wanted) <= room:
            widths = wanted
            break
    slack = (room - sum(widths)) / len(blocks)
    return [w + slack for w in widths]


def source(page: Sheet, part: str = "all") -> str:
    """The Typst source: ``all`` (the questions, then the key from a new page), ``questions`` or ``key``."""
    title = f"Answer key: {page.title}" if part == "key" else f"Worksheet: {page.title}"
    out = [_PREAMBLE.format(title=typst_string(title))]
    if part in ("all", "questions"):
        out += _questions(page)
    if part == "all":
        out += ["#pagebreak()", ""]
    if part in ("all", "key"):
        out += _key(page, alone=part == "key")
    return "\n".join(out) + "\n"


def pdf(text: str) -> bytes:
    """The PDF of Typst source, typeset in this process."""
    try:
        import typst
    except ImportError:
        raise MissingExtraError(f"--format pdf needs the typst package: {EXTRA}") from None
    # warnings (a glyph no font has) would go to stderr; the page is made either way
    try:
        data, _warnings = typst.compile_with_warnings(text.encode("utf-8"), format="pdf")
    except typst.TypstError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TypesetError(f"the PDF could not be typeset (Typst: {first}); --format html and --format markdown"
                           " make the same worksheet") from None
    if not isinstance(data, bytes):  # pragma: no cover - one document, one file
        raise TypeError("typst returned pages, not one PDF")
    return data
