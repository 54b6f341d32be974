"""The Index stage's weight lines name the column of W_w they multiply: ``w[the,j] = X[the]·W_w[:,j] / √(H_I·d_I)``
and its working ``X[the]·W_w[:,j] = …`` name the same column j, whose numbers are the products' right factors
(they once named column j + 1, past W_w's last column). Checked against W_w and X read from the file with
tomllib and a NumPy product, on the built-in (2 index heads) and on one of 3 index heads with other numbers."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import numpy as np
import pytest

from qkv_tui import compute
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.edges.export_markdown import to_markdown

DSA = (Path(__file__).resolve().parents[1] / "scenarios" / "dsa.toml").read_text(encoding="utf-8")


def _three_heads() -> str:
    """The built-in with 3 index heads: W_q of 3·2 columns, W_w of 3 columns with distinct whole numbers."""
    text = re.sub(r"(?ms)^W_q = \[.*?^\]", "W_q = [[1, 0, 0, 1, 2, 0], [0, 1, 1, 0, 0, 1], [0, 1, -1, 0, 1, 1],"
                  " [1, 0, 0, 1, -1, 0]]", DSA)
    text = re.sub(r"(?ms)^W_w = \[.*?^\]", "W_w = [[1, 0, 3], [0, 2, -1], [1, 1, 2], [0, 1, 4]]", text)
    return text.replace("num_heads = 2        #", "num_heads = 3        #")


CASES = {"built-in": DSA, "three heads": _three_heads()}
LINE = re.compile(r"^\s*w\[(\w+),(\d+)\] = X\[(\w+)\]·W_w\[:,(\d+)\] / √\(H_I·d_I\)")
WORK = re.compile(r"^\s*X\[(\w+)\]·W_w\[:,(\d+)\] = (.+) = (-?[\d.]+)$")


@pytest.mark.parametrize("name", CASES)
def test_each_weight_line_names_the_column_it_multiplies(name: str) -> None:
    text = CASES[name]
    doc = tomllib.loads(text)
    X = np.array(doc["X"], dtype=float)
    W_w = np.array(doc["indexer"]["W_w"], dtype=float)
    labels = doc["tokens"]
    page = to_markdown(compute(parse_scenario(text, f"{name}.toml")), 3).splitlines()
    heads, works = [], []
    for i, line in enumerate(page):
        if (found := LINE.match(line)) is not None:
            q, j, q2, col = found.groups()
            assert q == q2 and j == col, line  # w[·,j] is made from W_w's column j
            heads.append((q, int(j)))
            work = WORK.match(page[i + 1])
            assert work is not None, page[i + 1]
            works.append(work)
    H = W_w.shape[1]
    assert heads == [(q, j) for q in labels for j in range(H)]
    for (q, j), work in zip(heads, works, strict=True):
        assert work.group(1) == q and int(work.group(2)) == j, work.group(0)
        assert int(work.group(2)) < H
        factors = [tuple(float(f.strip("()")) for f in p.split("·")) for p in work.group(3).split(" + ")]
        row = X[labels.index(q)]
        assert [a for a, _ in factors] == list(row)
        assert [b for _, b in factors] == list(W_w[:, j])  # the column named is the column multiplied
        assert float(work.group(4)) == pytest.approx(float(row @ W_w[:, j]))
