"""Issue 31: a key DeepSeek's indexer did not select is masked, not a weight the softmax made 0. Every view that
marks masked cells (the heads view's maps and readings, the attention map, the closing summary) marks it so and
says why, from the record's generic answer (core/part_masks.py masked_as), never by naming the indexer; with
top_k covering every visible key nothing more is masked and nothing is said. The selection the views mark is
recomputed here from the file's numbers with NumPy alone."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import numpy as np

from qkv_tui import compute, load_scenario
from qkv_tui.core.part_masks import masked_as, masked_legend
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.display.heatmap import attention_map
from qkv_tui.teach.summary import closing_summary
from qkv_tui.teach.trace import Trace
from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.heads import HeadsPanel
from qkv_tui.ui.widgets.panels import ExplainPanel

from .dsa_numpy import indexer_selection
from .test_app import text_of

BUILTIN = Path(__file__).resolve().parents[1] / "scenarios" / "dsa.toml"
TEXT = BUILTIN.read_text(encoding="utf-8")
WORDS = "not selected by the indexer"


def _dropped(text: str = TEXT) -> np.ndarray:
    """(n, n) the keys the causal mask lets through that the indexer leaves out, by NumPy from the file."""
    causal, selected = indexer_selection(tomllib.loads(text))
    return causal & ~selected


def _with_top_k(k: int) -> str:
    return re.sub(r"(?m)^top_k = 2 ", f"top_k = {k} ", TEXT)


def test_the_builtin_drops_keys_the_causal_mask_allows() -> None:
    dropped = _dropped()
    assert dropped.sum() == 3  # sat drops the; down drops the and itself
    comp = compute(load_scenario(BUILTIN))
    assert np.array_equal(comp.scenario.allow & ~comp.allow, dropped)
    assert masked_as(comp.heads) == WORDS
    assert masked_legend(comp.heads) == f"masked, or {WORDS}"


def test_the_attention_map_marks_a_dropped_key_masked_and_its_legend_says_why() -> None:
    trace = Trace(compute(load_scenario(BUILTIN)))
    amap = attention_map(trace, 0, len(trace) - 1)
    dropped, causal = _dropped(), trace.comp.scenario.allow
    for i, row in enumerate(amap.rows):
        for j, cell in enumerate(row):
            assert (cell.level == -1) == bool(dropped[i, j] or not causal[i, j]), (i, j)
    assert f"masked, or {WORDS} (weight exactly 0)" in amap.legend


def test_the_closing_summary_counts_the_dropped_keys_among_the_masked() -> None:
    comp = compute(load_scenario(BUILTIN))
    lines = closing_summary(comp, 0, 1, 3)
    masked = int((~comp.scenario.allow).sum() + _dropped().sum())
    assert f"the {masked} masked weights ({int(_dropped().sum())} of them {WORDS}) are exactly 0" in lines[-1]
    # down attends cat and sat only: its two weights are its whole row
    assert "down\u00a0→\u00a02 keys evenly at 0.500" in lines[1]


def test_top_k_covering_every_key_masks_nothing_more_and_says_nothing() -> None:
    comp = compute(parse_scenario(_with_top_k(4), "dsa4"))
    assert not _dropped(_with_top_k(4)).any()
    assert masked_as(comp.heads) is None and masked_legend(comp.heads) == "masked"
    assert WORDS not in " ".join(closing_summary(comp, 0, 1, 3))
    trace = Trace(comp)
    assert WORDS not in attention_map(trace, 0, len(trace) - 1).legend


async def test_the_heads_view_marks_dropped_keys_with_the_masked_dot() -> None:
    app = QKVApp("dsa")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("v")
        await pilot.pause()
        maps = app.query_one(HeadsPanel).text.splitlines()
        explained = text_of(app, ExplainPanel)
    rows = {line.split()[0]: line for line in maps if line.split() and line.split()[0] in ("the", "cat", "sat", "down")}
    labels = ("the", "cat", "sat", "down")
    dropped, causal = _dropped(), np.tril(np.ones((4, 4), dtype=bool))
    for i, label in enumerate(labels):
        cells = rows[label][5:]  # the label column is 5 wide here; two characters a key
        for j in range(4):
            glyphs = cells[2 * j:2 * j + 2]
            assert (glyphs.strip() == "·") == bool(dropped[i, j] or not causal[i, j]), (label, j, glyphs)
    assert any(f"· masked, or {WORDS}" in line for line in maps)  # the legend
    flat = " ".join(explained.split())
    assert f"· masked, or {WORDS}" in flat  # the meaning
    assert "down → 2 keys evenly at 0.500" in flat.replace("\u00a0", " ")


async def test_a_scenario_without_a_selection_keeps_the_plain_legend() -> None:
    app = QKVApp("causal_mask")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("v")
        await pilot.pause()
        maps = app.query_one(HeadsPanel).text
    assert maps.rstrip().endswith("· masked") and "indexer" not in maps
