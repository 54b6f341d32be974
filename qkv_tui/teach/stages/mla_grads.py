"""What the latent attention's backward stages share (mla_rotate, mla_expand, mla_compress's backward parts):
the layer's gradients (core/gradients.py's, worked once per trace), when they run, and the latent norms'
backward cells. Their forward twins are in the same modules; this one only holds what they have in common."""

from __future__ import annotations

from qkv_tui.core.scenario import Matrix
from qkv_tui.kernels.mla_backward import MlaBack
from qkv_tui.kernels.norm import Normed
from qkv_tui.kernels.norm_backward import row_means
from qkv_tui.teach.stages import mla_parts as parts
from qkv_tui.teach.stages.common import Operation, Ref, Segment
from qkv_tui.teach.stages.context import TraceContext
from qkv_tui.teach.stages.grads import dot_cell, grads, has_backward, kept
from qkv_tui.teach.stages.norm import back_cell, back_stat_cell


def runs(trace: TraceContext) -> bool:
    return has_backward(trace) and trace.comp.scenario.mla is not None


def back_of(trace: TraceContext) -> MlaBack:
    m = grads(trace).part(MlaBack)
    if m is None:
        raise KeyError("mla")
    return m


def dq_of(trace: TraceContext, h: int) -> Matrix:
    """Head h's gradient at its queries before the turn, [dq_C | dq_R]: (n, d_nope + d_rope)."""
    mla = parts.mla_of(trace)
    return back_of(trace).dQ_all[:, h * mla.d_qk:(h + 1) * mla.d_qk]


def q_source(trace: TraceContext, h: int, col: int) -> Ref:
    """The pane a column of head h's dq is read from: Score's dq_C, or the rotary part turned back."""
    mla = parts.mla_of(trace)
    if col < mla.d_nope or not mla.turns:
        return Ref("dQ_s", h, None, col)
    return Ref("dq_R_back", h, None, col - mla.d_nope)


def normed_of(trace: TraceContext, latent: str) -> tuple[Matrix, Normed, Matrix, Matrix]:
    """(raw, its norm's statistics, γ, the gradient at the normalised latent) of c_KV or c_Q."""
    s, mla, back = parts.shared_of(trace.comp), parts.mla_of(trace), back_of(trace)
    if latent == "kv":
        assert s.c_KV_normed is not None
        return s.c_KV_raw, s.c_KV_normed, mla.gamma_kv, back.dc_KV
    assert s.c_Q_normed is not None and s.c_Q_raw is not None and mla.gamma_q is not None and back.dc_Q is not None
    return s.c_Q_raw, s.c_Q_normed, mla.gamma_q, back.dc_Q


def xhat_m(trace: TraceContext, latent: str) -> tuple[Matrix, Matrix]:
    """x̂ = raw / root (n, width) and each row's m = mean(γ·dy·x̂) (n,), as the backward pass kept them."""
    raw, normed, gamma, dy = normed_of(trace, latent)
    xhat = kept(trace, raw / normed.root[:, None])
    return xhat, kept(trace, row_means(gamma, dy, xhat)[0])


def norm_cell(trace: TraceContext, index: int, seg: Segment, row: int, col: int, d: int, latent: str,
              names: tuple[str, str, str, str]) -> Operation:
    """One cell of a latent norm read backwards: its row's m, a cell of the gradient before it, or a gain's.
    ``names``: (the gradient shown after the norm, its pane, m's pane, the gain as written)."""
    raw, normed, gamma, dy = normed_of(trace, latent)
    xhat, m = xhat_m(trace, latent)
    back = back_of(trace)
    shown, pane, m_pane, g = names
    q = trace.comp.scenario.labels[row]
    width = raw.shape[1]
    if seg.target == m_pane:
        terms = [v for c in range(width) for v in (float(gamma[c]), float(dy[row, c]), float(xhat[row, c]))]
        return back_stat_cell(trace, index, seg, row, d, float(m[row]), terms, width,
                              f"m[{q}] = mean({g}·{shown}[{q}]·x̂[{q}])", (Ref(pane, None, row),))
    if seg.target.startswith("dgamma"):
        value = back.dgamma_kv if latent == "kv" else back.dgamma_q
        assert value is not None
        return dot_cell(trace, index, seg, row, col, d, float(value[col]), dy[:, col], xhat[:, col], False, False,
                        f"d{g}[{col}] = {shown}[:,{col}]·x̂[:,{col}]", (Ref(pane, None, None, col),))
    value_m = back.dc_KV_raw if latent == "kv" else back.dc_Q_raw
    assert value_m is not None
    raw_name = "dc_KV" if latent == "kv" else "dc_Q"
    said = f"{raw_name}[{q},{col}] = ({g}[{col}]·{shown}[{q},{col}] − x̂[{q},{col}]·m[{q}]) / root[{q}]"
    return back_cell(trace, index, seg, row, col, d, float(value_m[row, col]),
                     [float(gamma[col]), float(dy[row, col]), float(xhat[row, col]), float(m[row]),
                      float(normed.root[row])], False, said, (Ref(pane, None, row, col), Ref(m_pane, None, row)))
