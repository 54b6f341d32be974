"""Every shipped [backward] scenario whose backward sheet the page prints fits a lesson (issue 34): ``--stages backward
--heads 1`` prints its sheet and its key on two A4 pages in all, the key from a page of its own, at a body of 9 pt or
more (edges/worksheet/render/typst.py). The rules that make every sheet tighter are checked here too: the rows of
tables break where they are together shortest, a section's name runs in before its first table's caption, and a
sheet of one head's tables names no head on its sections; a --heads sheet prints and asks only the asked heads'
columns of a table of the layer (edges/worksheet/columns.py), and names a run of stages by its ends."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import load_scenario
from qkv_tui.edges.worksheet.make import build
from qkv_tui.edges.worksheet.render import typst as typ
from qkv_tui.edges.worksheet.sheet import Grid, Heading, Sheet, sheet

from .test_worksheet_stages_and_heads import check_questions_read_the_page

pypdf = pytest.importorskip("pypdf")
pytest.importorskip("typst")

FLOOR = 9.0  # pt
SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
SIZE = re.compile(r"size: ([\d.]+)pt")
# every built-in with a [backward] table: a new one is on this list without anyone adding it
SHIPPED = tuple(sorted(path.stem for path in SCENARIOS.glob("*.toml") if "\n[backward]" in path.read_text(encoding="utf-8")))


def one_head_backward(name: str) -> Sheet:
    return sheet(build(compute(load_scenario(name)), stages="backward", heads=[1]))


def pages(text: str) -> int:
    return len(pypdf.PdfReader(io.BytesIO(typ.pdf(text))).pages)


@pytest.mark.parametrize("name", SHIPPED)
def test_the_sheet_and_its_key_take_two_pages(name: str) -> None:
    page = one_head_backward(name)
    assert pages(typ.source(page, "questions")) + pages(typ.source(page, "key")) <= 2  # --key separate
    assert pages(typ.source(page, "all")) <= 2  # the key from a page of its own


@pytest.mark.parametrize("name", SHIPPED)
def test_the_body_is_nine_points_or_more(name: str) -> None:
    page = one_head_backward(name)
    for part in ("questions", "key"):
        text = typ.source(page, part)
        sizes = [float(s) for s in SIZE.findall(text)]  # the body, the tables, the title, the run-in section names
        assert sizes and min(sizes) >= FLOOR, sizes


def greedy(page: Sheet, blocks: list[tuple[str, Grid]]) -> list[list[tuple[str, Grid]]]:
    """Rows filled one table at a time while the next fits, the rule _rows replaced."""
    rows: list[list[tuple[str, Grid]]] = []
    for item in blocks:
        row = rows[-1] if rows else None
        wide = row is not None and sum(typ._width(page, b) for _, b in [*row, item]) + typ.GUTTER * len(row) > typ.LINE
        if row is not None and len(row) < typ.MOST and not wide:
            row.append(item)
        else:
            rows.append([item])
    return rows


@pytest.mark.parametrize("name", SHIPPED)
def test_rows_break_where_they_are_together_shortest(name: str) -> None:
    page = one_head_backward(name)
    blocks = [("", b) for b in page.body if isinstance(b, Grid) and typ._narrow(page, b)]
    rows = typ._rows(page, blocks)
    assert [item for row in rows for item in row] == blocks  # in page order, each once
    for row in rows:
        assert 1 <= len(row) <= typ.MOST
        assert len(row) == 1 or sum(typ._width(page, b) for _, b in row) + typ.GUTTER * (len(row) - 1) <= typ.LINE
    assert sum(typ._tall(page, r) + typ.GAP for r in rows) <= sum(typ._tall(page, r) + typ.GAP for r in greedy(page, blocks))


def test_a_section_opening_a_row_runs_its_name_into_the_caption() -> None:
    page = one_head_backward("learn_to_look")
    text = typ.source(page, "questions")
    assert '#text(size: 10.5pt, weight: "bold")[#"Inputs"]#h(0.6em)#"X (embeddings)"' in text
    assert '#heading(level: 2, "Inputs")' not in text


def test_one_heads_sheet_names_no_head_on_its_sections() -> None:
    """mla_learns has two heads: its full sheet names each head's sections, its one-head sheet none (the rule line
    says which head it asks about)."""
    names = {b.text for b in one_head_backward("mla_learns").body if isinstance(b, Heading)}
    assert "Backward" in names and not any("(head" in n for n in names)
    assert "- Scale: divide every score by" in build(compute(load_scenario("mla_learns")), stages="backward",
                                                     heads=[1]).markdown()
    whole = sheet(build(compute(load_scenario("mla_learns"))))
    assert {"Softmax (head 1)", "Softmax (head 2)"} <= {b.text for b in whole.body if isinstance(b, Heading)}


@pytest.mark.parametrize("head", [1, 2])
def test_one_heads_sheet_prints_its_own_columns_of_the_layer(head: int) -> None:
    """differential_learns' concat, target and dO are both heads' four columns side by side: a sheet of one head
    prints and asks that head's, under their own labels, and every blank still reads only what the sheet prints."""
    comp = compute(load_scenario("differential_learns"))
    ws = build(comp, "100%", stages="backward", heads=[head])
    own = tuple(range(4 * (head - 1), 4 * head))
    assert {key: ws.columns_of(ws.table(key)) for key in ("concat", "target", "dO")} == dict.fromkeys(
        ("concat", "target", "dO"), own)
    assert {b.col for b in ws.blanks if b.table == "dO"} == set(own)  # every one of its cells asked, none other
    check_questions_read_the_page(ws)
    page = ws.markdown()
    assert f"| dO | {' | '.join(map(str, own))} |" in page
    name = comp.heads[head - 1].name
    assert f"dO = output − target ({name}'s columns):" in page
    # the PDF prints the same columns
    text = typ.source(sheet(ws), "questions")
    assert 'table.header([#"target"], ' + ", ".join(f'[*#"{j}"*]' for j in own) + ")" in text
    whole = build(comp, "100%")
    assert whole.columns == {} and "| dO | 0 | 1 | 2 | 3 | 4 | 5 | 6 | 7 |" in whole.markdown()


def test_a_latent_layers_weights_print_the_asked_heads_columns() -> None:
    """mla_learns' W_Q holds every head's [nope | rope] columns, W_UK every head's d_nope: head 1's sheet prints
    head 1's, and dW_Q and dW_UK, which read only head 1's tables there, become questions of its own."""
    ws = build(compute(load_scenario("mla_learns")), "100%", stages="backward", heads=[1])
    assert ws.columns_of(ws.table("W_QA")) == ws.columns_of(ws.table("mW_Q")) == (0, 1, 2, 3)
    assert ws.columns_of(ws.table("sgd.W_UK")) == (0, 1)
    assert ws.asked is not None and {"mW_Q", "mW_UK", "sgd.W_QA"} <= ws.asked
    assert {b.col for b in ws.blanks if b.table == "sgd.W_QA"} <= {0, 1, 2, 3}
    check_questions_read_the_page(ws)


def test_a_run_of_stages_is_named_by_its_ends() -> None:
    comp = compute(load_scenario("learn_to_look"))
    assert build(comp, stages="backward").chosen.startswith("stages Loss … SGD")
    assert build(comp, stages="dSoftmax,dScore").chosen == "stages dSoftmax, dScore"


def test_every_backward_builtin_is_on_the_list() -> None:
    assert {"learn_to_look", "differential_learns", "mla_learns", "next_token_adamw", "deltanet_learns"} <= set(SHIPPED)
