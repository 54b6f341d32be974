"""The Markdown page's shape: headings by head, aligned tables, labels that survive Markdown."""

from __future__ import annotations

import re

import numpy as np

from qkv_tui import compute, load_scenario
from qkv_tui.edges.export_markdown import md_table, to_markdown


def test_multi_head_pages_nest_only_the_head_stages() -> None:
    page = to_markdown(compute(load_scenario("two_heads")))
    headings = [line for line in page.splitlines() if line.startswith("#")]
    top = [h for h in headings if re.match(r"#{1,2} ", h)]
    assert top == ["# I love AI, two heads", "## 1 · Embed", "## head 1", "## head 2", "## 7 · Concat",
                   "## 8 · W_O", "## KV cache: prefill, decode and a paged cache",
                   "## FlashAttention: tiled online softmax", "## Notes"]
    # each head's own stages sit one level below it
    inside = headings[headings.index("## head 2") + 1:headings.index("## 7 · Concat")]
    assert inside == ["### 2 · Project", "### 3 · Score", "### 4 · Scale", "### 5 · Softmax", "### 6 · Mix"]
    single = to_markdown(compute(load_scenario("i_love_ai")))
    assert "## 2 · Project" in single and "## head 1" not in single


def test_tables_are_padded_so_the_source_aligns() -> None:
    page = to_markdown(compute(load_scenario("cross_attention")))
    for block in re.findall(r"(?:^\|.*\|\n)+", page, flags=re.M):
        rows = block.splitlines()
        pipes = [[m.start() for m in re.finditer(r"(?<!\\)\|", row)] for row in rows]
        assert all(p == pipes[0] for p in pipes), block


def test_empty_and_piped_labels_stay_visible() -> None:
    table = md_table(np.array([[1.0], [2.0]]), ["", "a|b"], ["0"], "X")
    assert "****" not in table and "*(empty)*" in table and "a\\|b" in table


def test_concat_columns_say_which_head() -> None:
    page = to_markdown(compute(load_scenario("two_heads")))
    assert re.search(r"\| concat +\| +h1:0 \| +h1:1 \| +h1:2 \| +h2:0 \| +h2:1 \|", page)
