"""Stage Concat (several heads): the heads' outputs side by side, one wide row per token."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from qkv_tui.core.engine import HeadResult
from qkv_tui.core.scenario import Matrix
from qkv_tui.teach.stages.common import CONCAT, FormulaPart, Key, Operation, Plan, Ref, Segment, Stage, StageSpec, counts
from qkv_tui.teach.stages.context import TraceContext
from qkv_tui.teach.stages.markdown import MarkdownPage
from qkv_tui.teach.stages.printed import PrintedChain, Table, idx

if TYPE_CHECKING:  # the cost view's module loads on its first use
    from qkv_tui.core.cost import Count, Phase
    from qkv_tui.core.scenario import Scenario


class Concat(StageSpec):
    stage = Stage("concat", "Concat",
                  "Each head produced its own output. Place them side by side, left to right, one wide row per token.")
    matrices = ("concat",)

    def runs(self, trace: TraceContext) -> bool:
        return len(trace.comp.heads) > 1

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        return [Plan("concat", trace.comp.scenario.n, trace.comp.concat.shape[1], per_row=True)]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        q = trace.comp.scenario.labels[row]
        pieces, refs = [], []
        for h, head in enumerate(trace.comp.heads):
            shown = joined_name(head)  # a gate's output (or [deltanet]'s normed output) is what Concat joins
            pieces.append(", ".join(trace.formatted(shown, h, v, d) for v in head.joined[row]))
            refs.append(Ref(shown, h, row))
        names = " | ".join(f"{head.name} {_short(head)}[{q}]"
                           for head in trace.comp.heads)
        text = f"concat[{q}] = [{names}] = [{' | '.join(pieces)}]"
        return Operation(index, seg, row, None, None, tuple(refs), text)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        return trace.comp.concat

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        outputs: list[Key] = [(joined_name(h), i) for i, h in enumerate(trace.comp.heads)]
        return [*outputs, ("concat", None)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("concat", None)]

    def overview_tail(self, trace: TraceContext, head: int) -> list[Key]:
        # the other heads' outputs that Concat joins
        return [(joined_name(trace.comp.heads[g]), g)
                for g in range(len(trace.comp.heads)) if g != head]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        return "concat = [" + " | ".join(f"{_short(h)}{i + 1}"
                                         for i, h in enumerate(trace.comp.heads)) + "]"

    def formula(self, trace: TraceContext, op: Operation) -> list[FormulaPart]:
        return [FormulaPart(CONCAT, "  → concat")]

    def lights(self, seg: Segment) -> frozenset[int]:
        return frozenset({CONCAT})

    def markdown(self, page: MarkdownPage, head: int | None) -> list[str]:
        return [page.table("concat", None), ""]  # nothing to work: the outputs, placed

    def worksheet_tables(self, chain: PrintedChain, head: int | None) -> list[Table]:
        sc = chain.sc
        concat = printed_concat(chain)
        return [Table("concat", "concat", "concat = [" + " | ".join(h.name for h in sc.heads) + "]", "concat", None,
                      concat, sc.labels, idx(concat.shape[1]), False, False)]


SPEC = Concat()


@counts(SPEC)
def _cost(sc: Scenario, ph: Phase) -> Count:
    """A copy: the heads' outputs laid side by side."""
    from qkv_tui.core.cost import B, Count, fig, term

    row = (ph.R, ("Σd_v", sum(head.d_v for head in sc.heads)), B(ph))
    return Count(SPEC.stage.key, SPEC.stage.name, ph.name, read=fig(term("outs", *row)), written=fig(term("concat", *row)))


def printed_concat(chain: PrintedChain) -> Matrix:
    """The printed outputs side by side: (n, sum d_v)."""
    # a head whose part makes what Concat joins (the gate) has it printed as that part's table, after Mix
    joined = [f"{joined_name(head)}.{h}" for h, head in enumerate(chain.comp.heads)]
    return np.concatenate([chain.values(name if name in chain.printed else f"output.{h}")
                           for h, name in enumerate(joined)], axis=1)


def _joiner(head: HeadResult) -> Any:
    """The part whose output Concat joins in the head's output's place (the gate's, [deltanet]'s output norm);
    None where Concat joins the head's output itself."""
    return next((part for part in reversed(tuple(head.parts.values())) if getattr(part, "joined", None) is not None),
                None)


def joined_name(head: HeadResult) -> str:
    """The matrix Concat joins of a head, as the part that makes it names it; else the head's output."""
    part = _joiner(head)
    return "output" if part is None else str(part.joined_name)


def _short(head: HeadResult) -> str:
    part = _joiner(head)
    return "out" if part is None else str(part.joined_label)
