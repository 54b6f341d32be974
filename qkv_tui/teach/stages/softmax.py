"""Stage Softmax: each row's weights, e^(s − max) / Σ, with an attention sink's extra column where a head has one."""

from __future__ import annotations

import math
from functools import lru_cache, partial
from types import MappingProxyType
from typing import TYPE_CHECKING

import numpy as np

from qkv_tui.core import part_questions as ask
from qkv_tui.core.engine import HeadResult
from qkv_tui.core.fmt import NEG_INF, fmt
from qkv_tui.core.scenario import Matrix
from qkv_tui.kernels.softmax import softmax_rows
from qkv_tui.teach.arith import MAX_TERMS, Numbers, SoftmaxRow, elide
from qkv_tui.teach.arith import softmax_row as worked_row
from qkv_tui.teach.stages import loaded
from qkv_tui.teach.stages.common import (
    CLOSE,
    OPEN,
    FormulaPart,
    Key,
    Operation,
    PaneStyle,
    Plan,
    Ref,
    Segment,
    Stage,
    StageSpec,
    counts,
    paren,
)
from qkv_tui.teach.stages.context import TraceContext
from qkv_tui.teach.stages.grads import BackwardSpec, dot_cell, formula_cell, grads, has_backward, kept
from qkv_tui.teach.stages.markdown import MarkdownPage
from qkv_tui.teach.stages.printed import PrintedCells, PrintedChain, Table, exact
from qkv_tui.teach.stages.replaced import softmax_runs

if TYPE_CHECKING:  # the cost view's module loads on its first use
    from qkv_tui.core.cost import Count, Phase
    from qkv_tui.core.scenario import Scenario


SAME_WEIGHT = "same weight:"  # the seed's way to one weight, after the row's list of e^s
MAX_LISTED = 8  # a "which key?" question lists its keys with their numbers up to this many
SINK_COLUMNS = ("logit", "exp", "Σw")  # the sink pane's columns, one row per query
SINK_MEANING = ("Per row: subtract the row max (so exp never overflows), exponentiate, divide by the row sum."
                " The sink is one more logit in that sum: with its share each row is a probability distribution"
                " (never negative, adding to 1); its column is then dropped, so the rows shown add up to less than 1.")


