"""Linear attention in the exports ([linear]): each head's state in the JSON and its gradients; its worksheet rule."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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


def back_of(hg: Any) -> Any:
    """The head's [linear] read backwards (a LinearBack), None where its map is another's."""
    from qkv_tui.kernels.linear_backward import LinearBack  # with a scenario that has [backward]

    return hg.part(LinearBack)


def grad_head(sc: Scenario, g: Gradients, h: int) -> Fields:
    """A [linear] head has no softmax: no dP, dS or dscaled."""
    return [("dP", None), ("dS", None), ("dscaled", None)] if back_of(g.heads[h]) is not None else []


def grad(sc: Scenario, g: Gradients, write_fields: WriteFields) -> Fields:
    if sc.linear is None:
        return [("linear", None)]
    heads = [[("dphi_Q", lb.dphi_Q), ("dphi_K", lb.dphi_K), ("dV", lb.dV)]
             for lb in (back_of(h) for h in g.heads) if lb is not None]
    return [("linear", Nested(write_fields, fields=[("heads", Nested(write_fields, items=heads))]))]


def sheet_back_rules(sc: Scenario) -> list[str]:
    lin = sc.linear
    if lin is None:
        return []
    norm = lin.normalize
    return ["  Linear attention, in place of the softmax: dV = " + ("W" if norm else "A") + "ᵀ·dO_h, dW = dO_h·Vᵀ, "
            + ("D = rowsum(dO_h ⊙ output), dA = (dW − D) ÷ ΣA" if norm else "dA = dW") + ", 0 where masked;"
            " dφ(Q) = dA·φ(K), dφ(K) = dAᵀ·φ(Q); dQ = dφ(Q) ⊙ φ'(Q), dK = dφ(K) ⊙ φ'(K)"
            + (" (φ' is 1 above 0 and e^x = φ(x) at or below)." if lin.feature == "elu1" else ".")]


def sheet_map(chain: Any, h: int, hr: HeadResult) -> tuple[Any, object] | None:
    """The head's map and record as the page prints them (edges/worksheet/backward/linear.py)."""
    if chain.sc.linear is None:
        return None
    from qkv_tui.edges.worksheet.backward.linear import linear_weights, printed_linear
    from qkv_tui.kernels.linear import LinearForward

    weights = linear_weights(chain, h)  # (n, m)
    return weights, printed_linear(chain, h, hr.need(LinearForward), weights)


def sheet_back_map(t: Any, chain: Any, h: int, hg: Any, ops: Any) -> bool:
    lb = back_of(hg)
    if lb is None:
        return False
    from qkv_tui.edges.worksheet.backward.linear import linear_tables

    linear_tables(t, chain, h, lb, ops)
    return True


def sheet_back_line(cells: Any, table: Any, i: int, j: int, answer: str, ops: Any) -> str | None:
    """The key's line of a cell of a [linear] head's backward tables (edges/worksheet/backward/linear_lines.py)."""
    from qkv_tui.edges.worksheet.backward.linear_lines import KINDS, linear_line

    kind, _, suffix = table.key.partition(".")
    if cells.sc.linear is None or kind not in KINDS or not suffix:
        return None
    h = int(suffix)
    return linear_line(cells, table, h, i, j, answer, lambda a, b: ops.dO_h(cells.tables, h, a, b),
                       lambda role: ops.used(role, h))


FACE = ExportFace(linear.TABLE, document=document, document_at=At(after="train"), grad=grad, grad_at=At(after="dbeta"),
                  grad_head=grad_head, sheet_back_rules=sheet_back_rules,
                  sheet_back_rules_at=At(before="W_O"),
                  sheet_map=sheet_map, sheet_back_map=sheet_back_map, sheet_back_line=sheet_back_line)
