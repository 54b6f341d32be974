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

from qkv_tui.core.engine import Computation, HeadResult, NormResult, mean_square, row_mean
from qkv_tui.core.scenario import Matrix
from qkv_tui.core.variants import Norm, Rope, Vector

CHUNK = 2_000_000  # products held at once (16 MB of float64)
WHOLE = 2.0 ** 52  # from here on every float is a whole number: rounding to decimals >= 0 leaves it as it is


def round_to(x: Matrix, decimals: int) -> Matrix:
    """``x`` rounded to ``decimals`` as its printed text reads (``1.85`` → 1.9, as ``f"{1.85:.1f}"``).

    ``np.round`` scales by 10^decimals in binary first: near a tie it can round the other way
    from the correctly rounded text a student writes (1.85 → 1.8), and 1e306 at 3 decimals
    overflows to inf. The few entries near a tie take Python's correctly rounded ``round``;
    values from 2^52 on are whole numbers already and are kept as they are.
    """
    x = np.asarray(x, dtype=float)
    small = np.abs(x) < WHOLE  # False for inf and NaN too: kept as they are
    safe = np.where(small, x, 0.0)
    out = np.where(small, np.round(safe, decimals), x)
    scaled = np.abs(safe) * 10.0**decimals
    near_tie = small & (np.abs(scaled - np.floor(scaled) - 0.5) < 1e-6)
    if near_tie.any():
        flat, values = out.reshape(-1), x.reshape(-1)
        for i in np.flatnonzero(near_tie):
            flat[i] = round(float(values[i]), decimals)
        out = flat.reshape(x.shape)
    return out


def _rounder(decimals: int) -> Callable[[Matrix], Matrix]:
    def r(x: Matrix) -> Matrix:
        out = round_to(x, decimals)
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
        products = round_to(a[start:start + rows, :, None] * b[None, :, :], decimals)  # (rows, k, m)
        result[start:start + rows] = round_to(products.sum(axis=1), decimals)
    return result


def hand_head(
    head: HeadResult, X: Matrix, X_kv: Matrix, allow: np.ndarray, decimals: int,
    rope: Rope | None = None, positions: tuple[int, ...] | None = None,
) -> HeadResult:
    r = _rounder(decimals)
    Q = r(_plus(hand_matmul(X, head.W_Q, decimals), head.b_Q))  # (n, d_k)
    K = r(_plus(hand_matmul(X_kv, head.W_K, decimals), head.b_K))  # (m, d_k)
    V = r(_plus(hand_matmul(X_kv, head.W_V, decimals), head.b_V))  # (m, d_v)
    Q_rot = K_rot = None
    if rope is not None and positions is not None:
        Q_rot, K_rot = hand_rotate(Q, rope, positions, decimals), hand_rotate(K, rope, positions, decimals)
    Q_used = Q if Q_rot is None else Q_rot
    K_used = K if K_rot is None else K_rot
    scores = r(hand_matmul(Q_used, K_used.T, decimals))  # (n, m)
    divisor = float(round_to(np.array(head.scale), decimals)) or head.scale  # √3 ≈ 1.732; never divide by 0
    scaled = r(scores / divisor)
    bias = r(head.bias) if head.bias is not None else None  # slope·(j − i), written down rounded
    logits = scaled if bias is None else round_to(scaled + bias, decimals)
    masked = np.where(allow, logits, -np.inf)
    masked.setflags(write=False)
    row_max = masked.max(axis=1)
    if head.sink is not None:
        row_max = np.maximum(row_max, head.sink)
    shifted = round_to(masked - row_max[:, None], decimals)
    with np.errstate(under="ignore"):
        exps = r(np.where(allow, round_to(np.exp(shifted), decimals), 0.0))
        sink_exp = None
        if head.sink is not None:
            sink_exp = r(round_to(np.exp(round_to(head.sink - row_max, decimals)), decimals))
    row_sum = r(exps.sum(axis=1) + (sink_exp if sink_exp is not None else 0.0))
    weights = r(exps / row_sum[:, None])
    output = r(hand_matmul(weights, V, decimals))
    return replace(head, scale=divisor, Q=Q, K=K, V=V, scores=scores, scaled=scaled, masked=masked,
                   row_max=row_max, exps=exps, row_sum=row_sum, weights=weights, output=output,
                   Q_rot=Q_rot, K_rot=K_rot, bias=bias, sink_exp=sink_exp)


def _plus(a: Matrix, b: Vector | None) -> Matrix:
    return a if b is None else a + b[None, :]


def hand_rotate(M: Matrix, rope: Rope, positions: tuple[int, ...], decimals: int) -> Matrix:
    """RoPE by hand: cos and sin written down rounded, each product rounded, then the difference."""
    out = M.copy()
    d_k = M.shape[1]
    p = np.asarray(positions, dtype=np.float64)
    for i, (a, b) in enumerate(rope.pairs(d_k)):
        angle = p * rope.theta(i, d_k)
        cos, sin = round_to(np.cos(angle), decimals), round_to(np.sin(angle), decimals)
        out[:, a] = round_to(M[:, a] * cos, decimals) - round_to(M[:, b] * sin, decimals)
        out[:, b] = round_to(M[:, a] * sin, decimals) + round_to(M[:, b] * cos, decimals)
    out = round_to(out, decimals)
    out.setflags(write=False)
    return out


def hand_norm(norm: Norm, X: Matrix, decimals: int) -> NormResult:
    """The norm by hand: the row's mean and mean square (or variance), the root, then each cell."""
    r = _rounder(decimals)
    d = X.shape[1]
    mean = r(row_mean(X)) if norm.kind == "layer" else r(np.zeros(X.shape[0]))
    centered = round_to(X - mean[:, None], decimals)
    with np.errstate(over="ignore"):
        spread = round_to(centered * centered, decimals).sum(axis=1) / d
    # a square of 1.5e154 is past float64 though the row's mean square is not: such squares are whole numbers
    # that rounding leaves as they are, so the mean square is the exact one, taken the engine's safe way
    spread = r(np.where(np.isfinite(spread), spread, mean_square(centered)))
    exact_root: Matrix = np.sqrt(spread + norm.eps)
    root: Matrix = round_to(exact_root, decimals)
    root = np.where(root == 0, exact_root, root)  # never divide by a rounded 0
    # each cell in one go from the written-down centred value and root: c / root · γ + β
    X_norm = centered / root[:, None] * norm.gamma[None, :]
    if norm.beta is not None:
        X_norm = X_norm + norm.beta[None, :]
    X_norm = round_to(X_norm, decimals)
    return NormResult(r(X_norm), mean, spread, r(root))


def compute_hand(comp: Computation, decimals: int) -> Computation:
    """The same scenario worked by hand at ``decimals`` places (the exact computation's shapes, rounded values)."""
    sc = comp.scenario
    norm = hand_norm(sc.norm, sc.X, decimals) if sc.norm is not None else None
    X_in = sc.X if norm is None else norm.X_norm
    X_kv = sc.X_kv if sc.is_cross else X_in
    heads = tuple(hand_head(h, X_in, X_kv, sc.allow, decimals, sc.rope, sc.positions) for h in comp.heads)
    concat = np.concatenate([h.output for h in heads], axis=1)
    output = hand_matmul(concat, comp.W_O, decimals) if comp.W_O is not None else concat
    if comp.b_O is not None:
        output = round_to(output + comp.b_O[None, :], decimals)
    for array in (concat, output):
        array.setflags(write=False)
    return Computation(sc, heads, concat, comp.W_O, output, hand_decimals=decimals, norm=norm, b_O=comp.b_O)