class Softmax(StageSpec):
    stage = Stage("softmax", "Softmax",
                  "Per row: subtract the row max (so exp never overflows), exponentiate, divide by the row sum."
                  " Each row becomes its own probability distribution: shares that are never negative and add to 1.")
    per_head = True
    matrices = ("weights", "sink")
    styles = MappingProxyType({"weights": PaneStyle(heat=True, masked=True)})

    def runs(self, trace: TraceContext) -> bool:
        return softmax_runs(trace)  # [linear] and [deltanet] replace it

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        sc = trace.comp.scenario
        return [Plan("weights", sc.n, sc.m)]

    def meaning(self, trace: TraceContext, head: int | None) -> str:
        # only the head in view: gated.toml's second head has no sink, and its rows do add to 1
        heads = trace.comp.heads if head is None else [trace.comp.heads[head]]
        if any(loaded.sunk(h) is not None for h in heads):
            # not "add to 1" then "less than 1": the rows shown are the distribution without its sink share
            return SINK_MEANING
        return self.stage.meaning

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        head = trace.comp.heads[h]
        sc = trace.comp.scenario
        q, k = sc.labels[row], sc.key_labels[col]
        value = float(head.weights[row, col])
        r = softmax_row(trace, h, row, d)
        w = r.weights[col]
        if r.scaled[col] == NEG_INF:
            text = f"weights[{q},{k}] = e^{NEG_INF} / {r.total} = 0 (masked)"
        else:
            s, top = r.scaled[col], r.top
            text = (f"weights[{q},{k}] = e^({s} − {paren(top)}) / {r.total} = e^{r.shifted[col]} / {r.total}"
                    f" = {r.exps[col]} / {r.total} = {w}")
        # a long row keeps only the keys it may attend (masked ones add e^−∞ = 0) and names its max
        sink = loaded.sunk(head) is not None  # the sink is the row's last column until the weights are read off
        keep = [j for j, t in enumerate(r.scaled) if len(r.scaled) <= MAX_TERMS or t != NEG_INF]
        exps = [f"{'sink: ' if sink and j == len(r.scaled) - 1 else ''}e^{r.shifted[j]} = {r.exps[j]}" for j in keep]
        if len(keep) <= MAX_TERMS:
            label = "row max (the last is the sink)" if sink else "row max"
            top = f"{label} = max({', '.join(r.scaled[j] for j in keep)}) = {r.top}"
        else:
            top = f"row max = {r.top}, at {sc.key_labels[int(np.argmax(head.masked[row]))]}"
        details = [top, f"e^(s − max): {elide(exps, ' | ')}  →  Σ = {r.total}"]
        if sink:
            details.append(f"the sink's column is dropped after the sum: weights add up to"
                           f" {fmt(float(head.weights[row].sum()), False, d)}, not 1")
        if r.plain is not None and r.plain_total is not None:
            plain = [f"e^{s} = {e}" for s, e in zip(r.scaled, r.plain) if s != NEG_INF]
            if sink:
                plain[-1] = f"sink: {plain[-1]}"
            line = f"without the max, as the seed does: {elide(plain, ' | ')}  →  Σ e^s = {r.plain_total}"
            if r.scaled[col] != NEG_INF:
                line += f"; {SAME_WEIGHT} e^{r.scaled[col]} / Σ e^s = {r.plain[col]} / {r.plain_total} = {w}"
            details.append(line)
        return Operation(index, seg, row, col, value, (Ref(logits_name(trace, h), h, row),), text, tuple(details))

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        if head is None:
            raise KeyError(name)
        return trace.comp.heads[head].weights if name == "weights" else sink_panel(trace, head)

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        h = op.head
        logits = logits_name(trace, h)  # the capped scores where the head has a soft-cap
        if h is not None and loaded.sunk(trace.comp.heads[h]) is not None:
            return [(logits, h), ("weights", h), ("sink", h)]
        return [(logits, h), ("weights", h)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("weights", head)]

    def col_label(self, trace: TraceContext, name: str, col: int) -> str | None:
        return SINK_COLUMNS[col] if name == "sink" else None

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        if name == "sink":
            hr = trace.comp.heads[head] if head is not None else None
            return f"sink {loaded.need_sunk(hr).sink if hr is not None and loaded.sunk(hr) is not None else 0:g}, dropped"
        return f"weights = softmax({logits_name(trace, head)})"

    def filled(self, trace: TraceContext, name: str, head: int | None, index: int) -> int:
        if name == "sink" and head is not None:  # a row of the sink pane appears as its weights row is finished
            done_rows = trace.filled("weights", head, index) // max(trace.comp.scenario.m, 1)
            return done_rows * len(SINK_COLUMNS)
        return trace.filled(name, head, index)

    def formula(self, trace: TraceContext, op: Operation) -> list[FormulaPart]:
        return [FormulaPart(OPEN, "softmax("), FormulaPart(CLOSE, ")")]

    def lights(self, seg: Segment) -> frozenset[int]:
        return frozenset({OPEN, CLOSE})

    def choice(self, trace: TraceContext, op: Operation) -> tuple[str, tuple[str, ...], frozenset[str]] | None:
        """Before a row's first weight: which key gets the row's largest weight."""
        if op.col != 0 or op.head is None:
            return None
        row = trace.comp.heads[op.head].weights[op.row]
        keys = trace.comp.scenario.key_labels
        best = frozenset(keys[j] for j in np.flatnonzero(row == row.max()))
        token = trace.comp.scenario.labels[op.row]
        listed = (" · ".join(f"{i} {k}" for i, k in enumerate(keys, 1)) if len(keys) <= MAX_LISTED
                  else f"(a key's number, 1 … {len(keys)}, or its name)")
        return f"Which key gets row {token}'s largest weight? {listed}", keys, best

    def withheld(self, trace: TraceContext, op: Operation, decimals: int) -> str | None:
        """The row's inputs, not its worked exponentials and sum (the quiz's docstring says why)."""
        if op.col is None or op.head is None:
            return None
        r = softmax_row(trace, op.head, op.row, decimals)
        sink = loaded.sunk(trace.comp.heads[op.head]) is not None  # the sink's logit is the row's last, and joins the sum
        terms = [f"e^{s}" + (" (sink)" if sink and j == len(r.scaled) - 1 else "")
                 for j, s in enumerate(r.scaled) if s != NEG_INF]  # a masked key adds e^−∞ = 0
        target = op.arithmetic.split(" = ")[0]
        return f"{target} = e^{r.scaled[op.col]} / ({elide(terms, ' + ')}) = ?"

    def markdown(self, page: MarkdownPage, head: int | None) -> list[str]:
        assert head is not None
        sc, hr = page.trace.comp.scenario, page.trace.comp.heads[head]
        out = [page.table("weights", head), ""]
        if loaded.sunk(hr) is not None:
            out += [f"With the sink (logit {loaded.need_sunk(hr).sink:g}) each row sums to less than 1:", "",
                    page.array(sink_panel(page.trace, head), list(sc.labels), list(SINK_COLUMNS), "sink", False), ""]
        else:
            out += ["Every row sums to 1" + (" and masked weights are exactly 0." if not sc.allow.all() else "."), ""]
        return out + page.worked(self.stage.key, head)

    def markdown_details(self, op: Operation) -> tuple[str, ...]:
        if op.col == 0:
            return op.details
        # the row's lines once, under its first weight; then each weight the seed's way
        out = []
        for detail in op.details:
            _, sep, same = detail.partition(f"; {SAME_WEIGHT}")
            if sep:
                out.append(f"{SAME_WEIGHT}{same}")
        return tuple(out)

    def worksheet_tables(self, chain: PrintedChain, head: int | None) -> list[Table]:
        assert head is not None
        sc = chain.sc
        sinks = [(hr.name, hr.sink) for hr in sc.heads if hr.sink is not None]
        if sinks:
            chain.late_input(Table("sinks", "sink", "Attention sinks (one logit per head)", "softmax", None,
                                   np.array([[s for _, s in sinks]]), ("sink",), tuple(name for name, _ in sinks), True,
                                   False))
        # (n, m) from the printed scaled row, as a part that steps it (the soft-cap) left it
        logits = stepped_name(chain.comp.heads[head])
        weights = softmax_rows(chain.values(f"{logits}.{head}"), sc.heads[head].sink, chain.page).weights
        return [Table(f"weights.{head}", "weights", f"weights = softmax({logits}), row by row", "softmax", head, weights,
                      sc.labels, sc.key_labels, False, True, sc.allow)]

    def worksheet_line(self, cells: PrintedCells, table: Table, row: int, col: int, answer: str) -> str:
        h, i, j = table.head, row, col
        assert h is not None
        sc = cells.sc
        key = f"{stepped_name(cells.comp.heads[h])}.{h}"
        scaled = cells.tables[key]
        allowed = [c for c in range(sc.m) if sc.allow[i, c]]
        values = [float(scaled.values[i, c]) for c in allowed]
        sink = sc.heads[h].sink
        top = max(values)
        top_text = cells.txt(key, i, allowed[values.index(top)])
        if sink is not None and sink > top:  # the sink is the largest logit: it is what is subtracted
            top, top_text = sink, f"({exact(sink)})" if sink < 0 else exact(sink)
        exps = [math.exp(v - top) for v in values]
        sink_term = ""
        if sink is not None:
            sink_text = f"({exact(sink)})" if sink < 0 else exact(sink)
            sink_term = f" + e^({sink_text} − {top_text})"
            exps.append(math.exp(sink - top))
        total = sum(exps)
        # one decimal more than the page for e and Σ: the sum is at least 1 (e^0 of the largest), so their
        # quotient stays within a unit of the answer
        extra = cells.d + 1

        def power(c: int) -> str:
            return f"e^({cells.txt(key, i, c)} − {top_text})"

        terms = " + ".join(power(c) for c in allowed) + sink_term
        mine = math.exp(float(scaled.values[i, j]) - top)
        symbolic = " = e^(s − m) / (Σ e^(s − m) + e^(sink − m))" if sink is not None else ""
        return (f"weights[{sc.labels[i]},{sc.key_labels[j]}]{symbolic} = {power(j)} / ({terms})"
                f" = {fmt(mine, False, extra)} / {fmt(total, False, extra)} = {answer}")


