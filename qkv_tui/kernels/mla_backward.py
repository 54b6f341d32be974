"""DeepSeek's latent attention read backwards (kernels/mla.py's forward), exact or by hand (docs/backward.md).

Every head's softmax part is any head's (kernels/attention_backward.py's attend_backward gives each head's gradients at
q = [q_C; q_R], k = [k_C; k_R] and v_C); this module takes them the rest of the way. The rotary key k_R is one
matrix every head read, so its gradient is the sum of the heads' shares; the latent c_KV fed every head's k_C
and v_C, so its gradient is the sum of those four (two per head) paths; then back through the latent norms and
the down-projections to X̂.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from qkv_tui.kernels.mla import MlaShared, MlaWeights, Turning
from qkv_tui.kernels.norm_backward import norm_backward
from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.stats import Matrix


@dataclass(frozen=True, eq=False)
class MlaBack:
    """Every gradient of the latent layer below the heads' scores; per-head tuples in head order."""

    dq_C: tuple[Matrix, ...]  # (n, d_nope) per head
    dq_R: tuple[Matrix, ...]  # (n, d_rope) at the turned q_R (as dq_R_raw without a rotation)
    dq_R_raw: tuple[Matrix, ...]  # (n, d_rope) before the turn
    dk_C: tuple[Matrix, ...]  # (n, d_nope)
    dv_C: tuple[Matrix, ...]  # (n, d_v): attend_backward's dV
    dk_R_heads: tuple[Matrix, ...]  # (n, d_rope) each head's share of the turned k_R's gradient
    dk_R: Matrix  # (n, d_rope) Σ heads: the gradient at the shared turned k_R
    dk_R_raw: Matrix  # (n, d_rope) turned back: at X̂·W_KR
    dc_KV: Matrix  # (n, d_c) at the latent the heads expand: Σ heads dk_C·W_UKᵀ + dv_C·W_UVᵀ
    dc_KV_raw: Matrix  # (n, d_c) at X̂·W_DKV: through kv_norm where there is one (as dc_KV without)
    dgamma_kv: Matrix | None  # (d_c,) None without kv_norm
    dQ_all: Matrix  # (n, H·(d_nope + d_rope)) at every head's queries before the turn, each head [nope | rope]
    dc_Q: Matrix | None  # (n, d_cq) at the query latent W_UQ reads; None with a plain W_Q
    dc_Q_raw: Matrix | None  # (n, d_cq) at X̂·W_DQ, through q_norm where there is one
    dgamma_q: Matrix | None  # (d_cq,) None without q_norm
    dW_DKV: Matrix  # (d_model, d_c) X̂ᵀ·dc_KV_raw
    dW_UK: Matrix  # (d_c, H·d_nope) c_KVᵀ·dk_C, every head's columns side by side
    dW_UV: Matrix  # (d_c, H·d_v) c_KVᵀ·dv_C
    dW_KR: Matrix  # (d_model, d_rope) X̂ᵀ·dk_R_raw
    dW_Q: Matrix | None  # (d_model, H·d_qk) X̂ᵀ·dQ_all; None with W_DQ/W_UQ
    dW_DQ: Matrix | None  # (d_model, d_cq) X̂ᵀ·dc_Q_raw
    dW_UQ: Matrix | None  # (d_cq, H·d_qk) c_Qᵀ·dQ_all
    dX: Matrix  # (n, d_model) at X̂: the latent's, the rotary key's and the queries' paths summed


def mla_backward(X: Matrix, w: MlaWeights, shared: MlaShared, dQ_used: Sequence[Matrix], dK_used: Sequence[Matrix],
                 dV: Sequence[Matrix], rotary: Turning, policy: Policy = EXACT) -> MlaBack:
    """``dQ_used[h]`` (n, d_qk), ``dK_used[h]`` (n, d_qk) and ``dV[h]`` (n, d_v) are head h's gradients at what
    it scored and mixed (attend_backward's); ``X`` (n, d_model) is what the down-projections read (X̂)."""
    p, nope = policy, w.d_nope
    dq_C = tuple(d[:, :nope] for d in dQ_used)
    dq_R = tuple(d[:, nope:] for d in dQ_used)
    dk_C = tuple(d[:, :nope] for d in dK_used)
    dk_R_heads = tuple(d[:, nope:] for d in dK_used)
    dq_R_raw = tuple(rotary.turned_back(d, p) for d in dq_R)
    # one sum of the heads' shares per cell, written down once
    dk_R = p.table(np.sum(dk_R_heads, axis=0))  # (n, d_rope)
    dk_R_raw = rotary.turned_back(dk_R, p)
    dk_C_all = np.concatenate(dk_C, axis=1)  # (n, H·d_nope)
    dV_all = np.concatenate(dV, axis=1)  # (n, H·d_v)
    c_KV = shared.c_KV
    # every path into c_KV side by side: one dot product per cell
    dc_KV = p.matmul(np.concatenate([dk_C_all, dV_all], axis=1), np.concatenate([w.W_UK, w.W_UV], axis=1).T)
    dc_KV_raw, dgamma_kv = dc_KV, None
    if shared.c_KV_normed is not None and w.gamma_kv is not None:
        kv = norm_backward("rms", shared.c_KV_raw, shared.c_KV_normed.mean, shared.c_KV_normed.root, w.gamma_kv,
                           dc_KV, p)
        dc_KV_raw, dgamma_kv = kv.dX, kv.dgamma
    dQ_all = np.concatenate([m for pair in zip(dq_C, dq_R_raw, strict=True) for m in pair], axis=1)
    dc_Q = dc_Q_raw = dgamma_q = dW_Q = dW_DQ = dW_UQ = None
    if w.W_Q is not None:
        dW_Q = p.matmul(X.T, dQ_all)
        q_grad, q_weight = dQ_all, w.W_Q
    else:
        assert w.W_DQ is not None and w.W_UQ is not None and shared.c_Q is not None and shared.c_Q_raw is not None
        dW_UQ = p.matmul(shared.c_Q.T, dQ_all)
        dc_Q = dc_Q_raw = p.matmul(dQ_all, w.W_UQ.T)  # (n, d_cq)
        if shared.c_Q_normed is not None and w.gamma_q is not None:
            q = norm_backward("rms", shared.c_Q_raw, shared.c_Q_normed.mean, shared.c_Q_normed.root, w.gamma_q, dc_Q, p)
            dc_Q_raw, dgamma_q = q.dX, q.dgamma
        dW_DQ = p.matmul(X.T, dc_Q_raw)
        q_grad, q_weight = dc_Q_raw, w.W_DQ
    dX = p.matmul(np.concatenate([dc_KV_raw, dk_R_raw, q_grad], axis=1),
                  np.concatenate([w.W_DKV, w.W_KR, q_weight], axis=1).T)  # (n, d_model)
    return MlaBack(dq_C, dq_R, dq_R_raw, dk_C, tuple(dV), dk_R_heads, dk_R, dk_R_raw, dc_KV, dc_KV_raw, dgamma_kv,
                   dQ_all, dc_Q, dc_Q_raw, dgamma_q, p.matmul(X.T, dc_KV_raw), p.matmul(c_KV.T, dk_C_all),
                   p.matmul(c_KV.T, dV_all), p.matmul(X.T, dk_R_raw), dW_Q, dW_DQ, dW_UQ, dX)
