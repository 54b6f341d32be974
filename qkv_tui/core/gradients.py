"""The backward pass of a scenario: every gradient of docs/scenario-format.md, "[backward]", exact (float64).

It reads the forward pass the engine kept (core/engine.py's Computation) and walks it backwards:
the loss and dO, W_O, each head (kernels/attention_backward.py), QK-norm and the projections, the three paths
into X̂, and the pre-norm (kernels/norm_backward.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np

from qkv_tui.core import grad_faces
from qkv_tui.core import part_questions as ask
from qkv_tui.core.engine import Computation, HeadResult
from qkv_tui.core.head import NO_PARTS, Parts, parts_of
from qkv_tui.core.scenario import Matrix, Scenario
from qkv_tui.core.variants import Vector
from qkv_tui.core.variants.common import face
from qkv_tui.kernels.attention import Turn
from qkv_tui.kernels.attention_backward import AttendBack, attend_backward
from qkv_tui.kernels.norm_backward import norm_backward
from qkv_tui.kernels.policy import EXACT, ByHand, Policy
from qkv_tui.kernels.sharing import kv_owners

if TYPE_CHECKING:
    from qkv_tui.kernels.cross_entropy import CrossEntropy

P = TypeVar("P")


class _Records:
    """A gradient record's parts: each variant's own record of it read backwards, keyed by the record's type (as a
    head's forward records are, core/head.py), so the record has no field of any variant's."""

    parts: Parts

    def part(self, kind: type[P]) -> P | None:
        """The record of the part ``kind``; None where there is none."""
        return cast("P | None", self.parts.get(kind))

    def need(self, kind: type[P]) -> P:
        """The record of the part ``kind``, where the caller knows there is one."""
        found = self.parts.get(kind)
        if found is None:
            raise LookupError(f"no {kind.__name__} in these gradients")
        return cast(P, found)


@dataclass(frozen=True, eq=False)
class HeadGrad(_Records):
    """One query head's gradients. Under grouped-query attention dK, dV and the K/V weights' gradients are
    this head's own contribution (Gradients.kv_heads holds their sums)."""

    dO: Matrix  # (n, d_v) at the head's own output, before any part around it (a gate) acts on it
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
    dgamma_q: Vector | None  # (d_k,) None without QK-norm
    dgamma_k: Vector | None  # (d_k,)
    # each part's record of this head read backwards (core/grad_faces/): a part around the output (the gate's), a
    # map that is no softmax read back in its place (attend then holds its dV, dQ_used, dK_used); ``part(kind)``
    parts: Parts = field(default_factory=lambda: NO_PARTS)
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
class Gradients(_Records):
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
    # each part's record of the whole layer read backwards (core/grad_faces/ layer_back, or the layer a table builds
    # itself: runs_heads_back); ``part(kind)``
    parts: Parts = field(default_factory=lambda: NO_PARTS)
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
    own = ask.scenario_says(sc, "runs_heads_back")  # a table whose heads its own layer builds reads them back ([mla])
    if own is not None:
        read: Gradients = face(own)(comp, parts, loss, dO, d_concat, dW_O, db_O, p, latent_trig)
        return replace(read, cross_entropy=ce)
    dQ_all, dK_all, dgq, dgk, dgamma_q, dgamma_k = _heads_back(comp, parts, p)
    heads: list[HeadGrad] = []
    # dX̂'s paths side by side: (n, ·) gradients against (d_model, ·) weights, one dot product per cell
    grads_in: list[Matrix] = []
    weights_in: list[Matrix] = []
    for h, (head, (dO_h, ab, records, dQ_rot, dK_rot, dQ_t, dK_t, own_back)) in enumerate(
            zip(comp.heads, parts, strict=True)):
        dQ, dK = dQ_all[h], dK_all[h]
        grads_in.append(dQ)
        weights_in.append(head.W_Q)
        if not sc.is_cross:
            grads_in += [dK, ab.dV]
            weights_in += [head.W_K, head.W_V]
        hg = HeadGrad(
            dO_h, ab, dQ_rot, dK_rot, dQ_t, dK_t, dQ, dK, p.matmul(X_in.T, dQ), p.matmul(X_kv.T, dK),
            p.matmul(X_kv.T, ab.dV), None if head.b_Q is None else p.table(dQ.sum(axis=0)),
            None if head.b_K is None else p.table(dK.sum(axis=0)), None if head.b_V is None else p.table(ab.dV.sum(axis=0)),
            dgq[h], dgk[h], parts_of(records), own_back,
        )
        for f in grad_faces.faces():  # the parts' own paths into X̂ from this head (the gate's, through W_G)
            for d, W in [] if f.paths is None else f.paths(head, hg):
                grads_in.append(d)
                weights_in.append(W)
        heads.append(hg)
    layer: list[object] = []
    for f in grad_faces.faces():  # the layer's parts read back once every head is (and their paths after the heads')
        read_back = None if f.layer_back is None else f.layer_back(comp, heads, p)
        if read_back is not None:
            layer.append(read_back[0])
            grads_in += [d for d, _ in read_back[1]]
            weights_in += [W for _, W in read_back[1]]
    dX_norm = p.matmul(np.concatenate(grads_in, axis=1), np.concatenate(weights_in, axis=1).T)  # (n, d_model)
    kv = _kv_sums(sc, heads)
    dX, dgamma, dbeta = dX_norm, None, None
    if sc.norm is not None and comp.norm is not None:
        back = norm_backward(sc.norm.kind, sc.X, comp.norm.mean, comp.norm.root, sc.norm.gamma, dX_norm, p)
        dX, dgamma = back.dX, back.dgamma
        dbeta = back.dbeta if sc.norm.beta is not None else None
    return Gradients(loss, dO, d_concat, dW_O, db_O, tuple(heads), kv, any(len(k.heads) > 1 for k in kv),
                     dX_norm, dX, dgamma, dbeta, dgamma_q, dgamma_k, parts_of(tuple(layer)), cross_entropy=ce)


