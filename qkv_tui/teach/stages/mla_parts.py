"""What the latent attention's stages share (mla_compress, mla_expand, mla_rotate, mla_absorb): the names of
its matrices, their values, and the line of a dot product (a turned pair's is mla_rotate's)."""

from __future__ import annotations

from qkv_tui.core.engine import Computation
from qkv_tui.core.scenario import Matrix
from qkv_tui.core.variants import Mla
from qkv_tui.kernels.mla import MlaHead, MlaShared
from qkv_tui.teach.arith import dot_line
from qkv_tui.teach.stages.common import Key, Operation, Ref, Segment
from qkv_tui.teach.stages.context import TraceContext

# the inputs, as the file gives them (W_QA is [mla]'s wide W_Q, every head's [nope | rope] columns)
INPUTS = ("W_DKV", "W_UK", "W_UV", "W_KR", "W_QA", "W_DQ", "W_UQ")
SHARED = ("c_KV_raw", "c_KV", "c_Q_raw", "c_Q", "k_R_raw", "k_R")
PER_HEAD = ("q_C", "q_R_raw", "q_R", "k_C", "v_C", "q_L", "scores_L", "mix_L", "out_L")
# how the arithmetic and the titles write each one
SHOWN = {"X_norm": "X̂", "W_QA": "W_Q", "c_KV_raw": "c_KV", "c_KV": "ĉ_KV", "c_Q_raw": "c_Q", "c_Q": "ĉ_Q", "k_R_raw": "k_R",
         "k_R": "k_R'", "q_R_raw": "q_R", "q_R": "q_R'", "q_L": "q_L", "scores_L": "scores_L", "mix_L": "o_L",
         "out_L": "out_L"}


def shown_name(name: str) -> str:
    return SHOWN.get(name, name)


def mla_of(trace: TraceContext) -> Mla:
    mla = trace.comp.scenario.mla
    assert mla is not None
    return mla


def head_of(comp: Computation, h: int) -> MlaHead:
    m = comp.heads[h].part(MlaHead)
    assert m is not None
    return m


def shared_of(comp: Computation) -> MlaShared:
    return head_of(comp, 0).shared


def latent(mla: Mla) -> str:
    """The c_KV the heads expand: normalised where kv_norm says so."""
    return "c_KV" if mla.kv_norm else "c_KV_raw"


def query_latent(mla: Mla) -> str:
    return "c_Q" if mla.q_norm else "c_Q_raw"


def rotary_key(mla: Mla) -> str:
    return "k_R" if mla.turns else "k_R_raw"


def rotary_query(mla: Mla) -> str:
    return "q_R" if mla.turns else "q_R_raw"


def value(comp: Computation, name: str, head: int | None) -> Matrix:
    """A latent-attention matrix (KeyError where this scenario has none of it)."""
    mla = comp.scenario.mla
    if mla is None:
        raise KeyError(name)
    if name in INPUTS:
        found = mla.W_Q if name == "W_QA" else getattr(mla, name)
        if found is None:
            raise KeyError(name)
        return found
    s = shared_of(comp)
    shared: dict[str, Matrix | None] = {
        "c_KV_raw": s.c_KV_raw, "c_KV": None if s.c_KV_normed is None else s.c_KV_normed.X_norm,
        "c_Q_raw": s.c_Q_raw, "c_Q": None if s.c_Q_normed is None else s.c_Q_normed.X_norm,
        "k_R_raw": s.k_R_raw, "k_R": s.k_R if mla.turns else None,
    }
    if name in shared:
        if shared[name] is None:
            raise KeyError(name)
        return shared[name]  # type: ignore[return-value]
    if name not in PER_HEAD or head is None:
        raise KeyError(name)
    m = head_of(comp, head)
    per_head = {"q_C": m.q_C, "q_R_raw": m.q_R_raw, "q_R": m.q_R, "k_C": m.k_C, "v_C": m.v_C, "q_L": m.q_latent,
                "scores_L": m.absorbed_scores, "mix_L": m.latent_mix, "out_L": m.absorbed_output}
    return per_head[name]


def shared_key(name: str, head: int | None) -> Key:
    """A pane of a shared matrix is the same whichever head is viewed (k_R' is turned in head 1's Rotate)."""
    if name == "k_R":
        return (name, 0)
    return (name, None) if name in INPUTS or name in SHARED or name in ("X", "X_norm") else (name, head)


def dot_op(trace: TraceContext, index: int, seg: Segment, row: int, col: int, d: int, *, source: str,
           weight: str, wcol: int, transposed: bool = False, label: str | None = None) -> Operation:
    """``c_KV[I,0] = X[I]·W_DKV[:,0] = 1·1 + 0·0 + 1·0 + 0·1 = 1``: one cell of a product; ``wcol`` is the
    weight's column (its row where ``transposed``: q_L reads W_UKᵀ)."""
    comp, h = trace.comp, seg.head
    src_h, w_h = shared_key(source, h)[1], shared_key(weight, h)[1]
    a = _matrix(comp, source, src_h)[row]
    W = _matrix(comp, weight, w_h)
    b = W[wcol] if transposed else W[:, wcol]
    v = float(value(comp, seg.target, h)[row, col])
    result = trace.formatted(seg.target, h, v, d)
    work = dot_line(a, b, trace.integral(source, src_h), trace.integral(weight, w_h), result, d, trace.hand)
    token = label if label is not None else trace.comp.scenario.labels[row]
    of = f"{shown_name(weight)}[{wcol},:]" if transposed else f"{shown_name(weight)}[:,{wcol}]"
    text = f"{shown_name(seg.target)}[{token},{col}] = {shown_name(source)}[{token}]·{of} = {work}"
    operand_ref = Ref(weight, w_h, wcol, None) if transposed else Ref(weight, w_h, None, wcol)
    return Operation(index, seg, row, col, v, (Ref(source, src_h, row), operand_ref), text)


def _matrix(comp: Computation, name: str, head: int | None) -> Matrix:
    if name == "X":
        return comp.scenario.X
    if name == "X_norm":
        assert comp.norm is not None
        return comp.norm.X_norm
    return value(comp, name, head)


def sub(i: int) -> str:
    return "".join("₀₁₂₃₄₅₆₇₈₉"[int(c)] for c in str(i))


JOINED = ("Q", "K", "KT", "V")  # what the stages from Score on read of an [mla] head, as Project's panes show them


def title(trace: TraceContext, name: str) -> str | None:
    """The Project stage's title of one of its panes of an [mla] head (the record's ``titles``), None for another."""
    return joined_title(trace, name) if name in JOINED else None


def joined_title(trace: TraceContext, name: str) -> str:
    """Q and K of an [mla] head are its parts side by side, V its expanded values."""
    mla = mla_of(trace)
    q_r, k_r = shown_name(rotary_query(mla)), shown_name(rotary_key(mla))
    return {"Q": f"Q = [q_C | {q_r}]", "K": f"K = [k_C | {k_r}]", "KT": f"Kᵀ = [k_C | {k_r}]ᵀ", "V": "V = v_C"}[name]
