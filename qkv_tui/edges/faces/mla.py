"""Multi-head latent attention in the exports ([mla]): its parts and gradients in the JSON, its own heads in the TOML,
its latent layer's SGD step and backward rule on a worksheet."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from qkv_tui.core.engine import NormResult
from qkv_tui.core.scenario import Scenario
from qkv_tui.core.variants import mla
from qkv_tui.edges.export_grad import Nested, WriteFields, vector
from qkv_tui.edges.faces import At, ExportFace, Fields

if TYPE_CHECKING:  # the exports' gradients are read only where a scenario has [backward]
    from qkv_tui.core.gradients import Gradients
    from qkv_tui.kernels.mla_backward import MlaBack


def document(sc: Scenario, norm: NormResult | None, write_fields: WriteFields) -> Fields:
    """The latent attention's parts (docs/scenario-format.md, [mla]): q_R and k_R after the rotation, c_KV after
    its norm; null without [mla]."""
    if sc.mla is None:
        return [("mla", None)]
    from qkv_tui.core.mla_part import mla_results
    from qkv_tui.kernels.mla import MlaHead

    heads = mla_results(sc, sc.X if norm is None else norm.X_norm)
    shared = heads[0].need(MlaHead).shared
    return [("mla", {
        "c_KV_raw": shared.c_KV_raw.tolist(), "c_KV": shared.c_KV.tolist(),
        "c_Q": None if shared.c_Q is None else shared.c_Q.tolist(),
        "heads": [{"q_C": m.q_C.tolist(), "q_R": m.q_R.tolist(), "k_C": m.k_C.tolist(), "v_C": m.v_C.tolist(),
                   "absorbed_scores": m.absorbed_scores.tolist()} for m in (h.part(MlaHead) for h in heads) if m is not None],
        "k_R": shared.k_R.tolist(),
    })]


def back_of(g: Gradients) -> MlaBack | None:
    """The latent layer read backwards, None without [mla]."""
    from qkv_tui.kernels.mla_backward import MlaBack  # with a scenario that has [backward]

    return g.part(MlaBack)


def grad_head(sc: Scenario, g: Gradients, h: int) -> Fields:
    """[mla]'s heads have no W_K or W_V of their own: dW_Q is the head's columns of the layer's W_Q (null with
    W_DQ/W_UQ)."""
    back = back_of(g)
    if back is None or sc.mla is None:
        return []
    d_qk = sc.mla.d_qk
    dW_Q = None if back.dW_Q is None else back.dW_Q[:, h * d_qk:(h + 1) * d_qk]
    return [("dW_Q", dW_Q), ("dW_K", None), ("dW_V", None)]


def grad(sc: Scenario, g: Gradients, write_fields: WriteFields) -> Fields:
    """[mla]'s own gradients: its weights', the latent's (at c_KV after its norm) and the shared turned k_R's."""
    m = back_of(g)
    if m is None:
        return [("mla", None)]
    return [("mla", Nested(write_fields, fields=[
        ("dW_DKV", m.dW_DKV), ("dW_UK", m.dW_UK), ("dW_UV", m.dW_UV), ("dW_KR", m.dW_KR), ("dW_Q", m.dW_Q),
        ("dW_DQ", m.dW_DQ), ("dW_UQ", m.dW_UQ), ("dgamma_kv", vector(m.dgamma_kv)), ("dgamma_q", vector(m.dgamma_q)),
        ("dc_KV", m.dc_KV), ("dk_R", m.dk_R),
    ]))]


def toml_writes_heads(sc: Scenario) -> bool:
    """[mla] writes its own heads (core/variants/mla.py)."""
    return sc.mla is not None


def sheet_back_rules(sc: Scenario) -> list[str]:
    if sc.mla is None:
        return []
    return ["  Latent attention: each head's dQ and dK are at Q = [q_C | q_R'] and K = [k_C | k_R'], their first"
            " d_nope columns dq_C and dk_C" + (", the rest turned back by the opposite angle" if sc.mla.turns
                                               else "") + "; dk_R sums every head's share (k_R is"
            " shared), dc_KV = Σ dk_C·W_UKᵀ + dv_C·W_UVᵀ over the heads, dX̂ sums the latent's, the rotary"
            " key's and the queries' paths."]


def sheet_back_covers(sc: Scenario) -> bool:
    if sc.mla is None:
        return True
    from qkv_tui.edges.worksheet.backward.mla import mla_covered

    return mla_covered(sc)


def sheet_back_uncovered(sc: Scenario) -> str | None:
    if sc.mla is None:
        return None
    return "latent attention ([mla]) with a latent norm (kv_norm, q_norm), a query latent (W_DQ, W_UQ) or a gate"


def sheet_printed_head(chain: Any, hr: Any) -> Any:
    if chain.sc.mla is None:
        return hr
    from qkv_tui.edges.worksheet.backward.mla import printed_mla

    return printed_mla(chain, hr)


def sheet_latent_trig(chain: Any) -> Any:
    from qkv_tui.edges.worksheet.backward.mla import latent_turn

    return latent_turn(chain)


def sheet_back_head_rest(t: Any, chain: Any, h: int, G: Gradients) -> bool:
    """The latent layer's own tables stand for the heads' multiplied-through weights."""
    back = back_of(G)
    if back is None:
        return False
    from qkv_tui.edges.worksheet.backward.mla import mla_head_tables

    mla_head_tables(t, chain, h, back)
    return True


def sheet_back_layer(t: Any, chain: Any, G: Gradients, xq: str) -> str | None:
    back = back_of(G)
    if back is None:
        return None
    from qkv_tui.edges.worksheet.backward.mla import dX_heading, mla_tables

    mla_tables(t, chain, back, xq)
    return dX_heading(xq)


def sheet_head_columns(sc: Scenario) -> dict[str, int]:
    if sc.mla is None:
        return {}
    from qkv_tui.edges.worksheet.backward.mla import mla_head_columns

    return mla_head_columns(sc)


def sheet_back_line(cells: Any, table: Any, i: int, j: int, answer: str, ops: Any) -> str | None:
    """The key's line of a cell of the latent layer's backward tables (edges/worksheet/backward/mla_lines.py)."""
    from qkv_tui.edges.worksheet.backward.mla_lines import KINDS, mla_line

    if cells.sc.mla is None or table.key.partition(".")[0] not in KINDS:
        return None
    return mla_line(cells, table, i, j, answer)


FACE = ExportFace(mla.TABLE, document=document, document_at=At(after="train"), grad=grad, grad_at=At(after="dbeta"),
                  grad_head=grad_head, toml_writes_heads=toml_writes_heads,
                  # the latent layer's weights, shared by every head (edges/worksheet/backward/mla.py's tables); its
                  # query weights are printed as W_QA
                  sgd_layer=(("W_DKV", (("W_DKV", "mW_DKV"),)), ("W_UK", (("W_UK", "mW_UK"),)),
                             ("W_UV", (("W_UV", "mW_UV"),)), ("W_KR", (("W_KR", "mW_KR"),)),
                             ("W_Q", (("W_QA", "mW_Q"),))), sheet_back_rules=sheet_back_rules,
                  sheet_back_rules_at=At(before="W_O"),
                  sheet_back_stages=((("mqR",), "drotate"), (("mkR", "mkRraw", "mW_KR"), "dk_r"),
                                     (("mcKV", "mW_UK", "mW_UV", "mW_Q"), "dexpand"), (("mW_DKV",), "dcompress")),
                  sheet_back_covers=sheet_back_covers, sheet_back_uncovered=sheet_back_uncovered,
                  sheet_printed_head=sheet_printed_head, sheet_back_line=sheet_back_line,
                  sheet_latent_trig=sheet_latent_trig, sheet_back_head_rest=sheet_back_head_rest,
                  sheet_back_layer=sheet_back_layer, sheet_head_columns=sheet_head_columns)
