"""The backward pass of a scenario: every gradient of docs/scenario-format.md, "[backward]", exact (float64).

It reads the forward pass the engine kept (core/engine.py's Computation) and walks it backwards:
the loss and dO, W_O, each head (kernels/attention_backward.py), QK-norm and the projections, the three paths
into X̂, and the pre-norm (kernels/norm_backward.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from qkv_tui.core.engine import Computation, HeadResult, turn_of
from qkv_tui.core.scenario import Matrix, Scenario
from qkv_tui.core.variants import Vector
from qkv_tui.core.variants.common import face
from qkv_tui.kernels.attention import Turn
from qkv_tui.kernels.attention_backward import AttendBack, GateBack, attend_backward, gate_backward, rotate_back
from qkv_tui.kernels.gate import Gated
from qkv_tui.kernels.norm_backward import norm_backward
from qkv_tui.kernels.policy import EXACT, ByHand, Policy
from qkv_tui.kernels.qk_norm import QKNormed
from qkv_tui.kernels.sharing import kv_owners
from qkv_tui.kernels.sinks import Sunk
from qkv_tui.kernels.softcap import Capped

if TYPE_CHECKING:  # [linear]'s, [deltanet]'s and [mla]'s backward kernels load with a scenario that has them
    from qkv_tui.kernels.cross_entropy import CrossEntropy
    from qkv_tui.kernels.deltanet_backward import DeltaBack, GatesBack
    from qkv_tui.kernels.linear_backward import LinearBack
    from qkv_tui.kernels.mla_backward import MlaBack


@dataclass(frozen=True, eq=False)
class HeadGrad:
    """One query head's gradients. Under grouped-query attention dK, dV and the K/V weights' gradients are
    this head's own contribution (Gradients.kv_heads holds their sums)."""

    dO: Matrix  # (n, d_v) at the head's output, before any gate
    attend: AttendBack  # dV, dP, D, dS, dscaled, dQ_used, dK_used, dsink
    dQ_rot: Matrix | None  # (n, d_k) at the turned Queries; None without rope
    dK_rot: Matrix | None  # (m, d_k)
    dQ_turned: Matrix  # (n, d_k) at what RoPE turns (Q̂ with QK-norm, else Q)
    dK_turned: Matrix  # (m, d_k)
    dQ: Matrix  # (n, d_k) at Q = X̂·W_Q + b_Q
    dK: Matrix  # (m, d_k)
    dW_Q: Matrix  # (d_model, d_k) X̂ᵀ·dQ
    dW_K: Matrix  # (d_in, d_k)
    dW_V: Matrix  # (d_in, d_v)
    db_Q: Vector | None  # (d_k,) Σ over rows of dQ; None without b_Q
    db_K: Vector | None
    db_V: Vector | None
    gate: GateBack | None  # the gate read backwards; None without a gate
    dgamma_q: Vector | None  # (d_k,) None without QK-norm
    dgamma_k: Vector | None  # (d_k,)
    # [linear] / [deltanet] read backwards in place of the softmax (attend then holds their dV, dQ_used, dK_used)
    linear: LinearBack | None = None
    deltanet: DeltaBack | None = None
    # a part whose record reads itself backwards in place of the one softmax (differential attention's DiffBack):
    # attend, dQ and dK are then what it gives, and its own gradients are here
    own: Any = None

    @property
    def dV(self) -> Matrix:
        return self.attend.dV


@dataclass(frozen=True, eq=False)
class KVGrad:
    """One K/V head's gradients: the sums over the query heads reading it."""

    heads: tuple[int, ...]  # the query heads reading it
    dK: Matrix  # (m, d_k)
    dV: Matrix  # (m, d_v)
    dW_K: Matrix  # (d_in, d_k)
    dW_V: Matrix  # (d_in, d_v)
    db_K: Vector | None
    db_V: Vector | None


