"""The dsa built-in's description says "Write top_k = 4": the editor takes ``top_k = 4`` (one number, no row or
column), refuses ``top_k[0,1] = 4`` and a top_k that is no whole number from 1 in one line saying what to write,
and writes the edit back to the file's ``top_k``. After it every visible key is selected and the head's output is
full causal attention's, checked against a NumPy computation from the file's numbers; an edit of W_w moves the
selection as a NumPy indexer says."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest

from qkv_tui.core.cell_edit import EditError, changed_cells, edit, input_cells, parse_address, save_text
from qkv_tui.core.indexer_part import Selection
from qkv_tui.core.scenario import parse_scenario

TEXT = (Path(__file__).resolve().parents[1] / "scenarios" / "dsa.toml").read_text(encoding="utf-8")
DOC = tomllib.loads(TEXT)
X = np.array(DOC["X"], dtype=float)
N = len(X)
CAUSAL = np.tril(np.ones((N, N), dtype=bool))


def _attention(keep: np.ndarray) -> np.ndarray:
    head = DOC["heads"][0]
    Q, K, V = (X @ np.array(head[w], dtype=float) for w in ("W_Q", "W_K", "W_V"))
    s = np.where(keep, Q @ K.T / np.sqrt(Q.shape[1]), -np.inf)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)) @ V


def _selected(W_w: np.ndarray, top_k: int) -> np.ndarray:
    """DeepSeek-V3.2's index, I = Σ_j w_j·ReLU(q_I,j·k_I), w = X·W_w / √(H_I·d_I), top_k per row, ties earlier."""
    ix = DOC["indexer"]
    H = ix["num_heads"]
    q, k = X @ np.array(ix["W_q"], dtype=float), X @ np.array(ix["W_k"], dtype=float)
    d_I = k.shape[1]
    w = X @ W_w / np.sqrt(H * d_I)
    scores = sum(w[:, [j]] * np.maximum(q[:, j * d_I:(j + 1) * d_I] @ k.T, 0) for j in range(H))
    keep = np.zeros((N, N), dtype=bool)
    for t in range(N):
        visible = np.flatnonzero(CAUSAL[t])
        order = sorted(visible, key=lambda s: (-scores[t, s], s))
        keep[t, order[:top_k]] = True
    return keep


def test_top_k_4_is_one_number_and_gives_full_attention() -> None:
    sc = parse_scenario(TEXT, "dsa.toml")
    cell, value = parse_address(sc, "top_k = 4")
    assert cell is not None and cell.label(sc) == "top_k" and cell in input_cells(sc)
    new, comp = edit(sc, cell, value)
    sel = comp.heads[0].need(Selection)
    assert np.array_equal(sel.mask, CAUSAL)
    np.testing.assert_allclose(comp.heads[0].output, _attention(CAUSAL), rtol=1e-12)
    saved = save_text(TEXT, new, changed_cells(sc, new))
    assert tomllib.loads(saved)["indexer"]["top_k"] == 4
    assert saved.replace("\ntop_k = 4 ", "\ntop_k = 2 ", 1) == TEXT  # only the number changed, its comment kept


def test_the_built_in_selection_before_the_edit_is_numpys() -> None:
    sc = parse_scenario(TEXT, "dsa.toml")
    cell, value = parse_address(sc, "top_k = 2")
    assert cell is not None
    _, comp = edit(sc, cell, value)
    keep = _selected(np.array(DOC["indexer"]["W_w"], dtype=float), 2)
    assert np.array_equal(comp.heads[0].need(Selection).mask, keep) and not np.array_equal(keep, CAUSAL)
    np.testing.assert_allclose(comp.heads[0].output, _attention(keep), rtol=1e-12)


def test_an_edit_of_w_w_moves_the_selection() -> None:
    sc = parse_scenario(TEXT, "dsa.toml")
    cell, value = parse_address(sc, "W_w[1,1] = -2")
    assert cell is not None
    _, comp = edit(sc, cell, value)
    W_w = np.array(DOC["indexer"]["W_w"], dtype=float)
    W_w[1, 1] = -2
    keep = _selected(W_w, 2)
    assert not np.array_equal(keep, _selected(np.array(DOC["indexer"]["W_w"], dtype=float), 2))
    assert np.array_equal(comp.heads[0].need(Selection).mask, keep)


@pytest.mark.parametrize(("typed", "said"), [
    ("top_k[0,1] = 4", "top_k is one number, with no row or column: write e.g. top_k = 4"),
    ("top_k = 2.5", "top_k = 2.5: expected a whole number from 1"),
    ("top_k = 0", "top_k = 0: expected a whole number from 1"),
])
def test_a_top_k_it_cannot_take_is_one_line_saying_what_to_write(typed: str, said: str) -> None:
    sc = parse_scenario(TEXT, "dsa.toml")
    with pytest.raises(EditError) as caught:
        cell, value = parse_address(sc, typed)
        assert cell is not None
        edit(sc, cell, value)
    assert said in str(caught.value) and "\n" not in str(caught.value)