SPEC = Softmax()


@counts(SPEC)
def _cost(sc: Scenario, ph: Phase) -> Count:
    """An exponential and a division per cell (a sink's column adds an exponential per row)."""
    from qkv_tui.core.cost import B, Count, fig, term

    h, sinks = len(sc.heads), sum(1 for head in sc.heads if head.sink is not None)
    cells = (("h", h), ph.R, ph.A)
    other = fig(term("exp", *cells)) + (fig(term("exp sink", ("sink heads", sinks), ph.R)) if sinks else fig())
    return Count(SPEC.stage.key, SPEC.stage.name, ph.name, other=other + fig(term("div", *cells)),
                 read=fig(term("scaled", *cells, B(ph))), written=fig(term("weights", *cells, B(ph))))


def stepped_name(hr: HeadResult) -> str:
    """What the softmax reads of a head: the scaled scores as the part that steps them names them (the soft-cap's
    capped scores), else the scaled ones (core/part_questions.py stepper)."""
    stepper = ask.stepper(hr)
    return "scaled" if stepper is None else str(stepper.stepped_name)


def logits_name(trace: TraceContext, head: int | None) -> str:
    """The pane the softmax reads (:func:`stepped_name`), of a head of the trace."""
    return "scaled" if head is None else stepped_name(trace.comp.heads[head])


