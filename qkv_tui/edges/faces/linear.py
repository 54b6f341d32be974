"""Linear attention's fields in the exports ([linear])."""

from __future__ import annotations

from typing import TYPE_CHECKING

from qkv_tui.core.engine import NormResult, iter_heads
from qkv_tui.core.head import HeadResult
from qkv_tui.core.scenario import Scenario
from qkv_tui.core.variants import linear
from qkv_tui.edges.export_grad import Nested, WriteFields
from qkv_tui.edges.faces import At, ExportFace, Fields

if TYPE_CHECKING:  # the exports' gradients are read only where a scenario has [backward]
    from qkv_tui.core.gradients import Gradients


def head_state(h: HeadResult) -> Fields:
    """One entry of ``"linear": {"heads": [...]}`` (docs/scenario-format.md, "[linear]"): S[t] is the state after token t."""
    from qkv_tui.kernels.linear import LinearForward

    lin = h.need(LinearForward)
    return [("phi_Q", lin.phi_Q), ("phi_K", lin.phi_K), ("S", lin.S), ("z", lin.z), ("output", lin.recurrent)]


def document(sc: Scenario, norm: NormResult | None, write_fields: WriteFields) -> Fields:
    """Each head computed again as it is written, so memory stays one head's (a state is n × d_k × d_v)."""
    if sc.linear is None:
        return [("linear", None)]
    heads = (head_state(h) for h in iter_heads(sc, norm))
    return [("linear", Nested(write_fields, fields=[("heads", Nested(write_fields, items=heads))]))]


def grad_head(sc: Scenario, g: Gradients, h: int) -> Fields:
    """A [linear] head has no softmax: no dP, dS or dscaled."""
    return [("dP", None), ("dS", None), ("dscaled", None)] if g.heads[h].linear is not None else []


def grad(sc: Scenario, g: Gradients, write_fields: WriteFields) -> Fields:
    if sc.linear is None:
        return [("linear", None)]
    heads = [[("dphi_Q", h.linear.dphi_Q), ("dphi_K", h.linear.dphi_K), ("dV", h.linear.dV)]
             for h in g.heads if h.linear is not None]
    return [("linear", Nested(write_fields, fields=[("heads", Nested(write_fields, items=heads))]))]


FACE = ExportFace(linear.TABLE, document=document, document_at=At(after="train"), grad=grad, grad_at=At(after="dbeta"),
                  grad_head=grad_head)
