"""One differential head read backwards: the exact gradient of kernels/differential.py's diff_forward, exact or by
hand (contracts §11 and §14; docs/backward.md).

From the gradient dY at the head's output (what Concat joins), each forward step read backwards:
    the factor        d_normed = (1 − λ_init)·dY
    the sub-norm      dmixed (kernels/norm_backward.py), and dγ where there is a gain
    Mix               dV = mapᵀ·dmixed, dmap = dmixed·Vᵀ
    Subtract          dP₁ = dmap, dP₂ = −λ·dmap, dλ = −Σ dmap ⊙ P₂
    each softmax      dS = P ⊙ (dP − D), D = rowsum(P ⊙ dP) (0 where masked), the soft-cap, the scale, Score
    the parts before  read back by each part that changed Q and K before the scores, last first (its record's
                      ``scored_back``: RoPE turns each half back by the opposite angle)
    λ                 dλ_q1 = dλ·λ₁·λ_k1, dλ_k1 = dλ·λ₁·λ_q1, dλ_q2 = −dλ·λ₂·λ_k2, dλ_k2 = −dλ·λ₂·λ_q2
    the projections   dW_Q = X̂ᵀ·dQ, dW_K, dW_V, the biases, and the paths into X̂.

D is the row's Σⱼ Pᵢⱼ·dPᵢⱼ written out: attend_backward's rowsum(dO ⊙ O) is the same sum only where O = P·V,
and neither map's P·V is a number the forward pass writes down. Under grouped-query attention dK, dV, dW_K and
dW_V are this query head's own share; the caller sums the heads reading one K/V head.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from qkv_tui.kernels.attention_backward import AttendBack, row_dots
from qkv_tui.kernels.differential import DiffForward, DiffHead, DiffMap
from qkv_tui.kernels.norm_backward import norm_backward
from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.softcap import cap_tanh
from qkv_tui.kernels.stats import Matrix


@dataclass(frozen=True, eq=False)
class MapBack:
    """One map's softmax, soft-cap, scale and Score read backwards, for its Queries and Keys as scored."""

    dP: Matrix  # (n, m) the gradient at this map's weights
    D: Matrix  # (n,) Σⱼ Pᵢⱼ·dPᵢⱼ
    dS: Matrix  # (n, m) P ⊙ (dP − D), exactly 0 where masked
    dscaled: Matrix  # (n, m) at scores / scale (through the soft-cap where there is one)
    dscores: Matrix  # (n, m) dscaled / scale
    dQ_used: Matrix  # (n, d) dscores·K_used
    dK_used: Matrix  # (m, d) dscoresᵀ·Q_used


@dataclass(frozen=True, eq=False)
class DiffBack:
    """Every gradient of one differential head, from its output back to X̂."""

    d_normed: Matrix  # (n, 2d) (1 − λ_init)·dY
    dmixed: Matrix  # (n, 2d) through the sub-norm
    dgamma: Matrix | None  # (2d,) the sub-norm's gains; None without them
    dweights: Matrix  # (n, m) dmixed·Vᵀ: the gradient at the map (the full matrix, masked cells too)
    dV: Matrix  # (m, 2d) mapᵀ·dmixed
    dlambda: float  # −Σ dweights ⊙ P₂
    map_1: MapBack
    map_2: MapBack
    dQ_rot: Matrix | None  # (n, 2d) at [Q₁ | Q₂] as scored, where a part before the scores changed it (RoPE's
    # turn); None where it was scored as projected
    dK_rot: Matrix | None  # (m, 2d)
    dQ: Matrix  # (n, 2d) at the projection X̂·W_Q (+ b_Q)
    dK: Matrix  # (m, 2d)
    ddot_1: float  # dλ·λ₁: the gradient at λ_q1·λ_k1 (an exponential's slope is itself)
    ddot_2: float  # −dλ·λ₂: the gradient at λ_q2·λ_k2
    dlambda_q1: Matrix  # (d,) ddot_1·λ_k1
    dlambda_k1: Matrix  # (d,)
    dlambda_q2: Matrix  # (d,)
    dlambda_k2: Matrix  # (d,)
    dW_Q: Matrix  # (d_model, 2d) X̂ᵀ·dQ
    dW_K: Matrix  # (d_in, 2d) X_kvᵀ·dK
    dW_V: Matrix  # (d_in, 2d) X_kvᵀ·dV
    db_Q: Matrix | None  # (2d,) None without b_Q
    db_K: Matrix | None
    db_V: Matrix | None
    dX_q: Matrix  # (n, d_model) dQ·W_Qᵀ: the Query path into X̂
    dX_kv: Matrix  # (m, d_in) dK·W_Kᵀ + dV·W_Vᵀ: the Key and Value paths (into X̂ too in self-attention)
    # the JSON's "grad" → "differential": these per head, one row each (num_heads × d), and the sub-norm's
    # gains, which every head shares, summed over the heads (edges/export_grad.py reads them by name)
    grad_key: ClassVar[str] = "differential"
    grad_rows: ClassVar[tuple[str, ...]] = ("dlambda_q1", "dlambda_k1", "dlambda_q2", "dlambda_k2")
    grad_sums: ClassVar[tuple[str, ...]] = ("dgamma",)

    @property
    def attend(self) -> AttendBack:
        """What core/gradients.py keeps of every head's softmax read backwards: dV, and the gradient at the map
        (dP, the full matrix); D, dS and dscaled are the first map's (the second's are in ``map_2``); the Queries'
        and Keys' gradients as scored, both halves side by side."""
        m = self.map_1
        return AttendBack(self.dV, self.dweights, m.D, m.dS, m.dscaled, m.dscores,
                          np.concatenate([m.dQ_used, self.map_2.dQ_used], axis=1),
                          np.concatenate([m.dK_used, self.map_2.dK_used], axis=1), None)