def softmax_row(trace: TraceContext, head: int, row: int, decimals: int) -> SoftmaxRow:
    """One softmax row as shown, worked out once: a row's lines show its numbers at one precision."""
    rows = trace.memo("softmax rows", lambda: lru_cache(maxsize=64)(partial(_worked, trace)))
    return rows(head, row, decimals)


def _worked(trace: TraceContext, head: int, row: int, decimals: int) -> SoftmaxRow:
    hr = trace.comp.heads[head]
    if loaded.sunk(hr) is not None:  # the sink is one more column of the row until the weights are read off
        logits, weights = sink_row(hr, row)
        return worked_row(logits, weights, decimals)
    return worked_row(hr.masked[row], hr.weights[row], decimals)


def sink_panel(trace: TraceContext, head: int) -> Matrix:
    """The softmax's extra sink column per row: its logit, its exponential, and the row's Σ weights."""
    hr = trace.comp.heads[head]
    assert loaded.sunk(hr) is not None
    sink = loaded.need_sunk(hr)
    panel = np.stack([np.full(len(hr.row_sum), sink.sink), sink.sink_exp, hr.weights.sum(axis=1)], axis=1)
    panel.setflags(write=False)
    return panel


def sink_row(head: HeadResult, row: int) -> tuple[Numbers, Numbers]:
    """The softmax row with the sink as an extra last column: its logit, and the share it takes."""
    assert loaded.sunk(head) is not None
    logits = np.append(head.masked[row], loaded.need_sunk(head).sink)
    share = float(loaded.need_sunk(head).sink_exp[row] / head.row_sum[row])
    return logits, np.append(head.weights[row], share)


