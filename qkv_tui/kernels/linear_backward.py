"""Linear attention (kernels/linear.py) read backwards, through its quadratic form, under a numeric policy
(docs/backward.md, "[linear]").

The quadratic form is a softmax head with φ(q)·φ(k) for e^(q·k/√dₖ): weights = A / rowsum(A), A = φ(Q)φ(K)ᵀ
masked. So its backward reads like the softmax's: dV = weightsᵀ·dO, dweights = dO·Vᵀ; the row division's
Jacobian dA = (dweights − D) / rowsum with D = rowsum(dO ⊙ out), as D is for the softmax (without
normalize, dA is dweights itself); then dφ(Q) = dA·φ(K), dφ(K) = dAᵀ·φ(Q), and through φ cell by cell.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qkv_tui.kernels.attention_backward import row_dots
from qkv_tui.kernels.linear import LinearForward, safe
from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.stats import Matrix


@dataclass(frozen=True, eq=False)
class LinearBack:
    """One linear-attention head read backwards, from dO at its output to dQ, dK at what φ read."""

    dV: Matrix  # (n, d_v) weightsᵀ·dO
    dweights: Matrix  # (n, n) dO·Vᵀ, every cell (masked ones go no further)
    D: Matrix  # (n,) rowsum(dO ⊙ out); 0 without normalize
    dA: Matrix  # (n, n) the gradient at φ(Q)φ(K)ᵀ: (dweights − D) / rowsum where allowed, exactly 0 where masked
    dphi_Q: Matrix  # (n, d_k) dA·φ(K)
    dphi_K: Matrix  # (n, d_k) dAᵀ·φ(Q)
    slope_Q: Matrix  # (n, d_k) φ'(Q): 1 above 0 and e^x at or below (elu1), the step (relu), 1 (identity)
    slope_K: Matrix  # (n, d_k)
    dQ_used: Matrix  # (n, d_k) dφ(Q) ⊙ φ'(Q)
    dK_used: Matrix  # (n, d_k)


def feature_slope(x: Matrix, kind: str, policy: Policy = EXACT) -> Matrix:
    """φ'(x) cell by cell. elu1's slope at 0 is e^0 = 1 from either side; relu's is taken as 0 there, as
    torch's is."""
    if kind == "elu1":
        out = np.where(x > 0, 1.0, np.exp(np.minimum(x, 0.0)))  # e^x only where it is used, so it never overflows
    elif kind == "relu":
        out = np.where(x > 0, 1.0, 0.0)
    else:
        out = np.ones_like(x, dtype=np.float64)
    return policy.table(out)


def linear_backward(dO: Matrix, Q_used: Matrix, K_used: Matrix, V: Matrix, lin: LinearForward, allow: np.ndarray,
                    policy: Policy = EXACT) -> LinearBack:
    """``dO`` (n, d_v) is the gradient at the head's output (before any gate); Q_used, K_used (n, d_k) what φ
    read; ``lin`` the head's forward under the same policy."""
    dV = policy.matmul(lin.weights.T, dO)  # (n, d_v)
    dweights = policy.matmul(dO, V.T)  # (n, n)
    n = dO.shape[0]
    if lin.spec.normalize:
        D = row_dots(dO, lin.output, policy)  # (n,)
        # np.where keeps a masked cell's 0 a plain 0 (never −0.0)
        dA = policy.table(np.where(allow, (dweights - D[:, None]) / safe(lin.row_sum)[:, None], 0.0))  # (n, n)
    else:
        D = np.zeros(n)
        dA = policy.table(np.where(allow, dweights, 0.0))
    dphi_Q = policy.matmul(dA, lin.phi_K)  # (n, d_k)
    dphi_K = policy.matmul(dA.T, lin.phi_Q)  # (n, d_k)
    slope_Q = feature_slope(Q_used, lin.spec.feature, policy)
    slope_K = feature_slope(K_used, lin.spec.feature, policy)
    return LinearBack(dV, dweights, D, dA, dphi_Q, dphi_K, slope_Q, slope_K,
                      policy.table(dphi_Q * slope_Q), policy.table(dphi_K * slope_K))
