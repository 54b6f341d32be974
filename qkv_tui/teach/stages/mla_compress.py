"""Stage Compress ([mla]): the latent c_KV = X·W_DKV (RMS-normalised where kv_norm says so), the shared rotary
key's projection k_R = X·W_KR, and the query's latent c_Q = X·W_DQ where the queries have one."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from qkv_tui.core.scenario import Matrix
from qkv_tui.teach.stages import mla_grads, mla_sheet
from qkv_tui.teach.stages import mla_parts as parts
from qkv_tui.teach.stages.common import Key, Operation, Plan, Ref, Segment, Stage, StageSpec, counts, x_in
from qkv_tui.teach.stages.context import TraceContext
from qkv_tui.teach.stages.grads import BackwardSpec, dot_cell
from qkv_tui.teach.stages.norm import RowStats, cell_lines
from qkv_tui.teach.stages.printed import PrintedCells, PrintedChain, Table

if TYPE_CHECKING:  # the cost view's module loads on its first use
    from qkv_tui.core.cost import Count, Phase
    from qkv_tui.core.scenario import Scenario


WEIGHT_OF = {"c_KV_raw": "W_DKV", "k_R_raw": "W_KR", "c_Q_raw": "W_DQ"}
NORMED = {"c_KV": ("c_KV_raw", "gamma_kv", "γ_kv"), "c_Q": ("c_Q_raw", "gamma_q", "γ_q")}


class Compress(StageSpec):
    stage = Stage("compress", "Compress",
                  "Multi-head latent attention (DeepSeek-V2) squeezes each token into one small latent c_KV = X·W_DKV:"
                  " every head's keys and values are expanded from it later, so it is all the KV cache keeps, with"
                  " the one rotary key k_R = X·W_KR that every head shares.")
    matrices = (*parts.INPUTS, *parts.SHARED[:-1])  # k_R (turned) is Rotate's

    def runs(self, trace: TraceContext) -> bool:
        return trace.comp.scenario.mla is not None

    def meaning(self, trace: TraceContext, head: int | None) -> str:
        mla = parts.mla_of(trace)
        text = self.stage.meaning
        if mla.kv_norm:
            text += " The latent is RMS-normalised (DeepSeek's kv_a_layernorm) before the heads read it; k_R is not."
        if mla.W_DQ is not None:
            text += " The queries have a latent of their own, c_Q = X·W_DQ" + (
                ", RMS-normalised (q_a_layernorm)," if mla.q_norm else "") + " which W_UQ expands."
        mha = mla.cache_per_token()[1]
        # DeepSeek-V2's Table 1 counts multi-head attention's cache with d_h, a head's width (d_nope here), not
        # the dₖ = d_nope + d_rope the scale divides by: say which, as the cache view's line does
        return text + (f" Per token and per layer the cache holds {mla.cache_sum}"
                       f" numbers, against 2·n_h·d_h = 2·{mla.num_heads}·{mla.d_nope} = {mha} for multi-head"
                       f" attention's K and V (DeepSeek-V2's Table 1: d_h is a head's width, d_nope = {mla.d_nope},"
                       f" not the dₖ = d_nope + d_rope = {mla.d_qk} of the scale √dₖ).")

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        mla, n = parts.mla_of(trace), trace.comp.scenario.n
        plans = [Plan("c_KV_raw", n, mla.d_c)]
        if mla.kv_norm:
            plans.append(Plan("c_KV", n, mla.d_c))
        plans.append(Plan("k_R_raw", n, mla.W_KR.shape[1]))  # k_R = X·W_KR: as wide as W_KR
        if mla.W_DQ is not None and mla.d_cq is not None:
            plans.append(Plan("c_Q_raw", n, mla.d_cq))
            if mla.q_norm:
                plans.append(Plan("c_Q", n, mla.d_cq))
        return plans

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        assert col is not None
        mla = parts.mla_of(trace)
        if seg.target in NORMED:
            return self._normed(trace, index, seg, row, col, d)
        op = parts.dot_op(trace, index, seg, row, col, d, source=x_in(trace)[0], weight=WEIGHT_OF[seg.target],
                          wcol=col)
        if seg.target == "c_KV_raw" and row == col == 0:  # said once: what the cache keeps
            mha = mla.cache_per_token()[1]
            op = Operation(op.index, op.segment, op.row, op.col, op.value, op.operands, op.arithmetic, (
                f"the cache keeps c_KV and k_R, per token and per layer {mla.cache_sum}; multi-head attention keeps"
                f" K and V of every head, 2·n_h·d_h = 2·{mla.num_heads}·{mla.d_nope} = {mha} (d_h = d_nope, a head's"
                " width, as DeepSeek-V2's Table 1 counts it, not the scale's dₖ = d_nope + d_rope; DeepSeek-V3:"
                " 512 + 64 = 576 against 2·128·128 = 32,768)",))
        return op

    def _normed(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int, d: int) -> Operation:
        mla = parts.mla_of(trace)
        raw_name, gamma_key, gamma_shown = NORMED[seg.target]
        s = parts.shared_of(trace.comp)
        normed = s.c_KV_normed if seg.target == "c_KV" else s.c_Q_normed
        assert normed is not None
        gamma = getattr(mla, gamma_key)
        token = trace.comp.scenario.labels[row]
        raw = parts.shown_name(raw_name)
        symbolic = f"{parts.shown_name(seg.target)}[{token},{col}] = {raw}[{token},{col}] / √(ms + eps)·{gamma_shown}[{col}]"
        stats = RowStats(0.0, float(normed.spread[row]), float(normed.root[row]), mla.eps)
        v = float(normed.X_norm[row, col])
        text, details = cell_lines(symbolic, parts.value(trace.comp, raw_name, None)[row], col, v, float(gamma[col]),
                                   None, stats, False, f"{raw}[{token}]", d, trace.hand)
        return Operation(index, seg, row, col, v, (Ref(raw_name, None, row),), text, details)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        return parts.value(trace.comp, name, head)

    def made_from(self, trace: TraceContext, name: str, head: int | None) -> list[Key] | None:
        if name in parts.INPUTS:
            return []
        if name in WEIGHT_OF:
            return [(x_in(trace)[0], None), (WEIGHT_OF[name], None)]
        return None

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        target = op.segment.target
        if target in NORMED:
            return [(NORMED[target][0], None), (target, None)]
        return [(x_in(trace)[0], None), (WEIGHT_OF[target], None), (target, None)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        shown_x = x_in(trace)[1]
        titles = {"c_KV_raw": f"c_KV = {shown_x}·W_DKV (the latent)", "c_KV": "ĉ_KV = RMSNorm(c_KV)",
                  "k_R_raw": f"k_R = {shown_x}·W_KR (shared)", "c_Q_raw": f"c_Q = {shown_x}·W_DQ",
                  "c_Q": "ĉ_Q = RMSNorm(c_Q)", "W_QA": "W_Q, every head [nope|rope]"}
        return titles.get(name, parts.shown_name(name))

    def worksheet_tables(self, chain: PrintedChain, head: int | None) -> list[Table]:
        del head  # shared: printed once
        return mla_sheet.compress_tables(chain)

    def worksheet_line(self, cells: PrintedCells, table: Table, row: int, col: int, answer: str) -> str:
        return mla_sheet.line(cells, table, row, col, answer)


SPEC = Compress()


@counts(SPEC)
def _cost(sc: Scenario, ph: Phase) -> Count:
    """The latent c_KV and the rotary key k_R of the new key rows, the query latent c_Q of the query rows; a latent
    RMS-normalised costs a root and d + 1 divisions a row."""
    from qkv_tui.core.cost import B, Count, fig, term

    mla = sc.mla
    assert mla is not None
    two, d = ("2", 2), ("d_model", int(sc.X.shape[1]))
    x = "X" if sc.norm is None else "X̂"
    c, r = ("d_c", mla.d_c), mla.rotary_width
    matmul = fig(term("c_KV", two, ph.NEW, d, c), term("k_R", two, ph.NEW, d, r))
    other = fig(term("root", ph.NEW), term("div", ph.NEW, ("d_c + 1", mla.d_c + 1))) if mla.kv_norm else fig()
    read = fig(term(x, ph.R, d, B(ph)), term("W_DKV", d, c, B(ph)), term("W_KR", d, r, B(ph)))
    read += fig(term("γ_kv", c, B(ph))) if mla.kv_norm else fig()
    written = fig(term("c_KV", ph.NEW, c, B(ph)), term("k_R", ph.NEW, r, B(ph)))
    written += fig(term("c_KV normed", ph.NEW, c, B(ph))) if mla.kv_norm else fig()
    if mla.d_cq is not None:
        q = ("d_cq", mla.d_cq)
        matmul += fig(term("c_Q", two, ph.R, d, q))
        read += fig(term("W_DQ", d, q, B(ph)))
        written += fig(term("c_Q", ph.R, q, B(ph)))
        if mla.q_norm:
            other += fig(term("root q", ph.R), term("div q", ph.R, ("d_cq + 1", mla.d_cq + 1)))
            read += fig(term("γ_q", q, B(ph)))
            written += fig(term("c_Q normed", ph.R, q, B(ph)))
    return Count(SPEC.stage.key, SPEC.stage.name, ph.name, matmul=matmul, other=other, read=read, written=written)


class CompressBack(BackwardSpec):
    """Compress read backwards: the latent's gradient from every head's k_C and v_C, the latent norms, and the
    down-projections' gradients."""

    stage = Stage("dcompress", "dCompress",
                  "Back through Compress. The latent c_KV fed every head twice, through k_C = c_KV·W_UK and"
                  " v_C = c_KV·W_UV, so its gradient is the sum of all those paths: dc_KV = Σ heads dk_C·W_UKᵀ +"
                  " dv_C·W_UVᵀ, one dot product per cell. Then the down-projections' own gradients, what training"
                  " changes: dW_DKV = X̂ᵀ·dc_KV and dW_KR = X̂ᵀ·dk_R, the tokens' inputs times the gradients they"
                  " carried.")
    matrices = ("dc_KV_d", "dc_KV_m", "dc_KV_n", "dgamma_kv", "dW_DKV", "dW_KR", "dQ_mla", "dc_Q_d", "dc_Q_m",
                "dc_Q_n", "dgamma_cq", "dW_DQ")

    def runs(self, trace: TraceContext) -> bool:
        return mla_grads.runs(trace)

    def meaning(self, trace: TraceContext, head: int | None) -> str:
        mla = parts.mla_of(trace)
        text = self.stage.meaning.replace("X̂", x_in(trace)[1])
        if mla.kv_norm:
            text += (" kv_norm read backwards first: every cell of a latent's row fed its root, so"
                     " dc_KV = (γ_kv·dĉ_KV − x̂·m) / root with m = mean(γ_kv·dĉ_KV·x̂) per row; dγ_kv = Σ rows dĉ_KV·x̂.")
        if mla.W_DQ is not None:
            text += (" The queries' latent the same way: dc_Q = dq·W_UQᵀ (every head's dq side by side)"
                     + (", back through q_norm," if mla.q_norm else "") + " and dW_DQ = X̂ᵀ·dc_Q.")
        return text.replace("X̂", x_in(trace)[1])

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        mla, n, d_model = parts.mla_of(trace), trace.comp.scenario.n, trace.comp.X_in.shape[1]
        plans = [Plan("dc_KV_d", n, mla.d_c)]
        if mla.kv_norm:
            plans += [Plan("dc_KV_m", n, 1), Plan("dc_KV_n", n, mla.d_c), Plan("dgamma_kv", 1, mla.d_c)]
        plans += [Plan("dW_DKV", d_model, mla.d_c), Plan("dW_KR", *mla.W_KR.shape)]
        if mla.W_DQ is not None and mla.d_cq is not None:
            plans.append(Plan("dc_Q_d", n, mla.d_cq))
            if mla.q_norm:
                plans += [Plan("dc_Q_m", n, 1), Plan("dc_Q_n", n, mla.d_cq), Plan("dgamma_cq", 1, mla.d_cq)]
            plans.append(Plan("dW_DQ", d_model, mla.d_cq))
        return plans

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        assert col is not None
        comp, mla, back = trace.comp, parts.mla_of(trace), mla_grads.back_of(trace)
        target = seg.target
        q = comp.scenario.labels[row] if row < comp.scenario.n else str(row)  # a weight's rows are X̂'s columns
        hat = "ĉ_KV" if mla.kv_norm else "c_KV"
        if target == "dc_KV_d":
            a = np.concatenate([*back.dk_C, *back.dv_C], axis=1)[row]
            b = np.concatenate([mla.W_UK, mla.W_UV], axis=1)[col]
            H = len(comp.heads)
            said = f"d{hat}[{q},{col}] = dk_C[{q}]·W_UK[{col},:] + dv_C[{q}]·W_UV[{col},:]" + (
                f" (all {H} heads' columns)" if H > 1 else "")
            refs = (*[Ref("dK_s", h, row, c) for h in range(H) for c in range(mla.d_nope)],  # dk_C: dK's nope columns
                    *[Ref("dV", h, row) for h in range(H)], Ref("W_UK", None, col), Ref("W_UV", None, col))
            return dot_cell(trace, index, seg, row, col, d, float(back.dc_KV[row, col]), a, b, False,
                            trace.integral("W_UK", None) and trace.integral("W_UV", None), said, refs)
        if target in ("dc_KV_m", "dc_KV_n", "dgamma_kv"):
            return mla_grads.norm_cell(trace, index, seg, row, col, d, "kv", ("dĉ_KV", "dc_KV_d", "dc_KV_m", "γ_kv"))
        if target in ("dc_Q_m", "dc_Q_n", "dgamma_cq"):
            return mla_grads.norm_cell(trace, index, seg, row, col, d, "q", ("dĉ_Q", "dc_Q_d", "dc_Q_m", "γ_q"))
        if target == "dc_Q_d":
            assert back.dc_Q is not None and mla.W_UQ is not None
            said = f"d{'ĉ_Q' if mla.q_norm else 'c_Q'}[{q},{col}] = dq[{q}]·W_UQ[{col},:] (every head's dq side by side)"
            return dot_cell(trace, index, seg, row, col, d, float(back.dc_Q[row, col]), back.dQ_all[row],
                            mla.W_UQ[col], False, trace.integral("W_UQ", None), said,
                            (Ref("dQ_mla", None, row), Ref("W_UQ", None, col)))
        x_name, x_label = x_in(trace)
        X = comp.X_in
        grads_of = {"dW_DKV": (back.dW_DKV, back.dc_KV_raw, "dc_KV", "dc_KV_n" if mla.kv_norm else "dc_KV_d"),
                    "dW_KR": (back.dW_KR, back.dk_R_raw, "dk_R", "dk_R_back" if mla.turns else "dk_R_sum"),
                    "dW_DQ": (back.dW_DQ, back.dc_Q_raw, "dc_Q", "dc_Q_n" if mla.q_norm else "dc_Q_d")}
        value, grad, shown, pane = grads_of[target]
        assert value is not None and grad is not None
        return dot_cell(trace, index, seg, row, col, d, float(value[row, col]), X[:, row], grad[:, col],
                        trace.integral(x_name, None), False, f"{target}[{row},{col}] = {x_label}[:,{row}]·{shown}[:,{col}]",
                        (Ref(x_name, None, None, row), Ref(pane, None, None, col)))

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        if not mla_grads.runs(trace):
            raise KeyError(name)
        mla, back = parts.mla_of(trace), mla_grads.back_of(trace)
        if name in ("dc_KV_m", "dc_Q_m"):
            latent = "kv" if name == "dc_KV_m" else "q"
            if (mla.kv_norm if latent == "kv" else mla.q_norm):
                return mla_grads.xhat_m(trace, latent)[1][:, None]
            raise KeyError(name)
        values: dict[str, Matrix | None] = {
            "dc_KV_d": back.dc_KV, "dc_KV_n": back.dc_KV_raw if mla.kv_norm else None,
            "dgamma_kv": None if back.dgamma_kv is None else back.dgamma_kv[None, :], "dW_DKV": back.dW_DKV,
            "dW_KR": back.dW_KR, "dQ_mla": back.dQ_all, "dc_Q_d": back.dc_Q,
            "dc_Q_n": back.dc_Q_raw if mla.q_norm else None,
            "dgamma_cq": None if back.dgamma_q is None else back.dgamma_q[None, :], "dW_DQ": back.dW_DQ}
        found = values.get(name)
        if found is None:
            raise KeyError(name)
        return found

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        mla, target = parts.mla_of(trace), op.segment.target
        if target == "dc_KV_d":
            return [("dK_s", 0), ("W_UK", None), ("dc_KV_d", None)]
        if target in ("dc_KV_m", "dc_KV_n", "dgamma_kv"):
            return [("dc_KV_d", None), ("c_KV_raw", None), (target, None)]
        if target == "dc_Q_d":
            return [("dQ_mla", None), ("W_UQ", None), (target, None)]
        if target in ("dc_Q_m", "dc_Q_n", "dgamma_cq"):
            return [("dc_Q_d", None), ("c_Q_raw", None), (target, None)]
        source = {"dW_DKV": "dc_KV_n" if mla.kv_norm else "dc_KV_d",
                  "dW_KR": "dk_R_back" if mla.turns else "dk_R_sum",
                  "dW_DQ": "dc_Q_n" if mla.q_norm else "dc_Q_d"}[target]
        return [(x_in(trace)[0], None), (source, None), (target, None)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("dW_DKV", None), ("dW_KR", None)] if mla_grads.runs(trace) else []

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        x = x_in(trace)[1]
        mla = parts.mla_of(trace)
        hat = "ĉ_KV" if mla.kv_norm else "c_KV"
        q_hat = "ĉ_Q" if mla.q_norm else "c_Q"
        return {"dc_KV_d": f"d{hat} = Σ dk_C·W_UKᵀ + dv_C·W_UVᵀ", "dc_KV_m": "m = mean(γ_kv·dĉ_KV·x̂)",
                "dc_KV_n": "dc_KV (through kv_norm)", "dgamma_kv": "dγ_kv = Σ dĉ_KV·x̂",
                "dW_DKV": f"dW_DKV = {x}ᵀ·dc_KV", "dW_KR": f"dW_KR = {x}ᵀ·dk_R", "dQ_mla": "dq, every head [nope|rope]",
                "dc_Q_d": f"d{q_hat} = dq·W_UQᵀ", "dc_Q_m": "m = mean(γ_q·dĉ_Q·x̂)", "dc_Q_n": "dc_Q (through q_norm)",
                "dgamma_cq": "dγ_q = Σ dĉ_Q·x̂", "dW_DQ": f"dW_DQ = {x}ᵀ·dc_Q"}[name]