_QKBack = tuple[list[Matrix], list[Matrix], list[Vector | None], list[Vector | None], Vector | None, Vector | None]
# (dO at the head's own output, its softmax or map read back, its parts' records read back, dQ_rot, dK_rot, dQ and dK
# where they were turned, the record of a part that reads the head back itself)
_Part = tuple[Matrix, AttendBack, tuple[object, ...], Matrix | None, Matrix | None, Matrix, Matrix, Any]


def _attend(sc: Scenario, h: HeadResult, X_in: Matrix, dJ: Matrix, p: Policy,
            trig: Mapping[int, Turn] | None = None, X_kv: Matrix | None = None) -> _Part:
    """One head from the gradient at what Concat joins (``dJ``, n × d_v) back to what RoPE turns."""
    records: list[object] = []
    dO_h = dJ
    for f in grad_faces.faces():  # a part around the head's output (the gate), read back first
        outer = None if f.output_back is None else f.output_back(h, dO_h, X_in, p)
        if outer is not None:
            dO_h = outer[0]
            records.append(outer[1])
    options = grad_faces.options(h)  # what the head's variants' records give the softmax backward (core/grad_faces/)
    own = next((r for r in h.parts.values() if hasattr(r, "backward")), None)
    if own is not None:  # its own maps, turn and norm read backwards, down to what its projections gave
        back = face(own.backward)(own, dO_h, X_in, X_in if X_kv is None else X_kv, h.W_Q, h.W_K, h.W_V, sc.allow,
                                  options, (h.b_Q is not None, h.b_K is not None, h.b_V is not None), p)
        return dO_h, back.attend, tuple(records), back.dQ_rot, back.dK_rot, back.dQ, back.dK, back
    mapped = next((m for f in grad_faces.faces() if f.map_back is not None  # a map that is no softmax, read back
                   if (m := f.map_back(sc, h, dO_h, p)) is not None), None)
    if mapped is not None:
        ab = mapped[0]
        records.append(mapped[1])
    else:
        ab = attend_backward(dO_h, h.Q_used, h.K_used, h.V, h.weights, h.output, sc.allow, h.scale,
                             scaled=h.scaled, policy=p, **options)
    for f in grad_faces.faces():  # a turn of Q and K, read back (RoPE's)
        turned = None if f.turn_back is None else f.turn_back(sc, h, ab.dQ_used, ab.dK_used, p, trig)
        if turned is not None:
            return (dO_h, ab, tuple(records), *turned, None)
    return dO_h, ab, tuple(records), None, None, ab.dQ_used, ab.dK_used, None


def _heads_back(comp: Computation, parts: list[_Part], p: Policy) -> _QKBack:
    """Each head's dQ and dK at its projections, through a norm across the heads' Queries and Keys (QK-norm's, read
    back by its own module) or as they are without one; each head's share of its gains' gradients, and theirs."""
    dQ_t = [part[5] for part in parts]
    dK_t = [part[6] for part in parts]
    for f in grad_faces.faces():
        back = None if f.heads_back is None else f.heads_back(comp, dQ_t, dK_t, p)
        if back is not None:
            return back
    H = len(comp.heads)
    return dQ_t, dK_t, [None] * H, [None] * H, None, None


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
