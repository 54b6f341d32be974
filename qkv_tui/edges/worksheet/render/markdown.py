"""A worksheet as Markdown: the rules, the inputs, a section per stage (and head), the answer key.

It lays out the blocks of :mod:`qkv_tui.edges.worksheet.sheet`, as every format does.
"""

from __future__ import annotations

from qkv_tui.edges.worksheet.chain import Table
from qkv_tui.edges.worksheet.content import BLANK, WorksheetContent
from qkv_tui.edges.worksheet.sheet import Grid, Heading, Lines, Sheet, sheet


def _md(label: str) -> str:
    return label.replace("|", "\\|")


def _table_md(page: Sheet, table: Table) -> str:
    columns = page.columns(table)
    head = "| " + " | ".join([_md(table.name), *(_md(table.cols[j]) for j in columns)]) + " |"
    rule = "|" + "---|" * (len(columns) + 1)
    body = []
    for i, label in enumerate(table.rows):
        cells = []
        for j in columns:
            cell = page.cell(table, i, j)
            cells.append(cell if isinstance(cell, str) else f"({cell.number}) {BLANK}")
        body.append("| " + " | ".join([f"**{_md(label)}**", *cells]) + " |")
    return "\n".join([head, rule, *body])


def questions(page: Sheet) -> list[str]:
    """Every line above the answer key."""
    out = [f"# Worksheet: {page.title}", ""]
    if page.intro:  # the description only up to its first number, which may be a blank's answer
        out += [page.intro, ""]
    text, formula, rest = page.lead
    out += [f"{text}**{formula}**{rest}" if formula else f"{text}{rest}", ""]
    out += page.rules
    out.append("")
    for block in page.body:
        if isinstance(block, Heading):
            out += [f"## {block.text}", ""]
        elif isinstance(block, Lines):
            out += block.lines
        elif isinstance(block, Grid):
            out += [f"{block.caption}{block.suffix}:", "", _table_md(page, block.table), ""]
    return out


def key(page: Sheet, alone: bool = False) -> list[str]:
    """The answer key's lines; ``alone``: as a page of its own, titled for its worksheet."""
    out = [f"# Answer key: {page.title}", ""] if alone else ["## Answer key", ""]
    if not page.key:
        out += ["(No blanks on this page.)", ""]
    out += [f"- ({b.number}) {b.working}" for b in page.key]
    out.append("")
    return out


def render(ws: WorksheetContent) -> str:
    page = sheet(ws)
    return "\n".join(questions(page) + key(page))


def render_parts(page: Sheet) -> tuple[str, str]:
    """The worksheet without its key, and the key as a file of its own (``--key separate``)."""
    return "\n".join(questions(page)) + "\n", "\n".join(key(page, alone=True))
