"""The computation as a person does it with pen and paper: every intermediate rounded.

Each product, sum, quotient and exponential is rounded to the shown number of decimals
before it is used again, so the numbers drift from the exact ones the way hand-worked
examples do (the seed page's e^2.887 ≈ 17.940 comes from the rounded 2.887; the exact
e^(5/√3) is 17.935). The result has the same shape as the exact Computation, so the
trace and the screen work on either.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from qkv_tui.core.engine import Computation, HeadResult
from qkv_tui.core.scenario import Matrix

CHUNK = 2_000_000  # products held at once (16 MB of float64)


def _rounder(decimals: int) -> Callable[[Matrix], Matrix]:
    def r(x: Matrix) -> Matrix:
        out = np.round(x, decimals)
        out.setflags(write=False)
        return out

    return r


def hand_matmul(a: Matrix, b: Matrix, decimals: int) -> Matrix:
    """a·b with every product rounded, then every sum: (n, k) · (k, m) -> (n, m)."""
    n, k = a.shape
    m = b.shape[1]
    result: Matrix = np.empty((n, m))
    rows = max(1, CHUNK // max(k * m, 1))  # rows per block, so the products stay a few MB at 2048 tokens
    for start in range(0, n, rows):
        products = np.round(a[start:start + rows, :, None] * b[None, :, :], decimals)  # (rows, k, m)
        result[start:start + rows] = np.round(products.sum(axis=1), decimals)
    return result


def hand_head(head: HeadResult, X: Matrix, X_kv: Matrix, allow: np.ndarray, decimals: int) -> HeadResult:
    r = _rounder(decimals)
    Q = r(hand_matmul(X, head.W_Q, decimals))  # (n, d_k)
    K = r(hand_matmul(X_kv, head.W_K, decimals))  # (m, d_k)
    V = r(hand_matmul(X_kv, head.W_V, decimals))  # (m, d_v)
    scores = r(hand_matmul(Q, K.T, decimals))  # (n, m)
    divisor = float(np.round(head.scale, decimals)) or head.scale  # √3 ≈ 1.732; never divide by 0
    scaled = r(scores / divisor)
    masked = np.where(allow, scaled, -np.inf)
    masked.setflags(write=False)
    row_max = masked.max(axis=1)
    shifted = np.round(masked - row_max[:, None], decimals)
    with np.errstate(under="ignore"):
        exps = r(np.where(allow, np.round(np.exp(shifted), decimals), 0.0))
    row_sum = r(exps.sum(axis=1))
    weights = r(exps / row_sum[:, None])
    output = r(hand_matmul(weights, V, decimals))
    return replace(head, scale=divisor, Q=Q, K=K, V=V, scores=scores, scaled=scaled, masked=masked,
                   row_max=row_max, exps=exps, row_sum=row_sum, weights=weights, output=output)


def compute_hand(comp: Computation, decimals: int) -> Computation:
    """The same scenario worked by hand at ``decimals`` places (contracts' shapes, rounded values)."""
    sc = comp.scenario
    heads = tuple(hand_head(h, sc.X, sc.X_kv, sc.allow, decimals) for h in comp.heads)
    concat = np.concatenate([h.output for h in heads], axis=1)
    output = hand_matmul(concat, comp.W_O, decimals) if comp.W_O is not None else concat
    for array in (concat, output):
        array.setflags(write=False)
    return Computation(sc, heads, concat, comp.W_O, output, hand_decimals=decimals)

