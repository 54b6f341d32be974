"""Stage Reuse ([shared_kv], Gemma 3n's cross-layer KV sharing): the K and V this layer attends over, each cell
read from the source layer's cache as that layer computed it (Gemma 3n: after its k_norm and RoPE, after its
v_norm); this layer computes none of them. Every query head shows the K and V it reads (heads reading one K/V
head, the same numbers)."""

from __future__ import annotations

from types import MappingProxyType

from qkv_tui.core import part_questions as ask
from qkv_tui.core.engine import HeadResult
from qkv_tui.core.scenario import Matrix
from qkv_tui.core.shared_kv_part import ReusedKV
from qkv_tui.core.variants import TABLES
from qkv_tui.teach.stages.common import K_SLOT, V_SLOT, Key, Operation, Plan, Ref, Segment, Stage, StageSpec
from qkv_tui.teach.stages.context import TraceContext
from qkv_tui.teach.stages.markdown import MarkdownPage

ROLES = ("K", "V")


def _record(hr: HeadResult) -> ReusedKV:
    record = hr.part(ReusedKV)
    assert record is not None, "a Reuse stage for a head without [shared_kv]"
    return record


def _first_reader(trace: TraceContext, head: int) -> int:
    """The first query head that reads this head's K/V head: where its K and V are shown."""
    heads = trace.comp.heads
    return next(g for g, hr in enumerate(heads) if hr.kv_head == heads[head].kv_head)


class Reuse(StageSpec):
    stage = Stage("reuse", "Reuse",
                  "K and V are not computed here: this layer reuses those an earlier layer computed and cached.")
    per_head = True
    cells_given = True  # layer L's numbers, read: nothing here to predict
    matrices = ROLES
    transposed = MappingProxyType({"KT": "K"})

    def runs(self, trace: TraceContext) -> bool:
        return any(hr.part(ReusedKV) is not None for hr in trace.comp.heads)

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        # every head shows the K and V it reads (each head's stages are the same list), the same K/V head's alike
        assert head is not None
        hr = trace.comp.heads[head]
        return [Plan("K", trace.comp.scenario.m, hr.d_k), Plan("V", trace.comp.scenario.m, hr.d_v)]

    def meaning(self, trace: TraceContext, head: int | None) -> str:
        assert head is not None
        hr = trace.comp.heads[head]
        r = _record(hr)
        L = r.source_layer
        sc = trace.comp.scenario
        # what the scenario's tables do to Q alone here, in the order they act (FEATURES')
        turned = [said for said in (ask.said_of(t.of(sc), "reuse.q") for t in TABLES) if said is not None]
        text = (f"K and V reused from layer {L}, not computed here. This layer has no W_K, W_V, k_norm or v_norm"
                f" (Gemma 3n's last layers share K and V, transformers' Gemma3nTextAttention): it reads the keys and"
                f" values layer {L} computed from its own input and cached (in Gemma 3n, K after layer {L}'s k_norm and"
                f" RoPE, V after its v_norm), and uses them as they are"
                + (f": Q alone is {' and '.join(turned)} here." if turned else ".")
                + " The layer's KV cache holds nothing of its own (0 bytes: c, the cost view, counts it).")
        readers = [str(g + 1) for g, other in enumerate(trace.comp.heads) if other.kv_head == hr.kv_head]
        if len(readers) > 1:
            text += f" K/V head {hr.kv_head + 1} is read by query heads {', '.join(readers)}."
        return text

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        hr = trace.comp.heads[h]
        L = _record(hr).source_layer
        value = float(getattr(hr, seg.target)[row, col])
        label = trace.row_label(seg.target, row)
        result = trace.formatted(seg.target, h, value, d)
        done = "in Gemma 3n after its k_norm and RoPE" if seg.target == "K" else "in Gemma 3n after its v_norm"
        text = f"{seg.target}[{label},{col}] = layer {L}'s {seg.target}[{label},{col}] = {result}"
        details = (f"read from layer {L}'s cache as layer {L} computed it ({done}): reused, not computed here",)
        return Operation(index, seg, row, col, value, (Ref(seg.target, h, row, col),), text, details)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        if head is None or name not in ROLES:
            raise KeyError(name)
        return getattr(trace.comp.heads[head], name)  # type: ignore[no-any-return]

    def made_from(self, trace: TraceContext, name: str, head: int | None) -> list[Key] | None:
        return []  # given numbers: written as the file gives them

    def row_label(self, trace: TraceContext, name: str, row: int) -> str | None:
        return trace.comp.scenario.key_labels[row]

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        h = op.head
        return [("K", h), ("V", h)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        hr = trace.comp.heads[head] if head is not None else None
        if hr is None:
            return name
        L = _record(hr).source_layer
        if name == "KT":
            return f"Kᵀ (layer {L}'s)"
        return f"{name} = layer {L}'s {name}, reused"

    def lights(self, seg: Segment) -> frozenset[int]:
        return frozenset({K_SLOT if seg.target == "K" else V_SLOT})

    def markdown(self, page: MarkdownPage, head: int | None) -> list[str]:
        assert head is not None
        trace = page.trace
        out: list[str] = []
        first = _first_reader(trace, head)
        if first != head:
            out += [f"The same K and V as {trace.comp.heads[first].name}'s (K/V head {trace.comp.heads[head].kv_head + 1}).",
                    ""]
        for role in ROLES:
            out += [page.table(role, head), ""]
        return out


REUSE = Reuse()
REUSE.uncounted = ("no arithmetic: K and V are read from the source layer's cache, and Score and Mix count those"
                   " reads")