BACKWARD = CompressBack()


def embed_cell(trace: TraceContext, index: int, seg: Segment, row: int, col: int, d: int) -> Operation:
    """dEmbed under [mla]: a row of X̂ fed the latent, the rotary key and the queries (or their latent)."""
    comp, mla, back = trace.comp, parts.mla_of(trace), mla_grads.back_of(trace)
    q = comp.scenario.labels[row]
    name = "dX̂" if comp.norm is not None else "dX"
    q_grad, q_weight, q_name, q_pane = (
        (back.dQ_all, mla.W_Q, "dq", "W_QA") if mla.W_Q is not None else (back.dc_Q_raw, mla.W_DQ, "dc_Q", "W_DQ"))
    assert q_grad is not None and q_weight is not None
    a = np.concatenate([back.dc_KV_raw[row], back.dk_R_raw[row], q_grad[row]])
    b = np.concatenate([mla.W_DKV[col], mla.W_KR[col], q_weight[col]])
    said = (f"{name}[{q},{col}] = dc_KV[{q}]·W_DKV[{col},:] + dk_R[{q}]·W_KR[{col},:]"
            f" + {q_name}[{q}]·{parts.shown_name(q_pane)}[{col},:]")
    whole = all(trace.integral(w, None) for w in ("W_DKV", "W_KR", q_pane))
    return dot_cell(trace, index, seg, row, col, d, float(back.dX[row, col]), a, b, False, whole, said,
                    (Ref("W_DKV", None, col), Ref("W_KR", None, col), Ref(q_pane, None, col)))


def embed_panes(trace: TraceContext) -> list[Key]:
    q_pane = "W_QA" if parts.mla_of(trace).W_Q is not None else "W_DQ"
    return [("W_DKV", None), ("W_KR", None), (q_pane, None), ("dX_in", None)]


EMBED_MEANING = ("Back to the input. Each row of X fed three down-projections of the latent layer: the latent"
                 " c_KV = X·W_DKV, the rotary key k_R = X·W_KR and the queries (X·W_Q, or their latent X·W_DQ), so its"
                 " gradient is the sum of what came back along each: dX = dc_KV·W_DKVᵀ + dk_R·W_KRᵀ + dq·W_Qᵀ."
                 " X is data, not a weight: training never changes it, but dX is what an earlier layer would receive.")