class SoftmaxBack(BackwardSpec):
    """The softmax's Jacobian: dS = P ⊙ (dP − D), D = rowsum(dO ⊙ O) (docs/backward.md)."""

    stage = Stage("dsoftmax", "dSoftmax",
                  "Back through the softmax. Raising one logit raises its own weight but lowers every other weight of"
                  " the row, because a row always shares out the same total. So the gradient at logit j is its"
                  " weight times how much more than the row's average its key would raise the loss: dS = P ⊙ (dP − D), where"
                  " D[t] = Σⱼ P[t,j]·dP[t,j] is that average, worked once per row as dO[t]·out[t] (the same sum).")
    per_head = True
    matrices = ("D", "dS", "dsink")
    styles = MappingProxyType({"dS": PaneStyle(masked=True)})

    def runs(self, trace: TraceContext) -> bool:
        return has_backward(trace) and softmax_runs(trace)  # [linear] and [deltanet] have their own

    def meaning(self, trace: TraceContext, head: int | None) -> str:
        text = self.stage.meaning
        if trace.comp.scenario.mask_kind != "none":
            text += (" A masked cell's weight is exactly 0, so its dS is exactly 0 whatever dP says: no gradient"
                     " reaches a score the mask hides.")
        if head is not None and loaded.sunk(trace.comp.heads[head]) is not None:
            text += (" The sink is one more column of the row whose dP is 0 (it adds nothing to the output), so it"
                     " takes its share of D: dsink = Σₜ p_sink[t]·(0 − D[t]).")
        return text

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        assert head is not None
        sc = trace.comp.scenario
        plans = [Plan("D", sc.n, 1), Plan("dS", sc.n, sc.m)]
        return plans + ([Plan("dsink", 1, 1)] if loaded.sunk(trace.comp.heads[head]) is not None else [])

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        hg, hr, sc = grads(trace).heads[h], trace.comp.heads[h], trace.comp.scenario
        ab = hg.attend
        q = sc.labels[row]
        if seg.target == "D":
            return dot_cell(trace, index, seg, row, col, d, float(ab.D[row]), hg.dO[row], hr.output[row], False, False,
                            f"D[{q}] = dO[{q}]·out[{q}]", (Ref("dO_h", h, row), Ref("output", h, row)))
        if seg.target == "dsink":
            share = kept(trace, np.asarray(None if (s := loaded.sunk(hr)) is None else s.sink_exp) / hr.row_sum)  # (n,)
            assert ab.dsink is not None
            return dot_cell(trace, index, seg, row, col, d, ab.dsink, share, -ab.D, False, False,
                            "dsink = Σₜ p_sink[t]·(−D[t])", (Ref("sink", h), Ref("D", h)))
        k = sc.key_labels[col]
        refs = (Ref("weights", h, row, col), Ref("dP", h, row, col), Ref("D", h, row))
        said = f"dS[{q},{k}] = weights[{q},{k}]·(dP[{q},{k}] − D[{q}])"
        op = formula_cell(trace, index, seg, row, col, d, float(ab.dS[row, col]), lambda p, x, y: p * (x - y),
                          [float(hr.weights[row, col]), float(ab.dP[row, col]), float(ab.D[row])],
                          lambda t: f"{t[0]}·({t[1]} − {t[2]})", said, refs)
        if not sc.allow[row, col]:
            op = Operation(op.index, seg, row, col, 0.0, refs, f"{op.arithmetic} (masked)",
                           (f"the mask hides {k} from {q}: its weight is exactly 0, so its gradient is exactly 0",))
        return op

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        if head is None or not has_backward(trace):
            raise KeyError(name)
        ab = grads(trace).heads[head].attend
        if name == "D":
            return ab.D[:, None]
        if name == "dS":
            return ab.dS
        if ab.dsink is None:
            raise KeyError(name)
        return np.array([[ab.dsink]])

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        h = op.head
        if op.segment.target == "D":
            return [("dO_h", h), ("output", h), ("D", h)]
        if op.segment.target == "dsink":
            return [("sink", h), ("D", h), ("dsink", h)]
        return [("weights", h), ("dP", h), ("dS", h)]  # D is in the line (its own segment showed it once per row)

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("dS", head)] if has_backward(trace) else []

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        return {"D": "D = rowsum(dO⊙out)", "dS": "dS = P⊙(dP − D)", "dsink": "dsink"}[name]


BACKWARD = SoftmaxBack()
