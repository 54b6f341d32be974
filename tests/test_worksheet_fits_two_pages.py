"""A one-head backward worksheet fits a lesson (issue 34): ``--stages backward --heads 1`` on learn_to_look prints
its sheet and its key on two A4 pages in all (it took three and one), at a body size no smaller than 9 pt, and a
row of tables never runs past the line (edges/worksheet/render/typst.py)."""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import load_scenario
from qkv_tui.edges.worksheet.make import build
from qkv_tui.edges.worksheet.render import typst as typ
from qkv_tui.edges.worksheet.sheet import Sheet, sheet

from .conftest import Run
from .worksheet_lesson import lesson

pypdf = pytest.importorskip("pypdf")
pytest.importorskip("typst")

FLOOR = 9.0  # pt: the smallest body a student reads and writes in
SIZE = re.compile(r"size: ([\d.]+)pt")


def count(data: bytes) -> int:
    return len(pypdf.PdfReader(io.BytesIO(data)).pages)


def one_head_backward() -> Sheet:
    return sheet(build(compute(load_scenario("learn_to_look")), stages="backward", heads=[1]))


def test_the_sheet_and_its_key_take_two_pages(cli: Callable[..., Run], tmp_path: Path) -> None:
    out = tmp_path / "sheet.pdf"
    run = cli("--export", "worksheet", "--stages", "backward", "--heads", "1", "--format", "pdf", "--key", "separate",
              "-o", str(out), "learn_to_look")
    assert run.code == 0, run.err
    assert count(out.read_bytes()) + count((tmp_path / "sheet-key.pdf").read_bytes()) <= 2
    together = tmp_path / "together.pdf"
    run = cli("--export", "worksheet", "--stages", "backward", "--heads", "1", "--format", "pdf", "-o", str(together),
              "learn_to_look")
    assert run.code == 0, run.err
    assert count(together.read_bytes()) <= 2  # the key still starts a page of its own


def test_the_body_is_nine_points_or_more() -> None:
    for part in ("questions", "key"):
        text = typ.source(one_head_backward(), part)
        body = re.search(r'^#set text\(font: "New Computer Modern", size: ([\d.]+)pt', text, re.M)
        assert body is not None and float(body.group(1)) >= FLOOR
        # every size the page sets: its tables, the title, the headings (no table here is wide enough to go landscape)
        sizes = [float(s) for s in SIZE.findall(text)]
        assert sizes and min(sizes) >= FLOOR, sizes


def test_the_floor_check_sees_a_smaller_table() -> None:
    """The check above reads the sizes the source sets: a table set at 8 pt would be caught."""
    text = typ.source(one_head_backward()).replace(f"#text(size: {typ.BODY}pt)", "#text(size: 8pt)", 1)
    assert min(float(s) for s in SIZE.findall(text)) < FLOOR


@pytest.mark.parametrize("build_page", [one_head_backward, lambda: sheet(build(lesson(), stages="backward", heads=[1])),
                                        lambda: sheet(build(compute(load_scenario("mla_learns"))))],
                         ids=["learn_to_look", "lesson", "mla_learns"])
def test_a_row_of_tables_fits_the_line(build_page: Callable[[], Sheet]) -> None:
    """Each row's columns (a table's estimated width and its share of what is left) add up to the line at most."""
    page = build_page()
    text = typ.source(page, "questions")
    rows = re.findall(r"^#grid\(columns: \(([\d.pt, ]+)\), column-gutter: ([\d.]+)pt", text, re.M)
    assert rows
    for columns, gutter in rows:
        widths = [float(w.removesuffix("pt")) for w in columns.split(", ")]
        assert 2 <= len(widths) <= typ.MOST
        assert sum(widths) + float(gutter) * (len(widths) - 1) <= typ.LINE + 0.5
