"""QK-norm read backwards ([qk_norm]): each head's dQ and dK through the norm (kernels/norm_backward.py), each head's
contributions to the gains' gradients, and the gains' own gradients (summed over the heads that share them, or side
by side)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from qkv_tui.core.grad_faces import GradFace, QKBack
from qkv_tui.core.variants import Vector, qk_norm
from qkv_tui.kernels.norm_backward import norm_backward
from qkv_tui.kernels.qk_norm import QKNormed

if TYPE_CHECKING:
    from qkv_tui.core.engine import Computation
    from qkv_tui.core.scenario import Matrix
    from qkv_tui.kernels.policy import Policy


def heads_back(comp: Computation, dQ_t: list[Matrix], dK_t: list[Matrix], p: Policy) -> QKBack | None:
    qk = comp.scenario.qk_norm
    if qk is None:
        return None
    if qk.over == "head":
        return _over_head(comp, dQ_t, dK_t, p)
    return _over_all(comp, dQ_t, dK_t, p)


def _over_head(comp: Computation, dQ_t: list[Matrix], dK_t: list[Matrix], p: Policy) -> QKBack:
    """Each head's vectors normalised on their own: the gains are shared, so their gradients are summed."""
    sc, qk = comp.scenario, comp.scenario.qk_norm
    assert qk is not None
    dQ, dK = [], []
    gq: list[Vector | None] = []
    gk: list[Vector | None] = []
    for h, head in enumerate(comp.heads):
        gamma_q, gamma_k = qk.gammas(h, sc.kv_head(h), head.d_k)
        qkn = head.need(QKNormed)
        bq = norm_backward("rms", head.Q, qkn.Q_normed.mean, qkn.Q_normed.root, gamma_q, dQ_t[h], p)
        bk = norm_backward("rms", head.K, qkn.K_normed.mean, qkn.K_normed.root, gamma_k, dK_t[h], p)
        dQ.append(bq.dX)
        dK.append(bk.dX)
        gq.append(bq.dgamma)
        gk.append(bk.dgamma)
    return dQ, dK, gq, gk, np.sum(_present(gq), axis=0), np.sum(_present(gk), axis=0)


def _present(values: list[Vector | None]) -> list[Vector]:
    return [v for v in values if v is not None]


def _over_all(comp: Computation, dQ_t: list[Matrix], dK_t: list[Matrix], p: Policy) -> QKBack:
    # over every head's columns together: each row's root reads the whole projection, so one head's gradient
    # reaches every head's columns; the backward runs on the wide rows and is cut back into heads
    sc, heads, qk = comp.scenario, comp.heads, comp.scenario.qk_norm
    assert qk is not None
    H, d_k = len(heads), heads[0].d_k
    Q_all = np.concatenate([h.Q for h in heads], axis=1)  # (n, H·d_k)
    first = heads[0].need(QKNormed).Q_normed
    assert first is not None
    q_back = norm_backward("rms", Q_all, first.mean, first.root, qk.gamma_q, np.concatenate(dQ_t, axis=1), p)
    dQ = [q_back.dX[:, h * d_k:(h + 1) * d_k] for h in range(H)]
    gq: list[Vector | None] = [q_back.dgamma[h * d_k:(h + 1) * d_k] for h in range(H)]
    kv_ids = sorted({sc.kv_head(h) for h in range(H)})
    reader = {g: next(h for h in range(H) if sc.kv_head(h) == g) for g in kv_ids}
    K_all = np.concatenate([heads[reader[g]].K for g in kv_ids], axis=1)  # (m, H_kv·d_k)
    k_first = heads[0].need(QKNormed).K_normed
    assert k_first is not None
    # head h's own contribution c_h: its block alone, backwards through the wide rows (linear, so the c_h sum
    # to the exact gradient); what reaches a K/V head's columns from heads that read another K/V head (through
    # the shared root) is carried by its first reader, so each K/V head's readers still sum to its gradient
    contrib, contrib_g = [], []
    for h in range(H):
        block = np.zeros_like(K_all)
        slot = kv_ids.index(sc.kv_head(h))
        block[:, slot * d_k:(slot + 1) * d_k] = dK_t[h]
        back = norm_backward("rms", K_all, k_first.mean, k_first.root, qk.gamma_k, block, p)
        contrib.append(back.dX)
        contrib_g.append(back.dgamma)
    dK: list[Matrix] = []
    gk: list[Vector | None] = []
    for h in range(H):
        g = sc.kv_head(h)
        cols = slice(kv_ids.index(g) * d_k, (kv_ids.index(g) + 1) * d_k)
        others = [o for o in range(H) if sc.kv_head(o) != g] if reader[g] == h else []
        dK.append(contrib[h][:, cols] + sum((contrib[o][:, cols] for o in others), np.zeros((K_all.shape[0], d_k))))
        gk.append(contrib_g[h][cols] + sum((contrib_g[o][cols] for o in others), np.zeros(d_k)))
    total_gk = np.sum(contrib_g, axis=0)
    return dQ, dK, gq, gk, q_back.dgamma, total_gk


FACE = GradFace(qk_norm.TABLE, heads_back=heads_back)
