"""[mla] read backwards (core/gradients.py's pass where the scenario has a latent layer): each head's softmax part as
any head's, then the latent layer (kernels/mla_backward.py) down to X̂ and the pre-norm."""

from __future__ import annotations

import numpy as np

from qkv_tui.core.engine import Computation
from qkv_tui.core.gradients import Gradients, HeadGrad, _kv_sums, _Part
from qkv_tui.core.scenario import Matrix
from qkv_tui.core.variants import Vector
from qkv_tui.kernels.attention import Turn
from qkv_tui.kernels.norm_backward import norm_backward
from qkv_tui.kernels.policy import Policy


def mla_gradients(comp: Computation, parts: list[_Part], loss: float | None, dO: Matrix, d_concat: Matrix,
                   dW_O: Matrix | None, db_O: Vector | None, p: Policy, trig: Turn | None = None) -> Gradients:
    """[mla]: each head's softmax part as any head's, then the latent layer (kernels/mla_backward.py) to X̂.

    A head's dQ and dK are at its q = [q_C | q_R] and k = [k_C | k_R] before the turn (dK holds this head's own
    share of the shared k_R); its dW_Q, dW_K, dW_V are against the multiplied-through weights its Head holds
    (exact only without the latent norms): what trains is the latent's own weights, the layer's MlaBack (``Gradients.part``)."""
    sc = comp.scenario
    mla = sc.mla
    assert mla is not None
    rotary = mla.rotation(sc.positions, p, trig)
    from qkv_tui.core.head import parts_of
    from qkv_tui.kernels.mla import MlaHead
    from qkv_tui.kernels.mla_backward import mla_backward

    first = comp.heads[0].need(MlaHead)
    abs_ = [part[1] for part in parts]

    back = mla_backward(comp.X_in, mla.weights(), first.shared, [a.dQ_used for a in abs_], [a.dK_used for a in abs_],
                        [a.dV for a in abs_], rotary, p)
    X_in = comp.X_in
    heads: list[HeadGrad] = []
    for h, (dO_h, ab, records, _, _, _, _, _) in enumerate(parts):
        dk_R_raw_h = rotary.turned_back(back.dk_R_heads[h], p)
        dQ = np.concatenate([back.dq_C[h], back.dq_R_raw[h]], axis=1)  # (n, d_qk)
        dK = np.concatenate([back.dk_C[h], dk_R_raw_h], axis=1)  # (n, d_qk)
        rot = rotary.turns
        heads.append(HeadGrad(
            dO_h, ab, ab.dQ_used if rot else None, ab.dK_used if rot else None, dQ, dK, dQ, dK,
            p.matmul(X_in.T, dQ), p.matmul(X_in.T, dK), p.matmul(X_in.T, ab.dV), None, None, None, None, None,
            parts_of(records),
        ))
    kv = _kv_sums(sc, heads)
    dX, dgamma, dbeta = back.dX, None, None
    if sc.norm is not None and comp.norm is not None:
        nb = norm_backward(sc.norm.kind, sc.X, comp.norm.mean, comp.norm.root, sc.norm.gamma, back.dX, p)
        dX, dgamma = nb.dX, nb.dgamma
        dbeta = nb.dbeta if sc.norm.beta is not None else None
    return Gradients(loss, dO, d_concat, dW_O, db_O, tuple(heads), kv, False, back.dX, dX, dgamma, dbeta,
                     back.dgamma_q, None, parts_of((back,)))
