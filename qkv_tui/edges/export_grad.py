"""The JSON export's ``"grad"`` and ``"train"`` (docs/scenario-format.md, "[backward]"): null without
[backward]; every gradient in the documented order, null where the scenario does not use the part."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

import numpy as np

from qkv_tui.core.engine import Computation, compute
from qkv_tui.core.gradients import Gradients, HeadGrad, KVGrad, gradients
from qkv_tui.core.scenario import Matrix, Scenario, ScenarioError
from qkv_tui.core.toml_text import number as fmt_lr
from qkv_tui.core.training import steps
from qkv_tui.kernels.mla_backward import MlaBack


class Writer(Protocol):
    def write(self, text: str) -> None: ...


Fields = list[tuple[str, Any]]
WriteFields = Callable[[Any, Iterable[tuple[str, Any]], str], None]


class Nested:
    """A JSON object (``fields``) or a list of them (``items``) inside the document, written by the
    export's own field writer so its matrices go out a row per line like every other."""

    def __init__(self, write_fields: WriteFields, fields: Fields | None = None, items: list[Fields] | None = None) -> None:
        self.write_fields, self.fields, self.items = write_fields, fields, items

    def write(self, out: Writer, indent: str) -> None:
        if self.fields is not None:
            self.write_fields(out, self.fields, indent)
            return
        assert self.items is not None
        out.write("[\n")
        for i, item in enumerate(self.items):
            if i:
                out.write(",\n")
            out.write(indent + "  ")
            self.write_fields(out, item, indent + "  ")
        out.write(f"\n{indent}]")


def _v(values: np.ndarray | None) -> list[float] | None:
    return None if values is None else [float(x) for x in values]


def head_grad_fields(g: HeadGrad, mla: tuple[MlaBack, int, int] | None = None) -> Fields:
    """``mla``: (the layer's gradients, the head, its query width) under [mla], whose heads have no W_K or W_V
    of their own: dW_Q is the head's columns of the layer's W_Q (null with W_DQ/W_UQ)."""
    a = g.attend
    softmax = g.linear is None and g.deltanet is None  # [linear] and [deltanet] have no dP, dS, dscaled
    dW_Q: Matrix | None = g.dW_Q
    dW_K: Matrix | None = g.dW_K
    dW_V: Matrix | None = g.dW_V
    if mla is not None:
        back, h, d_qk = mla
        dW_Q = None if back.dW_Q is None else back.dW_Q[:, h * d_qk:(h + 1) * d_qk]
        dW_K = dW_V = None
    return [
        ("dO", g.dO), ("dV", a.dV), ("dP", a.dP if softmax else None), ("dS", a.dS if softmax else None),
        ("dscaled", a.dscaled if softmax else None),
        ("dQ", g.dQ), ("dK", g.dK), ("dQ_rot", g.dQ_rot), ("dK_rot", g.dK_rot),
        ("dW_Q", dW_Q), ("dW_K", dW_K), ("dW_V", dW_V),
        ("db_Q", _v(g.db_Q)), ("db_K", _v(g.db_K)), ("db_V", _v(g.db_V)), ("dsink", a.dsink),
        ("dW_G", None if g.gate is None else g.gate.dW_G), ("dgamma_q", _v(g.dgamma_q)), ("dgamma_k", _v(g.dgamma_k)),
    ]


def kv_grad_fields(k: KVGrad) -> Fields:
    return [("dK", k.dK), ("dV", k.dV), ("dW_K", k.dW_K), ("dW_V", k.dW_V), ("db_K", _v(k.db_K)), ("db_V", _v(k.db_V))]


def grad_fields(sc: Scenario, g: Gradients, write_fields: WriteFields) -> Fields:
    return _fields(sc, g, write_fields) + _cross_entropy(sc, g, write_fields) + _own(g, write_fields)


def _own(g: Gradients, write_fields: WriteFields) -> Fields:
    """A part's own gradients where its heads' records give them (differential attention's λ vectors, written only
    there): under the record's ``grad_key``, each of its ``grad_rows`` one row per head, each of its ``grad_sums``
    summed over the heads (null where the part has none)."""
    records = [hg.own for hg in g.heads if hg.own is not None]
    if not records:
        return []
    first = records[0]
    rows = [(name, np.stack([getattr(r, name) for r in records])) for name in first.grad_rows]
    sums = [(name, None if getattr(first, name) is None else _v(np.sum([getattr(r, name) for r in records], axis=0)))
            for name in first.grad_sums]
    return [(first.grad_key, Nested(write_fields, fields=rows + sums))]


def _cross_entropy(sc: Scenario, g: Gradients, write_fields: WriteFields) -> Fields:
    """``"cross_entropy"``, written only where the loss is one: every other scenario's JSON stays as it was."""
    bw, ce = sc.backward, g.cross_entropy
    if bw is None or not bw.cross_entropy or ce is None:
        return []
    return [("cross_entropy", Nested(write_fields, fields=[
        ("W_U", bw.W_U), ("next", list(bw.next or ())), ("logits", ce.logits), ("probs", ce.probs),
        ("nll", _v(ce.nll)), ("dlogits", ce.dlogits), ("dW_U", ce.dW_U)]))]


