"""The DSA indexer's q_I and k_I are turned by RoPE's own kernel (kernels/rope.py columns, through [rope]'s
columns_turn): the first rope_dims of each vector, in the [indexer]'s own layout, at [rope]'s positions, base and
scaling. Checked against the turn written out here in NumPy; the indexer's kernel and stages then name no RoPE."""

from __future__ import annotations

import ast
import re

import numpy as np
import pytest

from qkv_tui import compute
from qkv_tui.core.indexer_part import Selection
from qkv_tui.core.scenario import load_scenario, parse_scenario

from .conftest import ROOT
from .test_views_ask_the_parts import _reach


def _dsa(rope_dims: int, layout: str, base: float) -> str:
    """The built-in dsa with an index width d_I = 4 (so the two layouts pair different columns) and [rope]."""
    text = (ROOT / "scenarios" / "dsa.toml").read_text(encoding="utf-8").split("[indexer]")[0]
    return text + f"""[indexer]
num_heads = 2
top_k = 2
rope_dims = {rope_dims}
rope_layout = "{layout}"
W_q = [[1, 0, 0, 1, 0.5, 0, 1, 0], [0, 1, 1, 0, 0, -1, 0, 1], [0, 1, -1, 0, 1, 0, 0, 0.5], [1, 0, 0, 1, 0, 1, 1, 0]]
W_k = [[1, 0, 0.5, 0], [0, 1, 0, -1], [1, -1, 1, 0], [-1, 1, 0, 1]]
W_w = [[1, 0], [0, 2], [1, 1], [0, 1]]
k_norm = false

[rope]
layout = "half"
base = {base}
"""


def _turned(M: np.ndarray, r: int, layout: str, base: float) -> np.ndarray:
    """The first r columns of each row p turned by p·base^(−2i/r), pair i = (i, i + r/2) or (2i, 2i + 1)."""
    out = M.copy()
    for p in range(M.shape[0]):
        for i in range(r // 2):
            a, b = (i, i + r // 2) if layout == "half" else (2 * i, 2 * i + 1)
            angle = p * base ** (-2.0 * i / r)
            x, y = M[p, a], M[p, b]
            out[p, a], out[p, b] = x * np.cos(angle) - y * np.sin(angle), x * np.sin(angle) + y * np.cos(angle)
    return out


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_the_index_vectors_turn_by_ropes_positions_in_their_own_layout(layout: str) -> None:
    sc = parse_scenario(_dsa(4, layout, 100.0), "t.toml")
    ix = compute(sc).heads[0].need(Selection).indexed
    assert sc.rope is not None and sc.rope.layout == "half"  # the indexer's layout is its own
    np.testing.assert_allclose(ix.k_turned, _turned(ix.k_normed, 4, layout, 100.0), rtol=0, atol=1e-12)
    for h in range(ix.q.shape[0]):
        np.testing.assert_allclose(ix.q_turned[h], _turned(ix.q[h], 4, layout, 100.0), rtol=0, atol=1e-12)
    other = "interleaved" if layout == "half" else "half"
    assert not np.allclose(ix.k_turned, _turned(ix.k_normed, 4, other, 100.0))  # the layouts differ here


def test_a_partial_rope_dims_leaves_the_other_columns_as_they_are() -> None:
    ix = compute(parse_scenario(_dsa(2, "half", 10.0), "t.toml")).heads[0].need(Selection).indexed
    np.testing.assert_array_equal(ix.k_turned[:, 2:], ix.k_normed[:, 2:])
    np.testing.assert_allclose(ix.k_turned, _turned(ix.k_normed, 2, "half", 10.0), rtol=0, atol=1e-12)


def test_under_mla_the_turn_is_the_one_mla_keeps() -> None:
    """[mla] keeps the scenario's [rope] as its own (the scenario then has none of its own): the indexer asks it."""
    indexer = "[indexer]" + _dsa(4, "half", 1.0).split("[indexer]")[1].split("[rope]")[0]
    mla = (ROOT / "scenarios" / "mla.toml").read_text(encoding="utf-8").replace("base = 10000.0", "base = 10.0")
    sc = parse_scenario(mla + "\n" + indexer, "t.toml")
    assert sc.rope is None  # base 10 here, not the 10000 a turn without [rope] would take
    ix = compute(sc).heads[0].need(Selection).indexed
    np.testing.assert_allclose(ix.k_turned, _turned(ix.k_normed, 4, "half", 10.0), rtol=0, atol=1e-12)


def test_without_rope_dims_nothing_turns() -> None:
    ix = compute(load_scenario("dsa")).heads[0].need(Selection).indexed
    assert ix.q_turned is ix.q and ix.k_turned is ix.k_normed


@pytest.mark.parametrize("module", ["kernels/indexer.py", "teach/stages/indexer.py"])
def test_the_indexer_kernel_and_stages_name_no_rope(module: str) -> None:
    reach = _reach()
    used = reach.names_in(ast.parse((ROOT / "qkv_tui" / module).read_text(encoding="utf-8")))
    assert not [n for n in used if re.search(reach.VARIANTS["rope"], n)]
