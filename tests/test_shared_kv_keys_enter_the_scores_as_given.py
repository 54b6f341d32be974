"""A layer that reuses another's K and V ([shared_kv]) scores its Queries, normed and turned by the parts that act
on Queries and Keys, against the Keys exactly as given: the head pass says K is given (HeadPass.K_given) and those
parts step Q alone. Checked with NumPy's own RMSNorm and rotation, and with one K/V head read by two query heads
and with one each; and the part's module names none of those parts."""

from __future__ import annotations

import ast
import re

import numpy as np
import pytest

from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import parse_scenario

from .conftest import ROOT
from .test_views_ask_the_parts import _reach

ONE_KV = '''tokens = ["a", "b", "c"]
X = [[1, 0, 0.5, 0], [0, 1, 0, 1], [1, 1, 0, -0.5]]
mask = "causal"

[qk_norm]
over = "head"
eps = 0.001

[rope]
layout = "half"
base = 100

[attention]
num_heads = 2
num_kv_heads = 1
W_Q = [[1, 0, 0, 1], [0, 1, 1, 0], [1, 0, 0.5, 0], [0, 0.25, 1, 1]]

[shared_kv]
source_layer = 2
K = [[[1, 1], [1, -1], [-1, 0.5]]]
V = [[[1, 1], [-1, 1], [1, -1]]]
'''
TWO_KV = (ONE_KV.replace("num_kv_heads = 1", "num_kv_heads = 2")
          .replace("K = [[[1, 1], [1, -1], [-1, 0.5]]]", "K = [[[1, 1], [1, -1], [-1, 0.5]], [[0.5, 1], [1, 0], [-1, 1]]]")
          .replace("V = [[[1, 1], [-1, 1], [1, -1]]]", "V = [[[1, 1], [-1, 1], [1, -1]], [[1, 0], [0, 1], [1, 1]]]"))


def _rms(M: np.ndarray, eps: float) -> np.ndarray:
    return M / np.sqrt(np.mean(M * M, axis=1, keepdims=True) + eps)


def _turn_half(M: np.ndarray, base: float) -> np.ndarray:
    """LLaMA's rotate_half RoPE on (n, 2) rows at positions 0, 1, 2, …: one pair, θ = base^0 = 1."""
    p = np.arange(M.shape[0], dtype=float)
    c, s = np.cos(p), np.sin(p)
    return np.stack([M[:, 0] * c - M[:, 1] * s, M[:, 0] * s + M[:, 1] * c], axis=1)


@pytest.mark.parametrize("text", [ONE_KV, TWO_KV], ids=["one_kv_head", "two_kv_heads"])
def test_queries_are_normed_and_turned_and_keys_are_as_given(text: str) -> None:
    sc = parse_scenario(text, "s.toml")
    X = np.array([[1, 0, 0.5, 0], [0, 1, 0, 1], [1, 1, 0, -0.5]], dtype=float)
    W_Q = np.array([[1, 0, 0, 1], [0, 1, 1, 0], [1, 0, 0.5, 0], [0, 0.25, 1, 1]], dtype=float)
    Ks = [np.array([[1, 1], [1, -1], [-1, 0.5]]), np.array([[0.5, 1], [1, 0], [-1, 1]])]
    comp = compute(sc)
    for h, hr in enumerate(comp.heads):
        K = Ks[sc.kv_head(h)]
        Q = _turn_half(_rms(X @ W_Q[:, 2 * h:2 * h + 2], 0.001), 100.0)
        np.testing.assert_allclose(hr.scores, Q @ K.T, rtol=1e-12, atol=1e-12)
        assert np.array_equal(hr.K_used, K)  # the Keys scored are the given ones, cell for cell


def test_the_part_names_no_part_that_acts_on_queries_and_keys() -> None:
    reach = _reach()
    used = reach.names_in(ast.parse((ROOT / "qkv_tui" / "core" / "shared_kv_part.py").read_text(encoding="utf-8")))
    named = {v for v in ("rope", "qk_norm") if any(re.search(reach.VARIANTS[v], n) for n in used)}
    assert not named, named