def _fields(sc: Scenario, g: Gradients, write_fields: WriteFields) -> Fields:
    return [
        ("loss", g.loss), ("dO", g.dO), ("d_concat", g.d_concat), ("dW_O", g.dW_O),
        ("dX", g.dX), ("dX_norm", g.dX_norm if sc.norm is not None else None), ("dgamma", _v(g.dgamma)),
        ("heads", Nested(write_fields, items=[
            head_grad_fields(hg, None if g.mla is None or sc.mla is None else (g.mla, h, sc.mla.d_qk))
            for h, hg in enumerate(g.heads)])),
        ("kv_heads", Nested(write_fields, items=[kv_grad_fields(k) for k in g.kv_heads]) if g.shared else None),
        ("db_O", _v(g.db_O)), ("dbeta", _v(g.dbeta)),
        ("mla", None if g.mla is None else Nested(write_fields, fields=mla_grad_fields(g.mla))),
        ("linear", _linear(g, write_fields) if sc.linear is not None else None),
        ("deltanet", _deltanet(g, write_fields) if sc.deltanet is not None else None),
        # QK-norm's gains as the file gives them: each head's entry holds its own share, and a gain the heads
        # share (over = "head") moves by their sum, as kv_heads sums shared K/V weights; side by side for "all"
        ("dgamma_q", _v(g.dgamma_q) if sc.qk_norm is not None else None),
        ("dgamma_k", _v(g.dgamma_k) if sc.qk_norm is not None else None),
    ]


def mla_grad_fields(m: MlaBack) -> Fields:
    """[mla]'s own gradients: its weights', the latent's (at c_KV after its norm) and the shared turned k_R's."""
    return [
        ("dW_DKV", m.dW_DKV), ("dW_UK", m.dW_UK), ("dW_UV", m.dW_UV), ("dW_KR", m.dW_KR), ("dW_Q", m.dW_Q),
        ("dW_DQ", m.dW_DQ), ("dW_UQ", m.dW_UQ), ("dgamma_kv", _v(m.dgamma_kv)), ("dgamma_q", _v(m.dgamma_q)),
        ("dc_KV", m.dc_KV), ("dk_R", m.dk_R),
    ]


def _linear(g: Gradients, write_fields: WriteFields) -> Nested:
    heads = [[("dphi_Q", h.linear.dphi_Q), ("dphi_K", h.linear.dphi_K), ("dV", h.linear.dV)]
             for h in g.heads if h.linear is not None]
    return Nested(write_fields, fields=[("heads", Nested(write_fields, items=heads))])


def _deltanet(g: Gradients, write_fields: WriteFields) -> Nested:
    heads = [[("dq", d.dq), ("dk", d.dk), ("dv", d.dv), ("dg", _v(d.dg)), ("dbeta", _v(d.dbeta)),
              ("dS", d.dS)] for d in (h.deltanet for h in g.heads) if d is not None]
    gb = g.gates
    return Nested(write_fields, fields=[
        ("heads", Nested(write_fields, items=heads)),
        ("dW_a", None if gb is None else gb.dW_a), ("dW_b", None if gb is None else gb.dW_b),
        ("dA_log", None if gb is None else _v(gb.dA_log)), ("ddt_bias", None if gb is None else _v(gb.ddt_bias)),
    ])


def _trained(sc: Scenario) -> Iterable[Fields]:
    """core/training.py's steps as the JSON's train list. A step that cannot be computed (float64 overflows, a
    denominator of [linear] falls to 0) ends the list with why, as the Train view stops there and says so: the
    file's own numbers computed, so --check and every other export show them."""
    assert sc.backward is not None
    total, walk = sc.backward.steps, steps(sc)
    for k in range(total + 1):
        try:
            s = next(walk)
        except (ScenarioError, FloatingPointError, ArithmeticError, RuntimeWarning) as exc:
            if k == 0:
                raise
            why = exc.message if isinstance(exc, ScenarioError) else f"the numbers are past float64 ({exc})"
            yield [("step", k), ("stopped", f"step {k} of {total} (lr = {fmt_lr(sc.backward.lr)}) cannot be"
                                 f" computed: {why}")]
            return
        yield [("step", s.step), ("loss", s.loss), ("weights", [w.tolist() for w in s.weights])]


def backward_parts(sc: Scenario, comp: Computation | None, write_fields: WriteFields) -> Fields:
    """``"grad"`` and ``"train"``, both null without [backward]."""
    if sc.backward is None:
        return [("grad", None), ("train", None)]
    comp = compute(sc) if comp is None else comp
    g = gradients(comp)
    train = list(_trained(sc))
    return [("grad", Nested(write_fields, fields=grad_fields(sc, g, write_fields))),
            ("train", Nested(write_fields, items=train))]
