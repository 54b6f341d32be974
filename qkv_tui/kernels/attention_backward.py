"""One head's backward pass: the exact gradient of kernels/attention.py's attend, by hand in NumPy
(docs/backward.md). It runs from the gradient at the head's output back to the gradients at the Queries and Keys
as they were scored; a part's turn of them is read back by the part (kernels/rope_backward.py), and
kernels/norm_backward.py takes them through QK-norm and the pre-norm.

Every step is the chain rule on one forward operation, read backwards: Mix (dV = Pᵀ·dO, dP = dO·Vᵀ), the
softmax's Jacobian (dS = P ⊙ (dP − D), D = rowsum(dO ⊙ O)), a part's step on the scaled scores (the soft-cap's),
the scale and Score (dQ = dscaled·K / scale, dK = dscaledᵀ·Q / scale). As the forward ``attend`` takes ``step``
and ``beside``, this takes the step's slope and the share of each row a logit beside the map took.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.stats import Matrix


class StepBack(Protocol):
    """A part's step on the scaled scores (kernels/attention.py's ScoresStep), read backwards: its slope at each
    scaled score (the soft-cap's 1 − tanh²(s/c))."""

    def derivative(self, scaled: Matrix) -> Matrix: ...


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
    dsink: float | None  # −Σᵢ p_beside,ᵢ·Dᵢ: the gradient at a logit beside the map (a sink's); None without one


def attend_backward(dO: Matrix, Q_used: Matrix, K_used: Matrix, V: Matrix, weights: Matrix, output: Matrix,
                    allow: np.ndarray, divisor: float, *, scaled: Matrix | None = None, step: StepBack | None = None,
                    beside_share: Matrix | None = None, policy: Policy = EXACT) -> AttendBack:
    """``dO`` (n, d_v) is the gradient at the head's own output (before any part around it, a gate). ``step``: a
    part's step on the ``scaled`` scores, whose slope dS is multiplied by. ``beside_share`` (n,) is each row's
    weight on a logit beside the map (a sink's e^(sink − max) / row_sum): a column whose dP is 0, as it adds nothing
    to the output, so its gradient is p·(0 − D). A bias (ALiBi's) is added, so it passes dS on unchanged."""
    dV = policy.matmul(weights.T, dO)  # (m, d_v)
    dP = policy.matmul(dO, V.T)  # (n, m)
    D = row_dots(dO, output, policy)  # (n,)
    # P is exactly 0 at a masked cell; np.where keeps that 0 from becoming −0.0 (0 times a negative)
    dS = policy.table(np.where(allow, weights * (dP - D[:, None]), 0.0))  # (n, m)
    dscaled = dS
    if step is not None:
        assert scaled is not None
        dscaled = policy.table(np.where(allow, dS * step.derivative(scaled), 0.0))
    dscores = policy.table(dscaled / divisor)  # (n, m)
    dsink = None
    if beside_share is not None:
        dsink = float(policy.matmul(policy.table(beside_share)[None, :], -D[:, None])[0, 0])
    return AttendBack(dV, dP, D, dS, dscaled, dscores, policy.matmul(dscores, K_used), policy.matmul(dscores.T, Q_used),
                      dsink)


def row_dots(a: Matrix, b: Matrix, policy: Policy = EXACT) -> Matrix:
    """Each row of ``a`` dotted with the same row of ``b``: (n,)."""
    if policy is EXACT:
        out: Matrix = (a * b).sum(axis=1)
        return out
    return np.array([policy.matmul(a[i:i + 1], b[i:i + 1].T)[0, 0] for i in range(a.shape[0])], dtype=np.float64)

