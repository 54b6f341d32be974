"""[qk_norm] as a part of a head's pass: each query and key vector RMS-normalised before RoPE turns it
(kernels/qk_norm.py QKNormHead), built for core/head_parts.py's HEAD_PARTS."""

from __future__ import annotations

from typing import Any

import numpy as np

from qkv_tui.core.arrays import Matrix, Vector
from qkv_tui.core.scenario import Scenario
from qkv_tui.core.variants.qk_norm import QKNorm
from qkv_tui.kernels.attention import project
from qkv_tui.kernels.norm import Normed, normalise
from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.qk_norm import QKNormHead


def qk_norms(sc: Scenario, X: Matrix, X_kv: Matrix, policy: Policy = EXACT) -> list[QKNormHead | None]:
    """Each head's QK-norm ([qk_norm]); over every head, each token's statistics are those of its whole
    projection, the heads' columns side by side (under the same policy as the heads' own)."""
    qk = sc.qk_norm
    if qk is None:
        return [None] * len(sc.heads)
    q_rows = k_rows = None
    if qk.over == "all":
        kv_heads = sorted({sc.kv_head(h): h for h in range(len(sc.heads))}.items())  # K/V head -> a query head reading it
        Q_all = np.concatenate([project(X, h.W_Q, h.b_Q, policy) for h in sc.heads], axis=1)  # (n, H·d_k)
        K_all = np.concatenate([project(X_kv, sc.heads[h].W_K, sc.heads[h].b_K, policy) for _, h in kv_heads], axis=1)
        q_rows = _row_stats(Q_all, qk, qk.gamma_q, policy)
        k_rows = _row_stats(K_all, qk, qk.gamma_k, policy)
    out: list[QKNormHead | None] = []
    for h, head in enumerate(sc.heads):
        gamma_q, gamma_k = qk.gammas(h, sc.kv_head(h), head.d_k)
        out.append(QKNormHead(gamma_q, gamma_k, qk.eps, q_rows, k_rows))
    return out


def _row_stats(M: Matrix, qk: QKNorm, gamma: Vector, policy: Policy) -> Normed:
    with np.errstate(over="ignore", invalid="ignore"):
        return normalise(policy, "rms", M, gamma[None, :], None, qk.eps)


def qk_norm_part(run: Any) -> Any:
    """Each head's QK-norm where the scenario has [qk_norm] (``run`` is core/head_parts.py's Run)."""
    if run.sc.qk_norm is None:
        return None
    with run.quiet():
        heads = qk_norms(run.sc, run.X_in, run.X_kv, run.policy)
    return heads.__getitem__