@dataclass(frozen=True, eq=False)
class Gradients:
    loss: float | None  # ½·Σ (output − target)²; None where dO is given
    dO: Matrix  # (n, d_out) at the final output
    d_concat: Matrix  # (n, Σ d_v) dO·W_Oᵀ (dO itself without W_O)
    dW_O: Matrix | None  # (Σ d_v, d_out) concatᵀ·dO
    db_O: Vector | None  # (d_out,)
    heads: tuple[HeadGrad, ...]
    kv_heads: tuple[KVGrad, ...]  # one per K/V head
    shared: bool  # some K/V head is read by more than one query head
    dX_norm: Matrix  # (n, d_model) at X̂: the sum of the Query, Key/Value and gate paths
    dX: Matrix  # (n, d_model) at X, through the pre-norm where there is one
    dgamma: Vector | None  # (d_model,) None without [norm]
    dbeta: Vector | None  # (d_model,) None unless [norm] gives beta
    dgamma_q: Vector | None  # the scenario's own gamma_q's gradient (the heads' summed, or side by side)
    dgamma_k: Vector | None
    gates: GatesBack | None = None  # [deltanet]'s W_a, A_log, dt_bias, W_b; None unless g or β is computed
    mla: MlaBack | None = None  # [mla]: the latent layer's gradients (its weights, c_KV, the shared k_R); None without
    cross_entropy: CrossEntropy | None = None  # [backward] loss = "cross_entropy": logits … dW_U; None otherwise


def upstream(sc: Scenario, output: Matrix, policy: Policy = EXACT) -> tuple[float | None, Matrix]:
    """The loss and the gradient at the final output: output − target, or the dO the file gives."""
    bw = sc.backward
    assert bw is not None
    if bw.dO is not None:
        return None, bw.dO
    if bw.cross_entropy:
        ce = _cross_entropy(sc, output, policy)
        return ce.loss, ce.dO
    assert bw.target is not None
    diff = policy.table(output - bw.target)  # (n, d_out)
    if policy is EXACT:
        return float(0.5 * (diff * diff).sum()), diff
    rows = policy.table(0.5 * (diff * diff).sum(axis=1))  # (n,) by hand: each row's share written down, then summed
    return float(policy.table(np.array(rows.sum()))), diff


def _cross_entropy(sc: Scenario, output: Matrix, policy: Policy) -> CrossEntropy:
    from qkv_tui.kernels.cross_entropy import cross_entropy  # with a scenario that trains a vocabulary

    bw = sc.backward
    assert bw is not None and bw.W_U is not None and bw.next is not None
    return cross_entropy(output, bw.W_U, bw.next, policy)


