"""A worksheet as one self-contained HTML page: no fonts, scripts or styles fetched from anywhere.

It lays out the blocks of :mod:`qkv_tui.edges.worksheet.sheet`: tables with their numbers right-aligned,
formulas as MathML (:mod:`qkv_tui.edges.worksheet.render.formulas`; every current browser draws it), a name and date
line, and a print stylesheet that starts the answer key on a new page. Every piece of text is escaped.
"""

from __future__ import annotations

import html

from qkv_tui.edges.worksheet.content import Blank
from qkv_tui.edges.worksheet.render.formulas import IDENTIFIER, pieces, to_mathml
from qkv_tui.edges.worksheet.sheet import Grid, Heading, Lines, Sheet, items, minus

_STYLE = """
body { font-family: "Latin Modern Roman", "Computer Modern", Georgia, "Times New Roman", serif;
       max-width: 52em; margin: 2em auto; padding: 0 1em; line-height: 1.4; color: #111; }
h1 { font-size: 1.6em; margin-bottom: 0.4em; }
h2 { font-size: 1.25em; margin: 1.4em 0 0.4em; }
.who { display: flex; gap: 1em; margin: 0 0 1em; }
.who span { flex: 1; border-bottom: 1px solid #000; }
.who span.date { flex: 0 0 12em; }
table { border-collapse: collapse; margin: 0.4em 0 1em; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #777; padding: 0.15em 0.5em; }
td { text-align: right; white-space: nowrap; }
th { text-align: left; }
thead th { text-align: right; }
thead th:first-child { text-align: left; }
.blank { display: inline-block; width: 3em; border-bottom: 1px solid #000; height: 1em; vertical-align: bottom; }
figure { margin: 0; break-inside: avoid; }
.tables { display: flex; flex-wrap: wrap; gap: 0 2em; align-items: flex-start; }
.tables figure { display: table; }
.tables figcaption { display: table-caption; caption-side: top; }
.key p { margin: 0.35em 0; padding-left: 2em; text-indent: -2em; }
@media print {
  body { margin: 0; max-width: none; }
  .key { break-before: page; }
  a { color: inherit; }
}
"""


def _prose(text: str, names: tuple[str, ...] = ()) -> str:
    """Words as text, the formulas among them as MathML (never the scenario's own ``names``)."""
    return "".join(to_mathml(piece) if formula else _words(piece, names) for formula, piece in pieces(text, names))


def _words(text: str, names: tuple[str, ...]) -> str:
    """Text, a setting's name (``num_heads``) as code (unless a scenario's word looks like one)."""
    if any(IDENTIFIER.search(name) for name in names):
        return html.escape(text)
    return IDENTIFIER.sub(lambda m: f"<code>{m.group()}</code>", html.escape(text))


def _label(text: str, names: tuple[str, ...]) -> str:
    """A row label or heading: the page's own names with a subscript (``γ_q``, ``W_O``) as MathML, never a literal
    ``_``; the scenario's words as written."""
    return _prose(text, names) if "_" in text and text not in names else html.escape(text)


def _cell(value: str | Blank) -> str:
    if isinstance(value, Blank):
        return f'<td>({value.number}) <span class="blank"></span></td>'
    return f"<td>{html.escape(minus(value))}</td>"


def _table(page: Sheet, block: Grid) -> list[str]:
    t = block.table
    caption = f"{_prose(block.caption, page.names)}{html.escape(block.suffix)}:"
    heads = "".join(f"<th>{html.escape(t.cols[j])}</th>" for j in page.columns(t))
    out = [f"<figure><figcaption>{caption}</figcaption>", "<table>",
           "<thead><tr>" + f"<th>{_prose(t.name, page.names)}</th>" + heads + "</tr></thead>", "<tbody>"]
    for i, label in enumerate(t.rows):
        cells = "".join(_cell(page.cell(t, i, j)) for j in page.columns(t))
        out.append(f'<tr><th scope="row">{_label(label, page.names)}</th>{cells}</tr>')
    out += ["</tbody>", "</table></figure>"]
    return out


def _lines(lines: tuple[str, ...] | list[str], names: tuple[str, ...]) -> list[str]:
    out: list[str] = []
    open_list = False
    for bullet, text in items(lines):
        if bullet and not open_list:
            out.append("<ul>")
            open_list = True
        if not bullet and open_list:
            out.append("</ul>")
            open_list = False
        out.append(f"<li>{_prose(text, names)}</li>" if bullet else f"<p>{_prose(text, names)}</p>")
    if open_list:
        out.append("</ul>")
    return out


def _page(title: str, body: list[str]) -> str:
    return "\n".join(['<!DOCTYPE html>', '<html lang="en">', "<head>", '<meta charset="utf-8">',
                      f"<title>{html.escape(title)}</title>", f"<style>{_STYLE}</style>", "</head>", "<body>",
                      *body, "</body>", "</html>"]) + "\n"


def _questions(page: Sheet) -> list[str]:
    out = [f"<h1>Worksheet: {html.escape(page.title)}</h1>",
           '<p class="who">Name: <span></span> Date: <span class="date"></span></p>']
    if page.intro:
        out.append(f"<p>{_prose(page.intro, page.names)}</p>")
    text, formula, rest = page.lead
    out.append(f"<p>{html.escape(text)}{to_mathml(formula) if formula else ''}{html.escape(rest)}</p>")
    out += _lines(page.rules, page.names)
    tables: list[str] = []  # a run of tables, set side by side where the line has room (a caption wraps to its table)
    for block in page.body:
        if not isinstance(block, Grid) and tables:
            out += ['<div class="tables">', *tables, "</div>"]
            tables = []
        if isinstance(block, Heading):
            out.append(f"<h2>{_label(block.text, page.names)}</h2>")
        elif isinstance(block, Lines):
            out += _lines(block.lines, page.names)
        elif isinstance(block, Grid):
            tables += _table(page, block)
    return out + (['<div class="tables">', *tables, "</div>"] if tables else [])


def _key(page: Sheet, alone: bool) -> list[str]:
    title = f"Answer key: {page.title}" if alone else "Answer key"
    out = ['<section class="key">', f"<h1>{html.escape(title)}</h1>" if alone else f"<h2>{html.escape(title)}</h2>"]
    if not page.key:
        out.append("<p>(No blanks on this page.)</p>")
    out += [f"<p>({b.number}) {to_mathml(b.working)}</p>" for b in page.key]
    out.append("</section>")
    return out


def render(page: Sheet, part: str = "all") -> str:
    """The page: ``all`` (the questions, then the key, on a new page when printed), ``questions`` or ``key``."""
    if part == "key":
        return _page(f"Answer key: {page.title}", _key(page, alone=True))
    body = _questions(page)
    if part == "all":
        body += _key(page, alone=False)
    return _page(f"Worksheet: {page.title}", body)
