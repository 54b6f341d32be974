"""Stage Expand ([mla]): each head's keys k_C = c_KV·W_UK and values v_C = c_KV·W_UV from the one latent, and
its queries q_C (and the rotary q_R, before it turns) from X·W_Q, or from the query latent through W_UQ."""

from __future__ import annotations

from typing import TYPE_CHECKING

from qkv_tui.core.scenario import Matrix
from qkv_tui.teach.stages import mla_grads, mla_sheet
from qkv_tui.teach.stages import mla_parts as parts
from qkv_tui.teach.stages.common import K_SLOT, Q_SLOT, V_SLOT, Key, Operation, Plan, Ref, Segment, Stage, StageSpec, counts, x_in
from qkv_tui.teach.stages.context import TraceContext
from qkv_tui.teach.stages.grads import BackwardSpec, dot_cell
from qkv_tui.teach.stages.printed import PrintedCells, PrintedChain, Table

if TYPE_CHECKING:  # the cost view's module loads on its first use
    from qkv_tui.core.cost import Count, Phase
    from qkv_tui.core.scenario import Scenario


class Expand(StageSpec):
    stage = Stage("expand", "Expand",
                  "Each head expands the shared latent into its own keys k_C = c_KV·W_UK and values v_C = c_KV·W_UV:"
                  " tokens with the same latent get the same keys and values in every head. The queries come from"
                  " their own weights, each head's columns [nope | rope]: q_C is dotted with k_C, q_R turns by"
                  " position and meets the shared rotary key.")
    per_head = True
    matrices = ("q_C", "q_R_raw", "k_C", "v_C")

    def runs(self, trace: TraceContext) -> bool:
        return trace.comp.scenario.mla is not None

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        mla, n = parts.mla_of(trace), trace.comp.scenario.n
        return [Plan("q_C", n, mla.d_nope), Plan("q_R_raw", n, mla.rotary_width[1]), Plan("k_C", n, mla.d_nope),
                Plan("v_C", n, mla.d_v)]

    def _source(self, trace: TraceContext, target: str) -> tuple[str, str]:
        mla = parts.mla_of(trace)
        if target in ("k_C", "v_C"):
            return parts.latent(mla), "W_UK" if target == "k_C" else "W_UV"
        if mla.W_DQ is not None:
            return parts.query_latent(mla), "W_UQ"
        return x_in(trace)[0], "W_QA"

    def _column(self, trace: TraceContext, target: str, h: int, col: int) -> int:
        mla = parts.mla_of(trace)
        if target == "k_C":
            return h * mla.d_nope + col
        if target == "v_C":
            return h * mla.d_v + col
        return h * mla.d_qk + (col if target == "q_C" else mla.d_nope + col)

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        assert col is not None and seg.head is not None
        source, weight = self._source(trace, seg.target)
        return parts.dot_op(trace, index, seg, row, col, d, source=source, weight=weight,
                            wcol=self._column(trace, seg.target, seg.head, col))

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        return parts.value(trace.comp, name, head)

    def made_from(self, trace: TraceContext, name: str, head: int | None) -> list[Key] | None:
        source, weight = self._source(trace, name)
        return [(source, None), (weight, None)]

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        source, weight = self._source(trace, op.segment.target)
        return [(source, None), (weight, None), (op.segment.target, op.head)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("q_C", head), ("k_C", head), ("v_C", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        mla = parts.mla_of(trace)
        src = {"c_KV": "ĉ_KV", "c_KV_raw": "c_KV", "c_Q": "ĉ_Q", "c_Q_raw": "c_Q"}
        source, _ = self._source(trace, name)
        shown = src.get(source, x_in(trace)[1])
        weight = "W_UQ" if mla.W_DQ is not None else "W_Q"
        return {"q_C": f"q_C = {shown}·{weight} (nope)", "q_R_raw": f"q_R = {shown}·{weight} (rope)",
                "k_C": f"k_C = {shown}·W_UK", "v_C": f"v_C = {shown}·W_UV"}[name]

    def lights(self, seg: Segment) -> frozenset[int]:
        return frozenset({{"k_C": K_SLOT, "v_C": V_SLOT}.get(seg.target, Q_SLOT)})

    def worksheet_tables(self, chain: PrintedChain, head: int | None) -> list[Table]:
        assert head is not None
        return mla_sheet.expand_tables(chain, head)

    def worksheet_line(self, cells: PrintedCells, table: Table, row: int, col: int, answer: str) -> str:
        return mla_sheet.line(cells, table, row, col, answer)


SPEC = Expand()


@counts(SPEC)
def _cost(sc: Scenario, ph: Phase) -> Count:
    """Each head's q_C and q_R from X̂·W_Q (or c_Q·W_UQ), and its k_C and v_C from the latent of every key: at decode
    the cache holds only latents, so the expanded form expands all N of them again (the Absorb stage does not)."""
    from qkv_tui.core.cost import B, Count, fig, term

    mla = sc.mla
    assert mla is not None
    two, h, c = ("2", 2), ("h", mla.num_heads), ("d_c", mla.d_c)
    src = ("d_cq", mla.d_cq) if mla.d_cq is not None else ("d_model", int(sc.X.shape[1]))
    src_name, w_q = ("c_Q", "W_UQ") if mla.d_cq is not None else ("X" if sc.norm is None else "X̂", "W_Q")
    qk, nope, v = ("d_nope + d_rope", mla.d_qk), ("d_nope", mla.d_nope), ("d_v", mla.d_v)
    return Count(SPEC.stage.key, SPEC.stage.name, ph.name,
                 matmul=fig(term("q", two, ph.R, src, qk, h), term("k_C", two, ph.SEEN, c, nope, h),
                            term("v_C", two, ph.SEEN, c, v, h)),
                 read=fig(term(src_name, ph.R, src, B(ph)), term(w_q, src, qk, h, B(ph)), term("c_KV", ph.SEEN, c, B(ph)),
                          term("W_UK", c, nope, h, B(ph)), term("W_UV", c, v, h, B(ph))),
                 written=fig(term("q", ph.R, qk, h, B(ph)), term("k_C", ph.SEEN, nope, h, B(ph)),
                             term("v_C", ph.SEEN, v, h, B(ph))))


class ExpandBack(BackwardSpec):
    """Expand read backwards: each head's columns of W_UK, W_UV and the query weights."""

    stage = Stage("dexpand", "dExpand",
                  "Back through Expand: the up-projections' gradients. k_C[t,c] was c_KV[t]·W_UK[:,c], so"
                  " dW_UK = c_KVᵀ·dk_C adds up, over the tokens, the latent times the gradient its key got (dk_C is"
                  " the k_C columns of this head's dK); dW_UV = c_KVᵀ·dv_C the same for the values. Each head owns"
                  " its own columns of W_UK and W_UV, so this head fills only those. The queries' weights take"
                  " this head's dq = [dq_C | dq_R] the same way.")
    per_head = True
    matrices = ("dW_UK_h", "dW_UV_h", "dW_QA_h", "dW_UQ_h")

    def runs(self, trace: TraceContext) -> bool:
        return mla_grads.runs(trace)

    def _query(self, trace: TraceContext) -> tuple[str, str, Matrix]:
        """(the query weight's pane, its gradient's pane, what its rows read: X̂, or the query latent)."""
        mla = parts.mla_of(trace)
        if mla.W_DQ is None:
            return "W_QA", "dW_QA_h", trace.comp.X_in
        return "W_UQ", "dW_UQ_h", parts.value(trace.comp, parts.query_latent(mla), None)

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        mla = parts.mla_of(trace)
        _, q_grad, source = self._query(trace)
        return [Plan("dW_UK_h", mla.d_c, mla.d_nope), Plan("dW_UV_h", mla.d_c, mla.d_v),
                Plan(q_grad, source.shape[1], mla.d_qk)]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        comp, mla, back = trace.comp, parts.mla_of(trace), mla_grads.back_of(trace)
        c_kv = parts.latent(mla)
        c_shown = parts.shown_name(c_kv)
        C = parts.value(comp, c_kv, None)
        if seg.target == "dW_UK_h":
            wcol = h * mla.d_nope + col
            return dot_cell(trace, index, seg, row, col, d, float(back.dW_UK[row, wcol]), C[:, row], back.dk_C[h][:, col],
                            trace.integral(c_kv, None), False,
                            f"dW_UK[{row},{wcol}] = {c_shown}[:,{row}]·dk_C[:,{col}]",
                            (Ref(c_kv, None, None, row), Ref("dK_s", h, None, col)))
        if seg.target == "dW_UV_h":
            wcol = h * mla.d_v + col
            return dot_cell(trace, index, seg, row, col, d, float(back.dW_UV[row, wcol]), C[:, row], back.dv_C[h][:, col],
                            trace.integral(c_kv, None), False,
                            f"dW_UV[{row},{wcol}] = {c_shown}[:,{row}]·dv_C[:,{col}]",
                            (Ref(c_kv, None, None, row), Ref("dV", h, None, col)))
        weight, _, source = self._query(trace)
        grad = back.dW_Q if mla.W_DQ is None else back.dW_UQ
        assert grad is not None
        wcol = h * mla.d_qk + col
        src_name = x_in(trace)[0] if mla.W_DQ is None else parts.query_latent(mla)
        part = "dq_C" if col < mla.d_nope else "dq_R"
        pcol = col if col < mla.d_nope else col - mla.d_nope
        return dot_cell(trace, index, seg, row, col, d, float(grad[row, wcol]), source[:, row],
                        mla_grads.dq_of(trace, h)[:, col], trace.integral(src_name, None), False,
                        f"d{parts.shown_name(weight)}[{row},{wcol}] = {parts.shown_name(src_name)}[:,{row}]·{part}[:,{pcol}]",
                        (Ref(src_name, None, None, row), mla_grads.q_source(trace, h, col)))

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        if head is None or not mla_grads.runs(trace):
            raise KeyError(name)
        mla, back = parts.mla_of(trace), mla_grads.back_of(trace)
        if name == "dW_UK_h":
            return back.dW_UK[:, head * mla.d_nope:(head + 1) * mla.d_nope]
        if name == "dW_UV_h":
            return back.dW_UV[:, head * mla.d_v:(head + 1) * mla.d_v]
        grad = back.dW_Q if name == "dW_QA_h" else back.dW_UQ
        if grad is None:
            raise KeyError(name)
        return grad[:, head * mla.d_qk:(head + 1) * mla.d_qk]

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        mla, h, target = parts.mla_of(trace), op.head, op.segment.target
        c_kv = parts.latent(mla)
        if target == "dW_UK_h":
            return [(c_kv, None), ("dK_s", h), (target, h)]
        if target == "dW_UV_h":
            return [(c_kv, None), ("dV", h), (target, h)]
        src = x_in(trace)[0] if mla.W_DQ is None else parts.query_latent(mla)
        dq = "dQ_s" if not mla.turns or (op.col or 0) < mla.d_nope else "dq_R_back"
        return [(src, None), (dq, h), (target, h)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("dW_UK_h", head), ("dW_UV_h", head)] if mla_grads.runs(trace) else []

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        mla = parts.mla_of(trace)
        c_shown = parts.shown_name(parts.latent(mla))
        h = 0 if head is None else head
        if name == "dW_UK_h":
            return f"dW_UK cols {h * mla.d_nope}..{(h + 1) * mla.d_nope - 1} = {c_shown}ᵀ·dk_C"
        if name == "dW_UV_h":
            return f"dW_UV cols {h * mla.d_v}..{(h + 1) * mla.d_v - 1} = {c_shown}ᵀ·dv_C"
        src = x_in(trace)[1] if mla.W_DQ is None else parts.shown_name(parts.query_latent(mla))
        weight = "W_Q" if name == "dW_QA_h" else "W_UQ"
        return f"d{weight} cols {h * mla.d_qk}..{(h + 1) * mla.d_qk - 1} = {src}ᵀ·dq"


BACKWARD = ExpandBack()