def gradients(comp: Computation, policy: Policy | None = None, trig: Mapping[int, Turn] | None = None,
              latent_trig: Turn | None = None) -> Gradients:
    """Every gradient of the scenario's [backward], from the forward pass ``comp``: exact, or, where ``comp``
    was worked by hand, worked by hand as well (each product and each table written down rounded).

    A worksheet passes its own ``policy`` (each table from the printed ones, rounded once) and ``trig``, RoPE's
    cos and sin by d_k as its page prints them (edges/worksheet/backward/tables.py), and ``latent_trig``, [mla]'s shared
    rotary part's."""
    sc = comp.scenario
    p: Policy = EXACT if comp.hand_decimals is None else ByHand(comp.hand_decimals)
    p = p if policy is None else policy
    bw = sc.backward
    ce = None if bw is None or not bw.cross_entropy else _cross_entropy(sc, comp.output, p)
    loss, dO = upstream(sc, comp.output, p) if ce is None else (ce.loss, ce.dO)
    d_concat = dO if sc.W_O is None else p.matmul(dO, sc.W_O.T)  # (n, Σ d_v)
    dW_O = None if sc.W_O is None else p.matmul(comp.concat.T, dO)
    db_O = None if sc.b_O is None else p.table(dO.sum(axis=0))
    X_in, X_kv = comp.X_in, comp.X_kv_in
    start = 0
    parts = []
    for hr in comp.heads:
        parts.append(_attend(sc, hr, X_in, d_concat[:, start:start + hr.d_v], p, trig, X_kv))
        start += hr.d_v
    if sc.mla is not None:
        return replace(_mla_gradients(comp, parts, loss, dO, d_concat, dW_O, db_O, p, latent_trig), cross_entropy=ce)
    dQ_all, dK_all, dgq, dgk, dgamma_q, dgamma_k = _qk_norm_back(comp, parts, p)
    heads: list[HeadGrad] = []
    # dX̂'s paths side by side: (n, ·) gradients against (d_model, ·) weights, one dot product per cell
    grads_in: list[Matrix] = []
    weights_in: list[Matrix] = []
    for h, (head, (dO_h, ab, gb, dQ_rot, dK_rot, dQ_t, dK_t, state)) in enumerate(zip(comp.heads, parts, strict=True)):
        dQ, dK = dQ_all[h], dK_all[h]
        grads_in.append(dQ)
        weights_in.append(head.W_Q)
        if not sc.is_cross:
            grads_in += [dK, ab.dV]
            weights_in += [head.W_K, head.W_V]
        if gb is not None and head.part(Gated) is not None:
            grads_in.append(gb.d_logit)
            weights_in.append(head.need(Gated).W_G)
        heads.append(HeadGrad(
            dO_h, ab, dQ_rot, dK_rot, dQ_t, dK_t, dQ, dK, p.matmul(X_in.T, dQ), p.matmul(X_kv.T, dK),
            p.matmul(X_kv.T, ab.dV), None if head.b_Q is None else p.table(dQ.sum(axis=0)),
            None if head.b_K is None else p.table(dK.sum(axis=0)), None if head.b_V is None else p.table(ab.dV.sum(axis=0)),
            gb, dgq[h], dgk[h], *state,
        ))
    gates = _gates_back(comp, heads, grads_in, weights_in, p)
    dX_norm = p.matmul(np.concatenate(grads_in, axis=1), np.concatenate(weights_in, axis=1).T)  # (n, d_model)
    kv = _kv_sums(sc, heads)
    dX, dgamma, dbeta = dX_norm, None, None
    if sc.norm is not None and comp.norm is not None:
        back = norm_backward(sc.norm.kind, sc.X, comp.norm.mean, comp.norm.root, sc.norm.gamma, dX_norm, p)
        dX, dgamma = back.dX, back.dgamma
        dbeta = back.dbeta if sc.norm.beta is not None else None
    return Gradients(loss, dO, d_concat, dW_O, db_O, tuple(heads), kv, any(len(k.heads) > 1 for k in kv),
                     dX_norm, dX, dgamma, dbeta, dgamma_q, dgamma_k, gates, cross_entropy=ce)


def _mla_gradients(comp: Computation, parts: list[_Part], loss: float | None, dO: Matrix, d_concat: Matrix,
                   dW_O: Matrix | None, db_O: Vector | None, p: Policy, trig: Turn | None = None) -> Gradients:
    """[mla]: each head's softmax part as any head's, then the latent layer (kernels/mla_backward.py) to X̂.

    A head's dQ and dK are at its q = [q_C | q_R] and k = [k_C | k_R] before the turn (dK holds this head's own
    share of the shared k_R); its dW_Q, dW_K, dW_V are against the multiplied-through weights its Head holds
    (exact only without the latent norms): what trains is the latent's own weights, in Gradients.mla."""
    sc = comp.scenario
    mla = sc.mla
    assert mla is not None
    turn = turn_of(mla.rope, sc.positions, mla.d_rope, p) if trig is None else trig
    from qkv_tui.kernels.mla import MlaHead
    from qkv_tui.kernels.mla_backward import mla_backward

    first = comp.heads[0].need(MlaHead)
    abs_ = [part[1] for part in parts]

    back = mla_backward(comp.X_in, mla.weights(), first.shared, [a.dQ_used for a in abs_], [a.dK_used for a in abs_],
                        [a.dV for a in abs_], turn, p)
    X_in = comp.X_in
    heads: list[HeadGrad] = []
    for h, (dO_h, ab, gb, _, _, _, _, _) in enumerate(parts):
        dk_R_raw_h = back.dk_R_heads[h] if turn is None else rotate_back(back.dk_R_heads[h], turn.cos, turn.sin,
                                                                          turn.pairs, p)
        dQ = np.concatenate([back.dq_C[h], back.dq_R_raw[h]], axis=1)  # (n, d_qk)
        dK = np.concatenate([back.dk_C[h], dk_R_raw_h], axis=1)  # (n, d_qk)
        rot = turn is not None
        heads.append(HeadGrad(
            dO_h, ab, ab.dQ_used if rot else None, ab.dK_used if rot else None, dQ, dK, dQ, dK,
            p.matmul(X_in.T, dQ), p.matmul(X_in.T, dK), p.matmul(X_in.T, ab.dV), None, None, None, gb, None, None,
        ))
    kv = _kv_sums(sc, heads)
    dX, dgamma, dbeta = back.dX, None, None
    if sc.norm is not None and comp.norm is not None:
        nb = norm_backward(sc.norm.kind, sc.X, comp.norm.mean, comp.norm.root, sc.norm.gamma, back.dX, p)
        dX, dgamma = nb.dX, nb.dgamma
        dbeta = nb.dbeta if sc.norm.beta is not None else None
    return Gradients(loss, dO, d_concat, dW_O, db_O, tuple(heads), kv, False, back.dX, dX, dgamma, dbeta,
                     back.dgamma_q, None, mla=back)


