"""Narrow worksheet tables sit side by side in the PDF and the HTML page (edges/worksheet/render/typst.py and
html.py, issue 34): a sheet of small tables was one column down many pages (a 4-token, 2-head backward lesson, 19
pages and a 5-page key). Each row of the PDF holds only tables whose estimated width fits their share of the line."""

from __future__ import annotations

import io
import re

import pytest

from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import load_scenario
from qkv_tui.edges.worksheet.make import build
from qkv_tui.edges.worksheet.render import html as web
from qkv_tui.edges.worksheet.render import typst as typ
from qkv_tui.edges.worksheet.sheet import Grid, sheet

from .worksheet_lesson import lesson


def test_the_pdf_sets_narrow_tables_several_to_a_line() -> None:
    page = sheet(build(compute(load_scenario("learn_to_look"))))
    text = typ.source(page)
    rows = [len(r.split(", ")) for r in re.findall(r"^#grid\(columns: \(([\d.pt, ]+)\)", text, re.M)]
    assert rows and all(2 <= n <= typ.MOST for n in rows) and max(rows) > 3
    # a table wider than half the line shares its row with narrower ones where the row fits the line
    widths = re.findall(r"^#grid\(columns: \(([\d.pt, ]+)\), column-gutter: ([\d.]+)pt", text, re.M)
    assert any(max(float(w.removesuffix("pt")) for w in columns.split(", ")) > typ.HALF for columns, _ in widths)
    for columns, gutter in widths:
        shares = [float(w.removesuffix("pt")) for w in columns.split(", ")]
        assert sum(shares) + float(gutter) * (len(shares) - 1) <= typ.LINE + 0.5


def test_a_wide_table_keeps_its_landscape_page() -> None:
    sc = load_scenario("sixteen_tokens")
    text = typ.source(sheet(build(compute(sc))))
    assert "#page(flipped: true)" in text


def test_the_html_page_wraps_its_tables_in_rows() -> None:
    page = sheet(build(compute(load_scenario("learn_to_look"))))
    text = web.render(page)
    assert text.count('<div class="tables">') >= 3  # one run per section
    assert ".tables { display: flex; flex-wrap: wrap;" in text
    assert text.count("<figure>") == sum(isinstance(b, Grid) for b in page.body)


def test_a_backward_lesson_for_one_head_takes_few_pages() -> None:
    """The figures of issue 34, measured: the whole lesson sheet against --stages backward --heads 1."""
    pypdf = pytest.importorskip("pypdf")
    pytest.importorskip("typst")

    def pages(data: bytes) -> int:
        return len(pypdf.PdfReader(io.BytesIO(data)).pages)

    whole = sheet(build(lesson()))
    chosen = sheet(build(lesson(), stages="backward", heads=[1]))
    whole_pages = pages(typ.pdf(typ.source(whole, "questions")))
    chosen_pages = pages(typ.pdf(typ.source(chosen, "questions")))
    key_pages = pages(typ.pdf(typ.source(chosen, "key")))
    assert whole_pages <= 15  # 19 one table to a line
    assert chosen_pages <= 8 and key_pages <= 2
    small = sheet(build(compute(load_scenario("learn_to_look")), stages="backward"))
    assert pages(typ.pdf(typ.source(small, "questions"))) <= 3 and pages(typ.pdf(typ.source(small, "key"))) == 1
