"""Stage Compress ([mla]): the latent c_KV = X·W_DKV (RMS-normalised where kv_norm says so), the shared rotary
key's projection k_R = X·W_KR, and the query's latent c_Q = X·W_DQ where the queries have one."""

from __future__ import annotations

from qkv_tui.core.scenario import Matrix
from qkv_tui.teach.stages import mla_parts as parts
from qkv_tui.teach.stages import mla_sheet
from qkv_tui.teach.stages.common import Key, Operation, Plan, Ref, Segment, Stage, StageSpec, x_in
from qkv_tui.teach.stages.context import TraceContext
from qkv_tui.teach.stages.norm import RowStats, cell_lines
from qkv_tui.teach.stages.printed import PrintedCells, PrintedChain, Table

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
        cached, mha = mla.cache_per_token()
        return text + (f" Per token the cache holds d_c + d_rope = {mla.d_c} + {mla.d_rope} = {cached} numbers, against"
                       f" 2·num_heads·dₖ = {mha} for multi-head attention.")

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        mla, n = parts.mla_of(trace), trace.comp.scenario.n
        plans = [Plan("c_KV_raw", n, mla.d_c)]
        if mla.kv_norm:
            plans.append(Plan("c_KV", n, mla.d_c))
        plans.append(Plan("k_R_raw", n, mla.d_rope))
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
            cached, mha = mla.cache_per_token()
            op = Operation(op.index, op.segment, op.row, op.col, op.value, op.operands, op.arithmetic, (
                f"the cache keeps c_KV and k_R, per token d_c + d_rope = {mla.d_c} + {mla.d_rope} = {cached};"
                f" multi-head attention keeps K and V of every head, 2·num_heads·dₖ = 2·{mla.num_heads}·{mla.d_nope}"
                f" = {mha} (DeepSeek-V3: 512 + 64 = 576 against 2·128·128 = 32,768)",))
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
