"""Kimi Delta Attention (kernels/kda.kda_forward) against the recurrence as Kimi Linear's report writes it
(arXiv 2510.26692, eq. for KDA): S_t = (I − β_t k_t k_tᵀ)·Diag(α_t)·S_{t−1} + β_t k_t v_tᵀ, o_t = S_tᵀ q_t, with
α_t = e^{g_t} and q, k L2-normalised (q ÷ √d_k as the models scale it), in whole-matrix NumPy form rather than the
kernel's step-by-step recall and correction: the two agree to float64 noise."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv_tui.kernels.kda import kda_forward


def report_recurrence(Q: np.ndarray, K: np.ndarray, V: np.ndarray, g: np.ndarray, beta: np.ndarray) -> np.ndarray:
    n, d_k = Q.shape
    q = Q / np.sqrt((Q * Q).sum(axis=1, keepdims=True) + 1e-6) / np.sqrt(d_k)
    k = K / np.sqrt((K * K).sum(axis=1, keepdims=True) + 1e-6)
    S = np.zeros((d_k, V.shape[1]))
    out = np.zeros((n, V.shape[1]))
    for t in range(n):
        S = (np.eye(d_k) - beta[t] * np.outer(k[t], k[t])) @ np.diag(np.exp(g[t])) @ S + beta[t] * np.outer(k[t], V[t])
        out[t] = S.T @ q[t]
    return out


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 7), d_k=st.integers(1, 5), d_v=st.integers(1, 5), seed=st.integers(0, 2**32 - 1))
def test_kernel_is_the_reports_recurrence(n: int, d_k: int, d_v: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    Q, K, V = rng.normal(size=(n, d_k)), rng.normal(size=(n, d_k)), rng.normal(size=(n, d_v))
    g, beta = -rng.exponential(0.8, size=(n, d_k)), rng.uniform(0.0, 1.0, size=n)
    np.testing.assert_allclose(kda_forward(Q, K, V, g, beta).output, report_recurrence(Q, K, V, g, beta),
                               rtol=1e-10, atol=1e-12)
