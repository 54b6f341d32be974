"""Stage Absorb ([mla]): the same head computed without expanding the latent. W_UK folds into the query,
q_L = q_C·W_UKᵀ, scored against c_KV itself (plus the rotary part); W_UV folds into the output, the weights
mixing c_KV first. Each score and output cell is shown beside the expanded one it equals."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from qkv_tui.core.scenario import Matrix
from qkv_tui.teach.arith import dot_line
from qkv_tui.teach.stages import mla_parts as parts
from qkv_tui.teach.stages import mla_sheet
from qkv_tui.teach.stages.common import Key, Operation, Plan, Ref, Segment, Stage, StageSpec, counts
from qkv_tui.teach.stages.context import TraceContext
from qkv_tui.teach.stages.printed import PrintedCells, PrintedChain, Table

if TYPE_CHECKING:  # the cost view's module loads on its first use
    from qkv_tui.core.cost import Count, Phase
    from qkv_tui.core.scenario import Scenario


class Absorb(StageSpec):
    stage = Stage("absorb", "Absorb",
                  "The same head without expanding the latent: q_C·k_Cᵀ = q_C·(c_KV·W_UK)ᵀ = (q_C·W_UKᵀ)·c_KVᵀ, so W_UK"
                  " folds into the query and the scores are taken against c_KV itself; and weights·v_C ="
                  " (weights·c_KV)·W_UV, so W_UV folds into the output. Nothing per head is cached: a decoder keeps"
                  " only c_KV and k_R for every token, and every head reads them.")
    per_head = True
    matrices = ("q_L", "scores_L", "mix_L", "out_L")

    def runs(self, trace: TraceContext) -> bool:
        return trace.comp.scenario.mla is not None

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        mla, n = parts.mla_of(trace), trace.comp.scenario.n
        return [Plan("q_L", n, mla.d_c), Plan("scores_L", n, n), Plan("mix_L", n, mla.d_c), Plan("out_L", n, mla.d_v)]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        assert col is not None and seg.head is not None
        comp, mla, h = trace.comp, parts.mla_of(trace), seg.head
        sc, hr = comp.scenario, comp.heads[h]
        q = sc.labels[row]
        target = seg.target
        v = float(parts.value(comp, target, h)[row, col])
        result = trace.formatted(target, h, v, d)
        c_kv, k_r, q_r = parts.latent(mla), parts.rotary_key(mla), parts.rotary_query(mla)
        details: tuple[str, ...] = ()
        if target == "q_L":
            a, b = parts.value(comp, "q_C", h)[row], mla.W_UK[col, h * mla.d_nope:(h + 1) * mla.d_nope]
            work = dot_line(a, b, trace.integral("q_C", h), trace.integral("W_UK", None), result, d, trace.hand)
            lo, hi = h * mla.d_nope, (h + 1) * mla.d_nope - 1
            text = f"q_L[{q},{col}] = q_C[{q}]·W_UK[{col},{lo}..{hi}] = {work}"
            refs = (Ref("q_C", h, row), Ref("W_UK", None, col))
        elif target == "scores_L":
            k = sc.key_labels[col]
            a = np.concatenate([parts.value(comp, "q_L", h)[row], parts.value(comp, q_r, h)[row]])
            b = np.concatenate([parts.value(comp, c_kv, None)[col], parts.value(comp, k_r, None)[col]])
            work = dot_line(a, b, trace.integral("q_L", h) and trace.integral(q_r, h),
                            trace.integral(c_kv, None) and trace.integral(k_r, None), result, d, trace.hand)
            text = (f"scores_L[{q},{k}] = [q_L | {parts.shown_name(q_r)}][{q}]·[{parts.shown_name(c_kv)} |"
                    f" {parts.shown_name(k_r)}][{k}] = {work}")
            details = (_same("scores", f"scores[{q},{k}]", trace.formatted("scores", h, float(hr.scores[row, col]), d),
                             result, "the expanded keys"),)
            refs = (Ref("q_L", h, row), Ref(c_kv, None, col))
        elif target == "mix_L":
            a, b = hr.weights[row], parts.value(comp, c_kv, None)[:, col]
            work = dot_line(a, b, False, trace.integral(c_kv, None), result, d, trace.hand)
            text = f"o_L[{q},{col}] = weights[{q}]·{parts.shown_name(c_kv)}[:,{col}] = {work}"
            refs = (Ref("weights", h, row), Ref(c_kv, None, None, col))
        else:
            a, b = parts.value(comp, "mix_L", h)[row], mla.W_UV[:, h * mla.d_v + col]
            work = dot_line(a, b, False, trace.integral("W_UV", None), result, d, trace.hand)
            text = f"out_L[{q},{col}] = o_L[{q}]·W_UV[:,{h * mla.d_v + col}] = {work}"
            details = (_same("output", f"out[{q},{col}]", trace.formatted("output", h, float(hr.output[row, col]), d),
                             result, "the expanded values"),)
            refs = (Ref("mix_L", h, row), Ref("W_UV", None, None, h * mla.d_v + col))
        return Operation(index, seg, row, col, v, refs, text, details)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        return parts.value(trace.comp, name, head)

    def made_from(self, trace: TraceContext, name: str, head: int | None) -> list[Key] | None:
        mla = parts.mla_of(trace)
        if name == "q_L":
            return [("q_C", head), ("W_UK", None)]
        if name == "scores_L":
            return [("q_L", head), (parts.rotary_query(mla), head), (parts.latent(mla), None),
                    (parts.rotary_key(mla), None)]
        return None

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        mla, h, target = parts.mla_of(trace), op.head, op.segment.target
        if target == "q_L":
            return [("q_C", h), ("W_UK", None), ("q_L", h)]
        if target == "scores_L":
            return [("q_L", h), (parts.latent(mla), None), ("scores_L", h), ("scores", h)]
        if target == "mix_L":
            return [("weights", h), (parts.latent(mla), None), ("mix_L", h)]
        return [("mix_L", h), ("W_UV", None), ("out_L", h), ("output", h)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        mla = parts.mla_of(trace)
        c_kv, k_r, q_r = (parts.shown_name(n) for n in (parts.latent(mla), parts.rotary_key(mla), parts.rotary_query(mla)))
        return {"q_L": "q_L = q_C·W_UKᵀ", "scores_L": f"q_L·{c_kv}ᵀ + {q_r}·{k_r}ᵀ", "mix_L": f"o_L = weights·{c_kv}",
                "out_L": "out_L = o_L·W_UV"}[name]

    def worksheet_tables(self, chain: PrintedChain, head: int | None) -> list[Table]:
        assert head is not None
        return mla_sheet.absorb_tables(chain, head)

    def worksheet_line(self, cells: PrintedCells, table: Table, row: int, col: int, answer: str) -> str:
        return mla_sheet.line(cells, table, row, col, answer)


SPEC = Absorb()


@counts(SPEC)
def _cost(sc: Scenario, ph: Phase) -> Count:
    """The absorbed form of every head: q_L = q_C·W_UKᵀ, the scores against [c_KV | k_R], the weights mixing c_KV,
    then ·W_UV. It reads the latent cache itself, so at decode nothing grows with N but the scores and the mix."""
    from qkv_tui.core.cost import B, Count, fig, term

    mla = sc.mla
    assert mla is not None
    two, h, c = ("2", 2), ("h", mla.num_heads), ("d_c", mla.d_c)
    nope, r, v = ("d_nope", mla.d_nope), mla.rotary_width, ("d_v", mla.d_v)
    cr = mla.cache_held[1]  # a token's cached row, [c_KV | k_R]
    return Count(SPEC.stage.key, SPEC.stage.name, ph.name,
                 matmul=fig(term("q_L", two, ph.R, nope, c, h), term("scores_L", two, ph.R, ph.A, cr, h),
                            term("mix_L", two, ph.R, ph.A, c, h), term("out_L", two, ph.R, c, v, h)),
                 read=fig(term("q_C", ph.R, nope, h, B(ph)), term("W_UK", c, nope, h, B(ph)),
                          term("q_R", ph.R, r, h, B(ph)), term("c_KV", ph.SEEN, c, B(ph)), term("k_R", ph.SEEN, r, B(ph)),
                          term("weights", h, ph.R, ph.A, B(ph)), term("W_UV", c, v, h, B(ph))),
                 written=fig(term("q_L", ph.R, c, h, B(ph)), term("scores_L", h, ph.R, ph.A, B(ph)),
                             term("mix_L", ph.R, c, h, B(ph)), term("out_L", ph.R, v, h, B(ph))))


def _same(kind: str, name: str, expanded: str, absorbed: str, how: str) -> str:
    """The ✓ line: the absorbed cell against the expanded one (by hand the two roundings may part in the last digit)."""
    mark = "✓ the same" if expanded == absorbed else "≈ the same but for rounding"
    return f"{mark} as {name} from {how}: {expanded}"