_QKBack = tuple[list[Matrix], list[Matrix], list[Vector | None], list[Vector | None], Vector | None, Vector | None]
_State = tuple["LinearBack | None", "DeltaBack | None", Any]
_Part = tuple[Matrix, AttendBack, GateBack | None, Matrix | None, Matrix | None, Matrix, Matrix, _State]


def _attend(sc: Scenario, h: HeadResult, X_in: Matrix, dJ: Matrix, p: Policy,
            trig: Mapping[int, Turn] | None = None, X_kv: Matrix | None = None) -> _Part:
    """One head from the gradient at what Concat joins (``dJ``, n × d_v) back to what RoPE turns."""
    gb = None
    dO_h = dJ
    if h.part(Gated) is not None:
        gb = gate_backward(dJ, X_in, h.need(Gated).W_G, h.output, h.need(Gated).gate, p)
        dO_h = gb.d_output
    own = next((r for r in h.parts.values() if hasattr(r, "backward")), None)
    if own is not None:  # its own maps, turn and norm read backwards, down to what its projections gave
        back = face(own.backward)(own, dO_h, X_in, X_in if X_kv is None else X_kv, h.W_Q, h.W_K, h.W_V, sc.allow,
                                  h.read(Capped, lambda c: c.softcap), (h.b_Q is not None, h.b_K is not None,
                                                                        h.b_V is not None), p)
        return dO_h, back.attend, gb, back.dQ_rot, back.dK_rot, back.dQ, back.dK, (None, None, back)
    share = None if h.part(Sunk) is None else h.need(Sunk).sink_exp / h.row_sum  # (n,) each row's sink weight
    state: _State = (None, None, None)
    if sc.linear is not None or sc.deltanet is not None:  # their heads' maps are no softmax
        ab, state = _state_back(sc, h, dO_h, p)
    else:
        ab = attend_backward(dO_h, h.Q_used, h.K_used, h.V, h.weights, h.output, sc.allow, h.scale,
                             scaled=h.scaled, softcap=h.read(Capped, lambda c: c.softcap), sink_share=share, policy=p)
    dQ_rot = dK_rot = None
    dQ_t, dK_t = ab.dQ_used, ab.dK_used
    turn = turn_of(sc.rope, sc.positions, h.d_k, p) if trig is None else trig.get(h.d_k)
    if turn is not None:
        dQ_rot, dK_rot = dQ_t, dK_t
        dQ_t = rotate_back(dQ_rot, turn.cos, turn.sin, turn.pairs, p)
        dK_t = rotate_back(dK_rot, turn.cos, turn.sin, turn.pairs, p)
    return dO_h, ab, gb, dQ_rot, dK_rot, dQ_t, dK_t, state


