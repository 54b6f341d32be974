"""[mla]'s backward tables on the worksheet: below each head's softmax part, the latent layer read backwards.

The numbers are core/gradients.py's (kernels/mla_backward.py's mla_backward) run on the printed forward pass
under the page's policy, with the printed cos and sin of the shared rotary part, so each table is worked from
tables printed before it (edges/worksheet/backward/mla_lines.py writes the key's lines). Each head's dQ and dK
are at Q = [q_C | q_R'] and K = [k_C | k_R']: their first d_nope columns are dq_C and dk_C, the rest the
rotary parts'. The latent norms (kv_norm, q_norm) and a query latent (W_DQ, W_UQ) are left to the app.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from qkv_tui.core.engine import HeadResult
from qkv_tui.core.scenario import Scenario
from qkv_tui.kernels.attention import Turn
from qkv_tui.kernels.mla import MlaHead
from qkv_tui.kernels.mla_backward import MlaBack
from qkv_tui.teach.stages.printed import PrintedChain, idx

Add = Callable[..., None]  # adds one table: key, name, heading, values, rows, cols, head, allow


def mla_covered(sc: Scenario) -> bool:
    """Whether the page's tables cover this [mla] layer: a plain W_Q, no latent norm, no output gate."""
    mla = sc.mla
    return bool(mla is not None and mla.W_Q is not None and not mla.kv_norm and not mla.q_norm
                and all(h.W_G is None for h in sc.heads))


def printed_mla(chain: PrintedChain, hr: HeadResult) -> HeadResult:
    """The head's latent parts as printed: c_KV and the shared rotary key, from their tables."""
    head = hr.need(MlaHead)
    v = chain.values
    shared = replace(head.shared, c_KV_raw=v("c_KV_raw"), k_R_raw=v("k_R_raw"),
                     k_R=v("k_R") if "k_R" in chain.printed else v("k_R_raw"))
    return hr.with_parts(replace(head, shared=shared))


def latent_turn(chain: PrintedChain) -> Turn | None:
    """The shared rotary part's cos and sin as the trig.mla table prints them (cos, sin of pair 0, …)."""
    mla = chain.sc.mla
    turn = None if mla is None else mla.rotation(chain.sc.positions).turn  # the pairs it turns, as the heads did
    if turn is None:
        return None
    both = chain.values("trig.mla")  # (n, 2·pairs)
    return Turn(both[:, 0::2], both[:, 1::2], turn.pairs)


def mla_head_tables(t: Add, chain: PrintedChain, h: int, back: MlaBack) -> None:
    """Head ``h``'s rotary query part turned back (its dq_C is dQ's first columns as they are)."""
    mla = chain.sc.mla
    assert mla is not None
    if mla.turns:
        t(f"mqR.{h}", "dq_R", "dq_R = dQ's rotary columns (dq_R') turned back (by −p·θ)", back.dq_R_raw[h],
          chain.sc.labels, idx(back.dq_R_raw[h].shape[1]), h)


def mla_tables(t: Add, chain: PrintedChain, back: MlaBack, x_name: str) -> None:
    """The shared rotary key, the latent and every latent weight, after every head's part."""
    sc = chain.sc
    mla = sc.mla
    assert mla is not None
    rows = sc.labels
    rot = mla.turns
    kr = "dk_R'" if rot else "dk_R"
    rotary = idx(mla.W_KR.shape[1])  # the rotary columns, as many as W_KR's
    t("mkR", kr, f"{kr} = Σ over the heads of dK's rotary columns (k_R is shared by every head)", back.dk_R, rows,
      rotary)
    if rot:
        t("mkRraw", "dk_R", "dk_R = dk_R' turned back (by −p·θ)", back.dk_R_raw, rows, rotary)
    t("mcKV", "dc_KV", "dc_KV = Σ over the heads of dk_C·W_UKᵀ + dv_C·W_UVᵀ (dk_C: dK's first d_nope columns, dv_C: dV)",
      back.dc_KV, rows, idx(back.dc_KV.shape[1]))
    t("mW_UK", "dW_UK", "dW_UK = c_KVᵀ·dk_C (every head's columns side by side)", back.dW_UK, idx(mla.W_UK.shape[0]),
      idx(back.dW_UK.shape[1]))
    t("mW_UV", "dW_UV", "dW_UV = c_KVᵀ·dv_C (every head's columns side by side)", back.dW_UV, idx(mla.W_UV.shape[0]),
      idx(back.dW_UV.shape[1]))
    t("mW_KR", "dW_KR", f"dW_KR = {x_name}ᵀ·dk_R", back.dW_KR, idx(mla.W_KR.shape[0]), rotary)
    assert back.dW_Q is not None
    t("mW_Q", "dW_Q", f"dW_Q = {x_name}ᵀ·[dq_C | dq_R] (every head's columns [nope | rope])", back.dW_Q,
      idx(back.dW_Q.shape[0]), idx(back.dW_Q.shape[1]))
    t("mW_DKV", "dW_DKV", f"dW_DKV = {x_name}ᵀ·dc_KV", back.dW_DKV, idx(mla.W_DKV.shape[0]), idx(mla.W_DKV.shape[1]))


def dX_heading(x_name: str) -> str:
    return (f"d{x_name} = dc_KV·W_DKVᵀ + dk_R·W_KRᵀ + [dq_C | dq_R]·W_Qᵀ (the latent's, the rotary key's and the"
            " queries' paths)")


def mla_head_columns(sc: Scenario) -> dict[str, int]:
    """The latent layer's tables whose columns are every head's side by side, each with its columns a head
    (edges/worksheet/columns.py): W_Q's [nope | rope], W_UK's d_nope and W_UV's d_v, with their gradients and steps."""
    mla = sc.mla
    if mla is None or not mla_covered(sc):
        return {}
    out: dict[str, int] = {}
    for keys, width in ((("W_QA", "mW_Q", "sgd.W_QA"), mla.d_qk), (("W_UK", "mW_UK", "sgd.W_UK"), mla.d_nope),
                        (("W_UV", "mW_UV", "sgd.W_UV"), mla.d_v)):
        out.update(dict.fromkeys(keys, width))
    return out
