"""The JSON export's ``"grad"`` and ``"train"`` (docs/scenario-format.md, "[backward]"): null without
[backward]; every gradient in the documented order, null where the scenario does not use the part."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

import numpy as np

from qkv_tui.core.engine import Computation, compute
from qkv_tui.core.gradients import Gradients, KVGrad, gradients
from qkv_tui.core.scenario import Scenario, ScenarioError
from qkv_tui.core.toml_text import number as fmt_lr
from qkv_tui.core.training import steps
from qkv_tui.edges.faces import faces, placed


class Writer(Protocol):
    def write(self, text: str) -> None: ...


Fields = list[tuple[str, Any]]
WriteFields = Callable[[Any, Iterable[tuple[str, Any]], str], None]


class Nested:
    """A JSON object (``fields``) or a list of them (``items``) inside the document, written by the
    export's own field writer so its matrices go out a row per line like every other. ``items`` may be a
    generator: each item is then computed as it is written (a head's states, one head at a time)."""

    def __init__(self, write_fields: WriteFields, fields: Fields | None = None, items: Iterable[Fields] | None = None) -> None:
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


def vector(values: np.ndarray | None) -> list[float] | None:
    """A gradient vector as the JSON writes it: a list of floats, null where there is none."""
    return None if values is None else [float(x) for x in values]


def head_grad_fields(sc: Scenario, g: Gradients, h: int) -> Fields:
    """One entry of ``"grad"``'s ``"heads"``: each variant's fields (edges/faces/) among the head's own, or in their
    place where the variant reads the head's gradients otherwise."""
    hg = g.heads[h]
    a = hg.attend
    return placed([
        ("dO", hg.dO), ("dV", a.dV), ("dP", a.dP), ("dS", a.dS), ("dscaled", a.dscaled),
        ("dQ", hg.dQ), ("dK", hg.dK), ("dQ_rot", hg.dQ_rot), ("dK_rot", hg.dK_rot),
        ("dW_Q", hg.dW_Q), ("dW_K", hg.dW_K), ("dW_V", hg.dW_V),
        ("db_Q", vector(hg.db_Q)), ("db_K", vector(hg.db_K)), ("db_V", vector(hg.db_V)), ("dsink", a.dsink),
        ("dgamma_q", vector(hg.dgamma_q)), ("dgamma_k", vector(hg.dgamma_k)),
    ], [(f.grad_head_at, f.grad_head(sc, g, h)) for f in faces() if f.grad_head is not None])


def kv_grad_fields(k: KVGrad) -> Fields:
    return [("dK", k.dK), ("dV", k.dV), ("dW_K", k.dW_K), ("dW_V", k.dW_V), ("db_K", vector(k.db_K)), ("db_V", vector(k.db_V))]


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
    sums = [(name, None if getattr(first, name) is None else vector(np.sum([getattr(r, name) for r in records], axis=0)))
            for name in first.grad_sums]
    return [(first.grad_key, Nested(write_fields, fields=rows + sums))]


def _cross_entropy(sc: Scenario, g: Gradients, write_fields: WriteFields) -> Fields:
    """``"cross_entropy"``, written only where the loss is one: every other scenario's JSON stays as it was."""
    bw, ce = sc.backward, g.cross_entropy
    if bw is None or not bw.cross_entropy or ce is None:
        return []
    return [("cross_entropy", Nested(write_fields, fields=[
        ("W_U", bw.W_U), ("next", list(bw.next or ())), ("logits", ce.logits), ("probs", ce.probs),
        ("nll", vector(ce.nll)), ("dlogits", ce.dlogits), ("dW_U", ce.dW_U)]))]


def _fields(sc: Scenario, g: Gradients, write_fields: WriteFields) -> Fields:
    return placed([
        ("loss", g.loss), ("dO", g.dO), ("d_concat", g.d_concat), ("dW_O", g.dW_O),
        ("dX", g.dX), ("dX_norm", g.dX_norm if sc.norm is not None else None), ("dgamma", vector(g.dgamma)),
        ("heads", Nested(write_fields, items=[head_grad_fields(sc, g, h) for h in range(len(g.heads))])),
        ("kv_heads", Nested(write_fields, items=[kv_grad_fields(k) for k in g.kv_heads]) if g.shared else None),
        ("db_O", vector(g.db_O)), ("dbeta", vector(g.dbeta)),
    ], [(f.grad_at, f.grad(sc, g, write_fields)) for f in faces() if f.grad is not None])


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
