"""One head's backward pass: the exact gradient of kernels/attention.py's head_forward, by hand in NumPy
(docs/backward.md). It runs from the gradient at what Concat joins back to the gradients at what RoPE
turns; kernels/norm_backward.py takes them through QK-norm and the pre-norm.

Every step is the chain rule on one forward operation, read backwards: Mix (dV = Pᵀ·dO, dP = dO·Vᵀ), the
softmax's Jacobian (dS = P ⊙ (dP − D), D = rowsum(dO ⊙ O)), the soft-cap, the scale, Score
(dQ = dscaled·K / scale, dK = dscaledᵀ·Q / scale) and RoPE (the opposite rotation).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.rope import rotate
from qkv_tui.kernels.stats import Matrix


@dataclass(frozen=True, eq=False)
class AttendBack:
    """softmax(Q Kᵀ / scale + bias) V read backwards, for Queries and Keys as they were scored."""

    dV: Matrix  # (m, d_v) Pᵀ·dO
    dP: Matrix  # (n, m) dO·Vᵀ, the full matrix (masked cells too: P there is 0, so they go no further)
    D: Matrix  # (n,) rowsum(dO ⊙ O) = Σⱼ Pᵢⱼ·dPᵢⱼ
    dS: Matrix  # (n, m) P ⊙ (dP − D): the gradient at the softmax's input; exactly 0 where masked
    dscaled: Matrix  # (n, m) the gradient at scores / scale (through the soft-cap where there is one); 0 where masked
    dscores: Matrix  # (n, m) dscaled / scale
    dQ_used: Matrix  # (n, d_k) dscores·K_used
    dK_used: Matrix  # (m, d_k) dscoresᵀ·Q_used
    dsink: float | None  # −Σᵢ p_sink,ᵢ·Dᵢ: the sink's share of every row's Jacobian


def attend_backward(dO: Matrix, Q_used: Matrix, K_used: Matrix, V: Matrix, weights: Matrix, output: Matrix,
                    allow: np.ndarray, divisor: float, *, scaled: Matrix | None = None, softcap: float | None = None,
                    sink_share: Matrix | None = None, policy: Policy = EXACT) -> AttendBack:
    """``dO`` (n, d_v) is the gradient at the head's output (before any gate). ``sink_share`` (n,) is each
    row's sink weight e^(sink − max) / row_sum: the sink is a column whose dP is 0, as it adds nothing to
    the output, so its gradient is p_sink·(0 − D). The bias (ALiBi) is added, so it passes dS on unchanged."""
    dV = policy.matmul(weights.T, dO)  # (m, d_v)
    dP = policy.matmul(dO, V.T)  # (n, m)
    D = row_dots(dO, output, policy)  # (n,)
    # P is exactly 0 at a masked cell; np.where keeps that 0 from becoming −0.0 (0 times a negative)
    dS = policy.table(np.where(allow, weights * (dP - D[:, None]), 0.0))  # (n, m)
    dscaled = dS
    if softcap is not None:
        assert scaled is not None
        t = np.tanh(scaled / softcap)  # (n, m) d/ds c·tanh(s/c) = 1 − tanh²(s/c)
        dscaled = policy.table(np.where(allow, dS * (1.0 - t * t), 0.0))
    dscores = policy.table(dscaled / divisor)  # (n, m)
    dsink = None
    if sink_share is not None:
        dsink = float(policy.matmul(policy.table(sink_share)[None, :], -D[:, None])[0, 0])
    return AttendBack(dV, dP, D, dS, dscaled, dscores, policy.matmul(dscores, K_used), policy.matmul(dscores.T, Q_used),
                      dsink)


def row_dots(a: Matrix, b: Matrix, policy: Policy = EXACT) -> Matrix:
    """Each row of ``a`` dotted with the same row of ``b``: (n,)."""
    if policy is EXACT:
        out: Matrix = (a * b).sum(axis=1)
        return out
    return np.array([policy.matmul(a[i:i + 1], b[i:i + 1].T)[0, 0] for i in range(a.shape[0])], dtype=np.float64)


def rotate_back(dM: Matrix, cos: Matrix, sin: Matrix, turned: Sequence[tuple[int, int]], policy: Policy = EXACT) -> Matrix:
    """The gradient before RoPE from the gradient after it: a rotation's transpose is the rotation by the
    opposite angle (−sin), and the dimensions in no pair pass straight through: (rows, d_k)."""
    return rotate(dM, cos, -sin, turned, policy)
