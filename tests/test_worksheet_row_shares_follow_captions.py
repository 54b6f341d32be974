"""A row of tables in the PDF shares the line's room where it keeps the row shortest (edges/worksheet/render/typst.py
_shares): each table gets at least its estimated width, the row never runs past the line, and its tallest column
(caption lines over table rows, as estimated) is no taller than with the room shared equally."""

from __future__ import annotations

import math

import pytest

from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import load_scenario
from qkv_tui.edges.worksheet.make import build
from qkv_tui.edges.worksheet.render import typst as typ
from qkv_tui.edges.worksheet.sheet import Grid, Sheet, sheet


def tallest(page: Sheet, blocks: list[Grid], widths: list[float]) -> int:
    return max(math.ceil(typ._caption_width("", b) / w) + len(b.table.rows) + 1 for b, w in zip(blocks, widths, strict=True))


@pytest.mark.parametrize("name, heads", [("differential_learns", [1]), ("differential_learns", [2]),
                                         ("learn_to_look", [1]), ("mla_learns", None)])
def test_each_row_shares_its_room_by_its_captions(name: str, heads: list[int] | None) -> None:
    page = sheet(build(compute(load_scenario(name)), stages="backward", heads=heads))
    grids = [b for b in page.body if isinstance(b, Grid) and typ._narrow(page, b)]
    rows = 0
    for n in range(len(grids) - 1):  # every pair of neighbours that fits a row, and the rows the page sets
        pair = grids[n:n + 2]
        widths = [typ._width(page, b) for b in pair]
        if sum(widths) + typ.GUTTER > typ.LINE:
            continue
        rows += 1
        shares = typ._shares(page, [("", b) for b in pair])
        assert all(s >= w - 1e-9 for s, w in zip(shares, widths, strict=True))
        assert sum(shares) + typ.GUTTER <= typ.LINE + 1e-6
        equal = [w + (typ.LINE - typ.GUTTER - sum(widths)) / 2 for w in widths]
        assert tallest(page, pair, shares) <= tallest(page, pair, equal)
    assert rows


def test_a_long_caption_over_a_short_table_gets_the_room() -> None:
    """[differential]'s ``m = mean(d_normed ⊙ normed)`` over a one-column table, beside d_normed's four columns
    under a one-line caption: the room left goes to m's caption first."""
    page = sheet(build(compute(load_scenario("differential_learns")), stages="backward", heads=[1]))
    by_key = {b.table.key: b for b in page.body if isinstance(b, Grid)}
    pair = [by_key["dnormed.0"], by_key["subm.0"]]
    widths = [typ._width(page, b) for b in pair]
    shares = typ._shares(page, [("", b) for b in pair])
    assert shares[1] - widths[1] > shares[0] - widths[0]  # the slack went to the long caption first