def _state_back(sc: Scenario, h: HeadResult, dO_h: Matrix, p: Policy) -> tuple[AttendBack, _State]:
    """A [linear] or [deltanet] head read backwards (kernels/linear_backward.py, kernels/deltanet_backward.py).
    Its AttendBack carries dV, dQ_used and dK_used on to RoPE and the projections like a softmax head's; there is
    no softmax, so its dP, dS and dscaled are the quadratic form's dweights and dA ([linear]) or 0 ([deltanet]),
    read by no softmax stage, and the JSON writes them null."""
    if sc.linear is not None:
        from qkv_tui.kernels.linear import LinearForward
        from qkv_tui.kernels.linear_backward import linear_backward

        lb = linear_backward(dO_h, h.Q_used, h.K_used, h.V, h.need(LinearForward), sc.allow, p)
        ab = AttendBack(lb.dV, lb.dweights, lb.D, lb.dA, lb.dA, lb.dA, lb.dQ_used, lb.dK_used, None)
        return ab, (lb, None, None)
    from qkv_tui.kernels.deltanet import DeltaForward
    from qkv_tui.kernels.deltanet_backward import deltanet_backward

    db = deltanet_backward(dO_h, h.Q_used, h.K_used, h.V, h.need(DeltaForward), p)
    n = dO_h.shape[0]
    zero = np.zeros((n, n))
    return AttendBack(db.dv, zero, np.zeros(n), zero, zero, zero, db.dQ_used, db.dK_used, None), (None, db, None)


def _gates_back(comp: Computation, heads: list[HeadGrad], grads_in: list[Matrix], weights_in: list[Matrix],
                p: Policy) -> GatesBack | None:
    """[deltanet]'s g and β where computed from X̂: their weights' gradients, and their paths into dX̂ added to
    ``grads_in``/``weights_in``."""
    dn = comp.scenario.deltanet
    if dn is None or (dn.g is not None and dn.beta is not None):
        return None
    from qkv_tui.kernels.deltanet import DeltaForward

    fwd = [hr.part(DeltaForward) for hr in comp.heads]
    back = [hg.deltanet for hg in heads]
    assert all(f is not None for f in fwd) and all(b is not None for b in back)
    g = np.stack([f.g for f in fwd if f is not None], axis=1)  # (n, H)
    beta = np.stack([f.beta for f in fwd if f is not None], axis=1)
    dg = np.stack([b.dg for b in back if b is not None], axis=1)
    dbeta = np.stack([b.dbeta for b in back if b is not None], axis=1)
    from qkv_tui.kernels.deltanet_backward import gates_backward

    gb = gates_backward(comp.X_in, g, beta, dg, dbeta, dn.W_a if dn.g is None else None, dn.A_log, dn.dt_bias,
                        dn.W_b if dn.beta is None else None, p)
    for d, W in ((gb.da, dn.W_a), (gb.db, dn.W_b)):
        if d is not None and W is not None:
            grads_in.append(d)
            weights_in.append(W)
    return gb


def _qk_norm_back(comp: Computation, parts: list[_Part], p: Policy) -> _QKBack:
    """Each head's dQ and dK through QK-norm (or as they are without it), each head's contributions to the
    gains' gradients, and the gains' own gradients (summed over the heads that share them, or side by side)."""
    qk = comp.scenario.qk_norm
    dQ_t = [p[5] for p in parts]
    dK_t = [p[6] for p in parts]
    H = len(comp.heads)
    if qk is None:
        return dQ_t, dK_t, [None] * H, [None] * H, None, None
    if qk.over == "head":
        return _qk_norm_head(comp, dQ_t, dK_t, p)
    return _qk_norm_all(comp, dQ_t, dK_t, p)


def _qk_norm_head(comp: Computation, dQ_t: list[Matrix], dK_t: list[Matrix], p: Policy) -> _QKBack:
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


def _qk_norm_all(comp: Computation, dQ_t: list[Matrix], dK_t: list[Matrix], p: Policy) -> _QKBack:
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




def _kv_sums(sc: Scenario, heads: list[HeadGrad]) -> tuple[KVGrad, ...]:
    """The K/V heads' gradients: each query head's contribution summed over the heads reading one K/V head."""
    owners = kv_owners([sc.kv_head(h) for h in range(len(sc.heads))], sc.heads)
    out: list[KVGrad] = []
    for g in dict.fromkeys(owners):
        readers = tuple(h for h, o in enumerate(owners) if o == g)

        def total(name: str, readers: tuple[int, ...] = readers) -> Matrix:
            summed: Matrix = np.sum([getattr(heads[h], name) for h in readers], axis=0)
            return summed

        first = heads[g]
        out.append(KVGrad(readers, total("dK"), total("dV"), total("dW_K"), total("dW_V"),
                          None if first.db_K is None else total("db_K"),
                          None if first.db_V is None else total("db_V")))
    return tuple(out)
