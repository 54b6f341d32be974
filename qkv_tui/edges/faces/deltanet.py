"""The gated delta rule in the exports ([deltanet]): each head's state and its gradients in the JSON."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from qkv_tui.core.engine import NormResult, iter_heads
from qkv_tui.core.head import HeadResult
from qkv_tui.core.scenario import Scenario
from qkv_tui.core.variants import deltanet
from qkv_tui.edges.export_grad import Nested, WriteFields, vector
from qkv_tui.edges.faces import At, ExportFace, Fields

if TYPE_CHECKING:  # the exports' gradients are read only where a scenario has [backward]
    from qkv_tui.core.gradients import Gradients


def head_state(h: HeadResult) -> Fields:
    """One entry of ``"deltanet": {"heads": [...]}``: q and k as the rule reads them (L2-normalised, q ÷ √d_k)."""
    from qkv_tui.kernels.deltanet import DeltaForward
    from qkv_tui.kernels.deltanet_parts import Around

    dn = h.need(DeltaForward)
    around = h.part(Around)
    conv = None if around is None else around.conv
    normed = None if around is None else around.out_norm
    return [("q", dn.q), ("k", dn.k), ("g", dn.g.tolist()), ("beta", dn.beta.tolist()), ("S", dn.S),
            ("output", dn.output),
            ("gate_o", None if normed is None else normed.gate),  # the output norm's gate: "silu" or "sigmoid" (Kimi)
            # the short convolution's outputs (after SiLU) and the gated output norm's gate input and result
            ("conv_q", None if conv is None else conv[0].out), ("conv_k", None if conv is None else conv[1].out),
            ("conv_v", None if conv is None else conv[2].out), ("z", None if normed is None else normed.z),
            ("normed", None if normed is None else normed.out)]


def document(sc: Scenario, norm: NormResult | None, write_fields: WriteFields) -> Fields:
    """Each head computed again as it is written, so memory stays one head's (a state is n × d_k × d_v)."""
    if sc.deltanet is None:
        return [("deltanet", None)]
    heads = (head_state(h) for h in iter_heads(sc, norm))
    return [("deltanet", Nested(write_fields, fields=[("heads", Nested(write_fields, items=heads))]))]


def back_of(hg: Any) -> Any:
    """The head's [deltanet] read backwards (a DeltaBack), None where its map is another's."""
    from qkv_tui.kernels.deltanet_backward import DeltaBack  # with a scenario that has [backward]

    return hg.part(DeltaBack)


def grad_head(sc: Scenario, g: Gradients, h: int) -> Fields:
    """A [deltanet] head has no softmax: no dP, dS or dscaled."""
    return [("dP", None), ("dS", None), ("dscaled", None)] if back_of(g.heads[h]) is not None else []


def grad(sc: Scenario, g: Gradients, write_fields: WriteFields) -> Fields:
    if sc.deltanet is None:
        return [("deltanet", None)]
    heads = [[("dq", d.dq), ("dk", d.dk), ("dv", d.dv), ("dg", vector(d.dg)), ("dbeta", vector(d.dbeta)),
              ("dS", d.dS)] for d in (back_of(h) for h in g.heads) if d is not None]
    from qkv_tui.kernels.deltanet_backward import GatesBack

    gb = g.part(GatesBack)
    return [("deltanet", Nested(write_fields, fields=[
        ("heads", Nested(write_fields, items=heads)),
        ("dW_a", None if gb is None else gb.dW_a), ("dW_b", None if gb is None else gb.dW_b),
        ("dA_log", None if gb is None else vector(gb.dA_log)), ("ddt_bias", None if gb is None else vector(gb.ddt_bias)),
    ]))]


def _gates(sc: Scenario) -> list[str]:
    """Which of g and β the table computes from X̂ (their paths into X̂ on the backward worksheet)."""
    dn = sc.deltanet
    return [] if dn is None else [name for name, made in (("a", dn.g is None), ("b", dn.beta is None)) if made]


def sheet_back_path(sc: Scenario) -> str | None:
    return "gates" if _gates(sc) else None


def _term(sc: Scenario) -> str:
    return "".join(f" + d{name}·W_{name}ᵀ" for name in _gates(sc))


def _term_cells(sc: Scenario, h: int, i: int, c: int) -> list[Any]:
    """da[i]·W_a[c] and db[i]·W_b[c] of the head's column: the gates' paths into X̂
    (edges/worksheet/backward/deltanet.py prints both tables)."""
    names = _gates(sc)
    column = {"a": 2, "b": 3 if "a" in names else 0}  # the gates table: a, σ(a), da where g is made, then db
    return [((f"dnb_gates.{h}", i, column[name]), (f"dn_W.{h}", n, c)) for n, name in enumerate(names)]


FACE = ExportFace(deltanet.TABLE, document=document, document_at=At(after="train"), grad=grad,
                  grad_at=At(after="dbeta"), grad_head=grad_head, sheet_back_path=sheet_back_path,
                  sheet_back_term=(_term, _term_cells))
