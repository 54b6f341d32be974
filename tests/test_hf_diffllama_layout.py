"""importers/hf_diffllama_layout.py on hand-labelled weights: which model head lands in which half of which
differential head, for transformers' pairing (i with i + H/2) and the paper's (2i with 2i + 1), and the shapes
it refuses. (tests/test_differential_matches_diffllama.py runs the mapped heads against transformers itself.)"""

from __future__ import annotations

import numpy as np
import pytest

from qkv_tui.importers.hf_diffllama_layout import DESCRIPTION, diffllama_heads, pair_of


def _labelled(count: int, head_dim: int, d_model: int = 3) -> np.ndarray:
    """A projection as a checkpoint stores it, (out, in), whose every output row of head h holds the number h."""
    return np.repeat(np.arange(count, dtype=float), head_dim)[:, None] * np.ones((1, d_model))


def _heads_in(block: np.ndarray, head_dim: int) -> list[int]:
    """Which model head each head_dim-wide half of a (d_model, 2·head_dim) block came from."""
    return [int(block[0, 0]), int(block[0, head_dim])]


@pytest.mark.parametrize(("pairing", "query_pairs", "kv_pairs"), [
    ("transformers", [[0, 4], [1, 5], [2, 6], [3, 7]], [[0, 2], [1, 3]]),
    ("paper", [[0, 1], [2, 3], [4, 5], [6, 7]], [[0, 1], [2, 3]]),
])
def test_each_pairing_puts_the_model_heads_where_it_says(pairing: str, query_pairs, kv_pairs) -> None:
    H, KV, hd = 8, 4, 2
    lam = [np.arange(hd, dtype=float) + k for k in range(4)]
    bq, bk, bv = (np.repeat(np.arange(c, dtype=float), hd) for c in (H, KV, KV))
    lay = diffllama_heads(_labelled(H, hd), _labelled(KV, hd), _labelled(KV, hd), lam, H, KV, hd,
                          biases=(bq, bk, bv), pairing=pairing)
    assert (lay.num_heads, lay.num_kv_heads, lay.d) == (4, 2, hd)
    assert [_heads_in(W, hd) for W in lay.W_Q] == query_pairs
    assert [_heads_in(W, hd) for W in lay.W_K] == kv_pairs
    assert [_heads_in(W, hd) for W in lay.W_V] == kv_pairs
    assert lay.b_Q is not None and lay.b_K is not None and lay.b_V is not None
    assert [[int(b[0]), int(b[hd])] for b in lay.b_Q] == query_pairs
    assert [[int(b[0]), int(b[hd])] for b in lay.b_V] == kv_pairs
    for got, want in zip((lay.lambda_q1, lay.lambda_k1, lay.lambda_q2, lay.lambda_k2), lam, strict=True):
        assert got.shape == (4, hd)
        assert (got == want).all()  # one set of λ vectors per layer: every head's row is it
    assert lay.description == DESCRIPTION[pairing]
    assert [pair_of(i, H, pairing) for i in range(4)] == [tuple(p) for p in query_pairs]


def test_weights_are_transposed_from_the_checkpoints_out_in() -> None:
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(8, 5)), rng.normal(size=(4, 5)), rng.normal(size=(4, 5))
    lay = diffllama_heads(q, k, v, [np.zeros(2)] * 4, 4, 2, 2)
    np.testing.assert_array_equal(lay.W_Q[1], np.concatenate([q[2:4].T, q[6:8].T], axis=1))
    np.testing.assert_array_equal(lay.W_V[0], np.concatenate([v[0:2].T, v[2:4].T], axis=1))
    assert lay.b_Q is None and lay.b_K is None and lay.b_V is None


@pytest.mark.parametrize(("heads", "kv", "message"), [
    (3, 3, "even num_heads"), (4, 1, "even num_heads"), (4, 6, "even num_heads"),
])
def test_odd_or_unshared_head_counts_are_refused(heads: int, kv: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        diffllama_heads(np.zeros((heads * 2, 3)), np.zeros((kv * 2, 3)), np.zeros((kv * 2, 3)), [np.zeros(2)] * 4,
                        heads, kv, 2)


def test_a_projection_of_the_wrong_width_is_named() -> None:
    with pytest.raises(ValueError, match="k_proj has 6 outputs; expected 2 heads × head_dim 2"):
        diffllama_heads(np.zeros((8, 3)), np.zeros((6, 3)), np.zeros((4, 3)), [np.zeros(2)] * 4, 4, 2, 2)
