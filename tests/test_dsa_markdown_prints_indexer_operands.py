"""``--export markdown`` of a scenario with [indexer] prints every number its Index lines multiply: W_q, W_k and
W_w, each index head's query q_I₁, q_I₂, … and the index key k_I, as tables. Each table is checked against a NumPy
computation from the file (q_I = X·W_q split into H_I heads of d_I columns, k_I = X·W_k), and each term line's dot
``q_Iⱼ[t]·k_I[s] = a·b + …`` against the printed rows: its left factors are q_Iⱼ's row t, its right ones k_I's row s."""

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
SUB = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")
DOT = re.compile(r"^\s*q_I(\S)\[(\w+)\]·k_I\[(\w+)\] = (.+) = (-?[\d.]+)$")


def _tables(page: str, corners: set[str]) -> dict[str, tuple[list[str], np.ndarray]]:
    """The markdown tables on the page with these corners: their row labels and their numbers."""
    found: dict[str, tuple[list[str], np.ndarray]] = {}
    for block in re.findall(r"(?m)(?:^\|.*\|\n)+", page):
        lines = block.strip().splitlines()
        corner = lines[0].strip("|").split("|")[0].strip()
        if corner not in corners:
            continue
        rows, values = [], []
        for line in lines[2:]:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows.append(cells[0].strip("*"))
            values.append([float(c.replace("−", "-")) for c in cells[1:]])
        found[corner] = (rows, np.array(values))
    return found


@pytest.mark.parametrize("decimals", [2, 3])
def test_the_index_operands_are_printed_and_the_dots_use_them(decimals: int) -> None:
    doc = tomllib.loads(DSA)
    X = np.array(doc["X"], dtype=float)
    ix = doc["indexer"]
    W_q, W_k, W_w = (np.array(ix[k], dtype=float) for k in ("W_q", "W_k", "W_w"))
    H, d_I = ix["num_heads"], W_k.shape[1]
    q, k = X @ W_q, X @ W_k
    page = to_markdown(compute(parse_scenario(DSA, "dsa.toml")), decimals)
    tables = _tables(page, {"W_q", "W_k", "W_w", "k_I", *(f"q_I{str(j + 1).translate(SUB)}" for j in range(H))})
    for corner, want in (("W_q", W_q), ("W_k", W_k), ("W_w", W_w), ("k_I", k)):
        assert corner in tables, f"{corner} is not printed"
        np.testing.assert_allclose(tables[corner][1], want)
    for j in range(H):
        name = f"q_I{str(j + 1).translate(SUB)}"
        assert name in tables, f"{name} is not printed"
        assert tables[name][0] == doc["tokens"]
        np.testing.assert_allclose(tables[name][1], q[:, j * d_I:(j + 1) * d_I])
    labels = tables["k_I"][0]
    dots = [m for line in page.splitlines() if (m := DOT.match(line)) is not None]
    assert len(dots) == H * len(labels) ** 2
    for m in dots:
        head, t, s, work, result = m.groups()
        qrow = tables[f"q_I{head}"][1][labels.index(t)]
        krow = tables["k_I"][1][labels.index(s)]
        factors = [tuple(float(f.strip("()")) for f in p.split("·")) for p in work.split(" + ")]
        assert [a for a, _ in factors] == list(qrow) and [b for _, b in factors] == list(krow), m.group(0)
        assert float(result) == pytest.approx(float(qrow @ krow))