def map_backward(dP: Matrix, m: DiffMap, Q_used: Matrix, K_used: Matrix, allow: np.ndarray, divisor: float,
                 softcap: float | None = None, policy: Policy = EXACT) -> MapBack:
    """One map from the gradient at its weights to its scored Queries (n, d) and Keys (m, d)."""
    P = m.weights
    D = row_dots(P, dP, policy)  # (n,)
    # P is exactly 0 at a masked cell; np.where keeps that 0 from becoming −0.0 (0 times a negative)
    dS = policy.table(np.where(allow, P * (dP - D[:, None]), 0.0))  # (n, m)
    dscaled = dS
    if softcap is not None:
        t = cap_tanh(m.scaled, softcap)  # (n, m) d/ds c·tanh(s/c) = 1 − tanh²(s/c)
        dscaled = policy.table(np.where(allow, dS * (1.0 - t * t), 0.0))
    dscores = policy.table(dscaled / divisor)  # (n, m)
    return MapBack(dP, D, dS, dscaled, dscores, policy.matmul(dscores, K_used), policy.matmul(dscores.T, Q_used))


def diff_backward(dY: Matrix, X: Matrix, X_kv: Matrix, W_Q: Matrix, W_K: Matrix, W_V: Matrix, fwd: DiffForward,
                  head: DiffHead, allow: np.ndarray, *, softcap: float | None = None,
                  biases: tuple[bool, bool, bool] = (False, False, False), policy: Policy = EXACT) -> DiffBack:
    """``dY`` (n, 2d) is the gradient at the head's output; ``X`` and ``X_kv`` are what its projections read;
    ``softcap`` is the forward's; ``biases`` says which of b_Q, b_K, b_V the head has. The parts that changed Q
    and K before the scores (``fwd.moved``) read their gradients back, last first."""
    p, lam = policy, fwd.lam
    d_normed = p.table(fwd.factor * dY)  # (n, 2d)
    gamma = np.ones(fwd.mixed.shape[1]) if head.gamma is None else np.asarray(head.gamma, dtype=np.float64)
    nb = norm_backward("rms", fwd.mixed, fwd.norm.mean, fwd.norm.root, gamma, d_normed, p)
    dmixed = nb.dX  # (n, 2d)
    dweights = p.matmul(dmixed, fwd.V.T)  # (n, m)
    dV = p.matmul(fwd.weights.T, dmixed)  # (m, 2d)
    P2 = fwd.map_2.weights
    dlambda = -float(p.table(p.matmul(dweights.reshape(1, -1), P2.reshape(-1, 1)))[0, 0])
    dP2 = p.table(-lam.value * dweights)  # (n, m)
    backs = []
    for half, dP in ((1, dweights), (2, dP2)):
        Q_used, K_used = fwd.used(half)
        backs.append(map_backward(dP, fwd.map_1 if half == 1 else fwd.map_2, Q_used, K_used, allow, fwd.divisor,
                                  softcap, p))
    b1, b2 = backs
    dQ_t = np.concatenate([b1.dQ_used, b2.dQ_used], axis=1)  # (n, 2d)
    dK_t = np.concatenate([b1.dK_used, b2.dK_used], axis=1)  # (m, 2d)
    dQ_rot = dK_rot = None
    if fwd.moved:
        dQ_rot, dK_rot = dQ_t, dK_t
        for record in reversed(fwd.moved):
            dQ_t, dK_t = record.scored_back(dQ_t, dK_t, p)
    # λ = e^(λ_q1·λ_k1) − e^(λ_q2·λ_k2) + λ_init: each exponential's slope is itself
    g1 = float(p.table(np.array(dlambda * lam.lambda_1)))
    g2 = float(p.table(np.array(-dlambda * lam.lambda_2)))
    dlq1, dlk1 = p.table(g1 * head.lambda_k1), p.table(g1 * head.lambda_q1)
    dlq2, dlk2 = p.table(g2 * head.lambda_k2), p.table(g2 * head.lambda_q2)
    has_bq, has_bk, has_bv = biases
    return DiffBack(
        d_normed, dmixed, None if head.gamma is None else nb.dgamma, dweights, dV, dlambda, b1, b2, dQ_rot, dK_rot,
        dQ_t, dK_t, g1, g2, dlq1, dlk1, dlq2, dlk2,
        p.matmul(X.T, dQ_t), p.matmul(X_kv.T, dK_t), p.matmul(X_kv.T, dV),
        p.table(dQ_t.sum(axis=0)) if has_bq else None, p.table(dK_t.sum(axis=0)) if has_bk else None,
        p.table(dV.sum(axis=0)) if has_bv else None,
        p.matmul(dQ_t, W_Q.T), p.matmul(np.concatenate([dK_t, dV], axis=1), np.concatenate([W_K, W_V], axis=1).T),
    )


def read_back(f: DiffForward, dY: Matrix, X: Matrix, X_kv: Matrix, W_Q: Matrix, W_K: Matrix, W_V: Matrix,
              allow: np.ndarray, options: Mapping[str, Any], biases: tuple[bool, bool, bool],
              policy: Policy = EXACT) -> DiffBack:
    """A differential head read backwards from ``dY`` (n, 2d), the gradient at its output: what core/gradients.py
    asks of a part whose record names a ``backward`` (DiffForward.backward names this). ``options``: what the
    head's other parts give a softmax backward (core/grad_faces/): both maps read the soft-cap's."""
    assert f.head is not None
    cap = options.get("step")  # the soft-cap's record, where the head has one
    return diff_backward(dY, X, X_kv, W_Q, W_K, W_V, f, f.head, allow, softcap=None if cap is None else cap.softcap,
                         biases=biases, policy=policy)
