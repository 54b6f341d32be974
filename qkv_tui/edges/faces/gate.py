"""The output gate in the exports (``W_G``): each head's gate σ(X̂·W_G), gated output and dW_G in the JSON, W_G in the
TOML; on a worksheet, its rule, its printed record and its SGD step."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np

from qkv_tui.core.head import HeadResult
from qkv_tui.core.scenario import Scenario
from qkv_tui.core.variants import gate
from qkv_tui.edges.export_toml import matrix
from qkv_tui.edges.faces import At, ExportFace, Fields
from qkv_tui.kernels.gate import Gated
from qkv_tui.kernels.gate_backward import GateBack
from qkv_tui.teach.stages.printed import idx

if TYPE_CHECKING:  # the exports' gradients are read only where a scenario has [backward]
    from qkv_tui.core.gradients import Gradients


def head(h: HeadResult) -> Fields:
    return [("gate", h.read(Gated, lambda g: g.gate)), ("gated_output", h.read(Gated, lambda g: g.gated))]


def grad_head(sc: Scenario, g: Gradients, h: int) -> Fields:
    gb = g.heads[h].part(GateBack)
    return [("dW_G", None if gb is None else gb.dW_G)]


def toml_attention(sc: Scenario) -> list[str]:
    """The gate's wide form: a table of its own after [attention]."""
    if sc.heads[0].W_G is None:
        return []
    return ["", "[gate]", f"W_G = {matrix(np.concatenate([h.W_G for h in sc.heads if h.W_G is not None], axis=1))}"]


def toml_head(sc: Scenario, i: int) -> list[str]:
    W_G = sc.heads[i].W_G
    return [] if W_G is None else [f"W_G = {matrix(W_G)}"]


def sheet_back_rules(sc: Scenario) -> list[str]:
    if not any(h.W_G is not None for h in sc.heads):
        return []
    return ["  Gate: dO_h = dJ ⊙ g and dz = dJ ⊙ output ⊙ g ⊙ (1 − g), dJ the head's columns at Concat."]


def sheet_printed(chain: Any, h: int, hr: HeadResult, weights: Any) -> tuple[list[object], dict[str, object]]:
    """The gate and the gated output as the page prints them."""
    gated = hr.part(Gated)
    if gated is None:
        return [], {}
    return [dataclasses.replace(gated, gate=chain.values(f"gate.{h}"), gated=chain.values(f"gated.{h}"))], {}


def sheet_back_out(t: Any, chain: Any, h: int, hr: HeadResult, hg: Any, xq: str) -> None:
    """The gate read backwards: to the head's own output, the gate's logits and W_G."""
    gb = hg.part(GateBack)
    if gb is None:
        return
    rows, dv = chain.sc.labels, idx(hr.d_v)
    t(f"dOh.{h}", "dO_h", "dO_h = dJ ⊙ g (dJ: this head's columns of the gradient at Concat)", gb.d_output, rows, dv, h)
    t(f"dz.{h}", "dz", "dz = dJ ⊙ output ⊙ g ⊙ (1 − g) (at the gate's logits)", gb.d_logit, rows, dv, h)
    t(f"dW_G.{h}", "dW_G", f"dW_G = {xq}ᵀ·dz", gb.dW_G, idx(hr.read(Gated, lambda g: g.W_G.shape[0]) or 0), dv, h)


def sheet_back_path(sc: Scenario) -> str | None:
    return "gate" if any(h.W_G is not None for h in sc.heads) else None


def sheet_out(sc: Scenario) -> str | None:
    """A one-head page's output is the gated one."""
    return "gated.0" if sc.heads[0].W_G is not None else None


def _term(sc: Scenario) -> str:
    return " + dz·W_Gᵀ" if any(h.W_G is not None for h in sc.heads) else ""


def _term_cells(sc: Scenario, h: int, i: int, c: int) -> list[Any]:
    """dz[i,k]·W_G[c,k] for every k: the gate's path into X̂."""
    head = sc.heads[h]
    return [] if head.W_G is None else [((f"dz.{h}", i, k), (f"W_G.{h}", c, k)) for k in range(head.d_v)]


def sheet_back_line(cells: Any, table: Any, i: int, j: int, answer: str, ops: Any) -> str | None:
    """The gate read backwards: dO_h = dJ·g, dz = dJ·output·g·(1 − g), dW_G = X̂ᵀ·dz."""
    kind, _, suffix = table.key.partition(".")
    if kind not in ("dOh", "dz", "dW_G"):
        return None
    from qkv_tui.edges.worksheet.backward.lines import weight_line
    from qkv_tui.edges.worksheet.backward.names import cell_name

    sc, h, tx = cells.sc, int(suffix), cells.txt
    name = cell_name(table, i, j, (*sc.labels, *sc.key_labels))
    if kind == "dW_G":
        return weight_line(cells, name, ops.x_in, f"dz.{h}", i, j, answer)
    dJ, gate = tx(*ops.dJ(h, i, j)), tx(f"gate.{h}", i, j)
    if kind == "dOh":
        return f"{name} = dJ·g = {dJ}·{gate} = {answer}"
    return f"{name} = dJ·output·g·(1 − g) = {dJ}·{tx(f'output.{h}', i, j)}·{gate}·(1 − {gate}) = {answer}"


FACE = ExportFace(gate.KEYS, head=head, head_at=At(after="b_V"), grad_head=grad_head, grad_head_at=At(after="dsink"),
                  toml_attention=toml_attention, toml_head=toml_head, toml_head_at=At(after="kv_head"),
                  sgd_head=(("W_G", (("W_G.{h}", "dW_G.{h}"),)),), sgd_head_at=At(before="b_Q"),
                  sheet_back_rules=sheet_back_rules,
                  sheet_printed=sheet_printed,
                  sheet_back_out=sheet_back_out, sheet_back_path=sheet_back_path,
                  sheet_back_line=sheet_back_line, sheet_out=sheet_out, sheet_back_term=(_term, _term_cells),
                  sheet_back_stages=((("dOh", "dz", "dW_G"), "dgate"),))
