"""DeepSeek sparse attention's indexer worked in NumPy alone from a scenario file's own numbers (no qkv_tui code):
the selection the tests of [indexer] hold the app's against."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def indexer_selection(doc: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """The causal mask (n, n) and each row's top_k of the keys it lets through by the indexer's score
    I[t,s] = Σ_j w[t,j]·ReLU(q_I[t,j]·k_I[s]), w = X·W_w / √(H_I·d_I) (ties to the earlier key)."""
    X = np.array(doc["X"], dtype=float)
    n = len(X)
    causal = np.tril(np.ones((n, n), dtype=bool))
    ix = doc["indexer"]
    H, top_k = ix["num_heads"], ix["top_k"]
    W_q, W_k, W_w = (np.array(ix[k], dtype=float) for k in ("W_q", "W_k", "W_w"))
    d_I = W_k.shape[1]
    q, k, w = (X @ W_q).reshape(n, H, d_I), X @ W_k, X @ W_w / math.sqrt(H * d_I)
    index = np.einsum("tj,tjs->ts", w, np.maximum(np.einsum("tjd,sd->tjs", q, k), 0.0))
    selected = np.zeros((n, n), dtype=bool)
    for t in range(n):
        for s in sorted(np.flatnonzero(causal[t]), key=lambda s: (-index[t, s], s))[:top_k]:
            selected[t, s] = True
    return causal, selected
