"""What the backward stages share: the scenario's gradients (worked out once per trace), when they run, and
their one-cell lines (docs/backward.md). Each backward stage lives in the module of its forward stage
(mix.py holds Mix and its backward, dV and dP); this module holds only what they have in common."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from qkv_tui.core import part_questions as ask
from qkv_tui.core.fmt import operand
from qkv_tui.core.scenario import Matrix
from qkv_tui.kernels.policy import round_to
from qkv_tui.teach.arith import MAX_TERMS, Operand, dot_line, fit, float_sum, shown, tries, unit
from qkv_tui.teach.stages.common import Operation, Plan, Ref, Segment, StageSpec
from qkv_tui.teach.stages.context import TraceContext

if TYPE_CHECKING:
    from qkv_tui.core.gradients import Gradients

# the names the backward panes take (the trace labels their rows and columns by them)
KEY_ROWS = ("dK_s", "dK_t", "dK", "dV")  # one row per key
KEY_COLS = ("dP", "dS", "dscaled", "dscores", "lb_dW", "lb_dA")  # one column per key


OUT_OF_RANGE = ("float64 ran out of range: a product or sum past ±1.8e308 is ±inf, and inf + (−inf) is nan, as"
                " float arithmetic (IEEE 754) gives it; the kernels and this line both follow it")


def grads(trace: TraceContext) -> Gradients:
    """Every gradient of the scenario's [backward], exact, from the trace's forward pass."""
    from qkv_tui.core.gradients import gradients  # with a scenario that has [backward], not at start-up

    return trace.memo("gradients", lambda: gradients(trace.comp))


def has_backward(trace: TraceContext) -> bool:
    return trace.comp.scenario.backward is not None


def handed_back(trace: TraceContext, head: int | None, role: str, after: type | None = None) -> str:
    """The pane holding the gradient at ``role`` (Q or K) as the backward hands it to the projection: at the first
    of the head's parts that turned Q and K (a record's ``back_suffix``: QK-norm's dQ_n, the rotation's dQ_t), else
    Score's dQ_s. ``after``: a record's type, for what is handed to that part (the parts after it)."""
    records = list(ask.answering(trace.comp.heads[head or 0], "back_suffix"))
    if after is not None:
        records = records[next(i for i, r in enumerate(records) if isinstance(r, after)) + 1:]
    return f"d{role}{records[0].back_suffix if records else '_s'}"


def kept(trace: TraceContext, x: Matrix) -> Matrix:
    """A table as the backward pass kept it: by hand, written down rounded (kernels/attention_backward.py does the same)."""
    return x if trace.hand is None else round_to(x, trace.hand)


class BackwardSpec(StageSpec):
    """A backward stage: it runs only where the scenario has a [backward] table."""

    uncounted = "the backward pass: the cost view counts inference (prefill and decode)"

    def runs(self, trace: TraceContext) -> bool:
        return has_backward(trace)


def query_key_plans(trace: TraceContext, head: int | None, at_queries: str, at_keys: str) -> list[Plan]:
    """A gradient at the Queries (n rows) and one at the Keys (m rows), each d_k wide: dScore's and dRotate's."""
    assert head is not None
    sc, d_k = trace.comp.scenario, trace.comp.heads[head].d_k
    return [Plan(at_queries, sc.n, d_k), Plan(at_keys, sc.m, d_k)]


def dot_cell(trace: TraceContext, index: int, seg: Segment, row: int, col: int, d: int, value: float,
             a: Sequence[float] | Matrix, b: Sequence[float] | Matrix, a_int: bool, b_int: bool, said: str,
             operands: tuple[Ref, ...], details: tuple[str, ...] = ()) -> Operation:
    """``dV[love,0] = weights[:,love]·dO[:,0] = 0.070·0.5 + … = 0.123``: one cell as a dot product."""
    result = trace.formatted(seg.target, seg.head, value, d)
    av, bv = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if trace.hand is not None:  # by hand each product is written down rounded, then summed
        work = dot_line(av, bv, a_int, b_int, result, d, trace.hand)
    else:
        work = dot_line(av, bv, a_int, b_int, result, d, places=_places(av, bv, a_int, b_int, result, d))
    if not math.isfinite(value):
        details = (*details, OUT_OF_RANGE)
    return Operation(index, seg, row, col, value, operands, f"{said} = {work}", details)


def _places(a: Matrix, b: Matrix, a_int: bool, b_int: bool, result: str, d: int) -> int:
    """The fewest places at which the shown products land within half a unit of the result. A gradient's
    terms often cancel (a row of dS sums to 0), and a sum that lands a whole unit off by float noise alone
    would read right to one calculator and wrong to another: half a unit leaves room for both."""
    places = list(tries(d, a_int, b_int))
    if len(a) > MAX_TERMS or result == "nan":  # no digits make a nan agree: the fewest say it
        return places[0]
    for p in places:
        terms = [shown(operand(float(x), a_int, p)) * shown(operand(float(y), b_int, p)) for x, y in zip(a, b)]
        if abs(float_sum(terms) - shown(result)) <= 0.5 * unit(result):
            return p
    return places[-1]


def formula_cell(trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int, value: float,
                 fn: Callable[..., Operand], values: Sequence[float], form: Callable[[list[str]], str], said: str,
                 operands: tuple[Ref, ...], details: tuple[str, ...] = (), plain_sum: bool = False) -> Operation:
    """One cell worked from a few numbers: ``form`` writes the operands' texts into the line, ``fn``
    recomputes the result from them as a calculator would, so the line always checks out."""
    texts, result = fit(fn, [float(v) for v in values], value, d, plain_sum=plain_sum)
    return Operation(index, seg, row, col, value, operands, f"{said} = {form(texts)} = {result}", details)


def sum_cell(trace: TraceContext, index: int, seg: Segment, row: int, col: int, d: int, value: float,
             column: Matrix, said: str, operands: tuple[Ref, ...]) -> Operation:
    """``db_Q[0] = Σ dQ[:,0] = 0.1 + (-0.2) + 0.3 = 0.2``: a bias's gradient, its column summed over the rows."""
    if len(column) > MAX_TERMS:  # too long to write out: the sum alone
        result = trace.formatted(seg.target, seg.head, value, d)
        return Operation(index, seg, row, col, value, operands, f"{said} = {result}")
    return formula_cell(trace, index, seg, row, col, d, value, lambda *xs: sum(xs), list(column),
                        lambda t: " + ".join(t), said, operands, plain_sum=True)
