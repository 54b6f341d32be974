"""The differential map is not a distribution, and says so in its numbers (contracts §14): each row of
softmax₁ − λ·softmax₂ sums to 1 − λ (within float64's rounding), a cell the mask forbids is exactly 0 in both
maps and in their difference, and a cell may be negative."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv_tui.kernels.differential import DiffHead, diff_forward


@st.composite
def cases(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n, m = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    d, d_model = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    allow = rng.random((n, m)) < draw(st.sampled_from([0.3, 0.7, 1.0]))
    allow[np.arange(n), rng.integers(0, m, n)] = True  # every row attends at least one key
    # λ vectors large enough that λ ranges over negative values and values above 1
    lam = [rng.normal(scale=draw(st.sampled_from([0.1, 1.0])), size=d) for _ in range(4)]
    head = DiffHead(*lam, lambda_init=float(rng.uniform(0.0, 0.9)), eps=1e-5)
    X, X_kv = rng.normal(size=(n, d_model)), rng.normal(size=(m, d_model))
    W = [rng.normal(scale=2.0, size=(d_model, 2 * d)) for _ in range(3)]
    return X, X_kv, W, allow, head


@settings(max_examples=80, deadline=None)
@given(cases())
def test_rows_sum_to_one_minus_lambda_and_masked_cells_are_zero(case) -> None:
    X, X_kv, W, allow, head = case
    f = diff_forward(X, X_kv, *W, None, None, None, allow, head)
    lam = f.lam.value
    np.testing.assert_allclose(f.weights.sum(axis=1), 1.0 - lam, rtol=0, atol=1e-12 * max(1.0, abs(lam)))
    for M in (f.map_1.weights, f.map_2.weights, f.lam_p2, f.weights):
        assert np.all(M[~allow] == 0.0) and not np.signbit(M[~allow]).any()
    for mp in (f.map_1, f.map_2):  # each map on its own is a distribution
        np.testing.assert_allclose(mp.weights.sum(axis=1), 1.0, rtol=0, atol=1e-12)
        assert np.all(mp.masked[~allow] == -np.inf)


def test_a_cell_may_be_negative_and_a_row_sum_says_one_minus_lambda() -> None:
    """Two keys, the second map looking where the first does not: λ·p₂ outweighs p₁ in a cell."""
    X = np.array([[1.0, 0.0]])
    X_kv = np.array([[1.0, 0.0], [0.0, 1.0]])
    W_Q = np.array([[3.0, 3.0], [0.0, 0.0]])  # Q₁ = Q₂ = 3
    W_K = np.array([[1.0, 0.0], [0.0, 1.0]])  # key 0 matches the first map's query, key 1 the second's
    W_V = np.eye(2)
    # λ_q1·λ_k1 = 0, λ_q2·λ_k2 = −1: λ = 1 − e^(−1) + 0.5
    head = DiffHead(np.array([0.0]), np.array([1.0]), np.array([1.0]), np.array([-1.0]), lambda_init=0.5)
    f = diff_forward(X, X_kv, W_Q, W_K, W_V, None, None, None, np.ones((1, 2), dtype=bool), head)
    assert f.lam.value == 1.0 - np.exp(-1.0) + 0.5
    assert f.weights[0, 1] < 0 < f.weights[0, 0]
    assert abs(f.weights.sum() - (1.0 - f.lam.value)) < 1e-15
