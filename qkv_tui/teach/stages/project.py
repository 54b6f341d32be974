"""Stage Project: Q = X·W_Q, K = X·W_K, V = X·W_V, one cell at a time (with a bias, from the context, or shared)."""

from __future__ import annotations

from types import MappingProxyType

from qkv_tui.core.scenario import Matrix
from qkv_tui.teach.arith import dot_line
from qkv_tui.teach.stages.common import (
    K_SLOT,
    Q_SLOT,
    V_SLOT,
    Key,
    Operation,
    Plan,
    Ref,
    Segment,
    Stage,
    StageSpec,
    dot_bias_line,
    kv_shared,
    x_in,
)
from qkv_tui.teach.stages.context import TraceContext

WIDE = ("W_Q_wide", "W_K_wide", "W_V_wide")  # split scenarios: every head's slice side by side
WEIGHTS = ("W_Q", "W_K", "W_V")
SLOTS = {"Q": Q_SLOT, "K": K_SLOT, "V": V_SLOT}  # the formula's letter each projection computes


class Project(StageSpec):
    stage = Stage("project", "Project",
                  "Multiply X by three learned matrices. Row i of Q is what token i is looking for, row i of K"
                  " what it advertises, row i of V the content it will contribute. Separate projections let a"
                  " token ask for one thing and offer another.")
    per_head = True
    matrices = (*WEIGHTS, *WIDE, "Q", "K", "V")
    transposed = MappingProxyType({"KT": "K"})

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        assert head is not None
        sc, hr = trace.comp.scenario, trace.comp.heads[head]
        plans = [Plan("Q", sc.n, hr.d_k)]
        if trace.kv_owner[head] == head:  # a shared K/V head is computed once, by its first reader
            plans += [Plan("K", sc.m, hr.d_k), Plan("V", sc.m, hr.d_v)]
        return plans

    def meaning(self, trace: TraceContext, head: int | None) -> str:
        sc = trace.comp.scenario
        text = self.stage.meaning
        if sc.is_cross:
            text = ("Multiply by three learned matrices: Q = X·W_Q from the query tokens, but K = X_ctx·W_K and"
                    " V = X_ctx·W_V from the context (cross-attention: in a translator the decoder's tokens ask"
                    " and the encoder's output answers, Vaswani et al. §3.2.3). Row i of Q is what query token i"
                    " is looking for, row j of K what context token j advertises, row j of V the content it will"
                    " contribute.")
        if sc.num_kv_heads is not None:
            text += (f" Grouped K/V heads: {len(trace.comp.heads)} query heads share {sc.num_kv_heads} K/V"
                     f" head{'s' if sc.num_kv_heads != 1 else ''}, so each K and V is computed once, by the first"
                     " query head that reads it.")
        if trace.comp.norm is not None:
            text += " The projections read X̂, the normalised X."
        return text

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        comp = trace.comp
        sc = comp.scenario
        if seg.target in ("K", "V") and sc.is_cross:
            source, src_name, xs = sc.X_kv, "context_X", "X_ctx"
        elif comp.norm is not None:
            source, src_name, xs = comp.norm.X_norm, "X_norm", "X̂"
        else:
            source, src_name, xs = sc.X, "X", "X"
        weight_name = f"W_{seg.target}"
        head = comp.heads[h]
        W = getattr(head, weight_name)
        bias = getattr(head, f"b_{seg.target}")
        value = float(getattr(head, seg.target)[row, col])
        label = trace.row_label(seg.target, row)
        result = trace.formatted(seg.target, h, value, d)
        src_int, w_int = trace.integral(src_name, None), trace.integral(weight_name, h)
        # split heads: name the column of the wide matrix the screen shows, h2:0 for head 2's column 0
        wide = trace.is_wide(weight_name)
        wcol = trace.slice_label(weight_name, trace.wide_offset(weight_name, h) + col) if wide else str(col)
        if bias is None:
            work = dot_line(source[row], W[:, col], src_int, w_int, result, d, trace.hand)
            text = f"{seg.target}[{label},{col}] = {xs}[{label}]·{weight_name}[:,{wcol}] = {work}"
        else:
            work = dot_bias_line(source[row], W[:, col], float(bias[col]), src_int, w_int, result, d, trace.hand)
            text = f"{seg.target}[{label},{col}] = {xs}[{label}]·{weight_name}[:,{wcol}] + b_{seg.target}[{col}] = {work}"
        operands = (Ref(src_name, None, row, None), Ref(weight_name, h, None, col))
        details: tuple[str, ...] = ()
        if seg.target == "K" and row == col == 0 and sc.num_kv_heads is not None:  # said once per K/V head
            sharing = trace.kv_readers[h]
            names = ", ".join(str(g + 1) for g in sharing)
            ratio = len(comp.heads) / sc.num_kv_heads
            details = (f"K/V head {head.kv_head + 1} is computed once and read by query heads {names}; the KV cache"
                       f" keeps {sc.num_kv_heads} K/V head{'s' if sc.num_kv_heads != 1 else ''} instead of"
                       f" {len(comp.heads)}: {ratio:g}× smaller",)
        return Operation(index, seg, row, col, value, operands, text, details)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        if name in WIDE:
            if not trace.is_wide(name.removesuffix("_wide")):
                raise KeyError(name)
            return trace.wide(name)
        if head is None:
            raise KeyError(name)
        return getattr(trace.comp.heads[head], name)  # type: ignore[no-any-return]

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        h, target = op.head, op.segment.target
        source = "context_X" if trace.comp.scenario.is_cross and target in ("K", "V") else x_in(trace)[0]
        weight = f"W_{target}_wide" if trace.is_wide(f"W_{target}") else f"W_{target}"  # slice marked
        return [(source, None), (weight, h), (target, h)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("Q", head), ("K", head), ("V", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        if name in WEIGHTS:
            return name
        if name in WIDE:
            return f"{name.removesuffix('_wide')}, all heads"
        hr = trace.comp.heads[head] if head is not None else None

        def plus(role: str) -> str:
            return f" + b_{role}" if hr is not None and getattr(hr, f"b_{role}") is not None else ""

        shown_x = x_in(trace)[1]
        src = "X_ctx" if trace.comp.scenario.is_cross else shown_x
        shared = kv_shared(trace, hr)
        if name == "Q":
            return f"Q = {shown_x}·W_Q{plus('Q')}"
        if name == "KT":
            return f"Kᵀ{shared}"
        return f"{name} = {src}·W_{name}{plus(name)}{shared}"

    def lights(self, seg: Segment) -> frozenset[int]:
        return frozenset({SLOTS[seg.target]})


SPEC = Project()
