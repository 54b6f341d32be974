"""RoPE (Su et al., RoFormer): which dimensions turn together, how fast, and the turn itself (docs/scenario-format.md, [rope])."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.stats import Matrix


def pairs(layout: str, d_k: int) -> list[tuple[int, int]]:
    """The dimensions rotated together, pair i first: what makes the two layouts differ.

    "interleaved" (the paper's, GPT-J): pair i = (2i, 2i+1); "half" (LLaMA's, GPT-NeoX): (i, i + d_k/2)."""
    half = d_k // 2
    if layout == "interleaved":
        return [(2 * i, 2 * i + 1) for i in range(half)]
    return [(i, i + half) for i in range(half)]


def theta(base: float, i: int, d_k: int) -> float:
    """Frequency of pair i, base^(−2i/d_k): angles grow by this much per position."""
    return float(base ** (-2.0 * i / d_k))


def angles(base: float, d_k: int, positions: Sequence[int] | Matrix) -> Matrix:
    """p·θᵢ for every row's position p and pair i: (rows, d_k/2)."""
    thetas = np.array([theta(base, i, d_k) for i in range(d_k // 2)], dtype=np.float64)  # (d_k/2,)
    return angles_at(thetas, positions)


def angles_at(thetas: Matrix, positions: Sequence[int] | Matrix) -> Matrix:
    """p·θᵢ for every row's position p and each given frequency (scaled ones too): (rows, len(thetas))."""
    p = np.asarray(positions, dtype=np.float64)  # (rows,)
    out: Matrix = p[:, None] * thetas[None, :]
    return out


def rotate(M: Matrix, cos: Matrix, sin: Matrix, turned: Sequence[tuple[int, int]], policy: Policy = EXACT) -> Matrix:
    """Each pair (a, b) of row r turns by the angle whose cos and sin are cos[r, i], sin[r, i]: (rows, d_k).

    Dimensions in no pair (partial rotary: those from r on) pass through as they are.

    ``cos`` and ``sin`` (rows, d_k/2) are kept as the policy keeps a worked number (by hand: written down
    rounded), and so is each product; the turned matrix is a table."""
    cos, sin = policy.worked(cos), policy.worked(sin)
    out = M.copy()  # (rows, d_k)
    # every pair at once, column i of cos and sin for pair i: the same products and sums as pair by pair
    # (a real model's earlier layers turn hundreds of heads, where a loop over pairs was most of their time)
    first, second = [a for a, _ in turned], [b for _, b in turned]
    cos_p, sin_p = cos[:, : len(turned)], sin[:, : len(turned)]  # (rows, pairs)
    Ma, Mb = M[:, first], M[:, second]  # (rows, pairs)
    out[:, first] = policy.worked(Ma * cos_p) - policy.worked(Mb * sin_p)
    out[:, second] = policy.worked(Ma * sin_p) + policy.worked(Mb * cos_p)
    return policy.table(out)


def turn(M: Matrix, layout: str, base: float, positions: Sequence[int] | Matrix, policy: Policy = EXACT) -> Matrix:
    """RoPE on the rows of M (rows, d_k), row r at ``positions[r]``."""
    d_k = M.shape[1]
    a = angles(base, d_k, positions)  # (rows, d_k/2)
    return rotate(M, np.cos(a), np.sin(a), pairs(layout, d_k), policy)
