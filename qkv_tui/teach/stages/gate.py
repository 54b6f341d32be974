"""Stage Gate (where the heads have an output gate): g = σ(X̂·W_G), then gated = out ⊙ g, cell by cell."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from qkv_tui.core.fmt import fmt, operand
from qkv_tui.core.scenario import Matrix
from qkv_tui.teach.arith import agrees, dot_line, first_fit, shown, tries
from qkv_tui.teach.stages import loaded
from qkv_tui.teach.stages.common import (
    GATE_SLOT,
    FormulaPart,
    Key,
    Operation,
    Plan,
    Ref,
    Segment,
    Stage,
    StageSpec,
    counts,
    hround,
    paren,
    x_in,
)
from qkv_tui.teach.stages.context import TraceContext
from qkv_tui.teach.stages.grads import BackwardSpec, dot_cell, formula_cell, grads, has_backward
from qkv_tui.teach.stages.markdown import MarkdownPage
from qkv_tui.teach.stages.printed import PrintedCells, PrintedChain, Table, exact, idx

if TYPE_CHECKING:  # the cost view's module loads on its first use
    from qkv_tui.core.cell_edit import InputCell
    from qkv_tui.core.cost import Count, Phase
    from qkv_tui.core.gradients import HeadGrad
    from qkv_tui.core.scenario import Scenario
    from qkv_tui.kernels import gate_backward


def _back(hg: HeadGrad) -> gate_backward.GateBack | None:
    """The head's gate read backwards, None where it has no gate."""
    from qkv_tui.kernels import gate_backward  # with the head's gradients

    return hg.part(gate_backward.GateBack)


WHY = ("Qiu et al. (2025) give the gate two benefits. First, a non-linearity between W_V and W_O: without it the"
       " Values and W_O are two linear maps with only the attention weights between them, together one low-rank"
       " linear map, and σ(X̂·W_G), computed from the query token, puts an input-dependent factor between them."
       " Second, sparsity: a gate near 0 lets a head output nothing for a token, so it need not dump weight on a"
       " sink to stay quiet; they found the gate mitigates attention sinks and massive activations.")


class Gate(StageSpec):
    stage = Stage("gate", "Gate",
                  "Scale each head's output cell by cell by a gate between 0 and 1 that the token computes from"
                  " X̂: g = σ(X̂·W_G) = 1 / (1 + e^−(X̂·W_G)), then gated = out ⊙ g. " + WHY)
    per_head = True
    matrices = ("W_G", "gate", "gated")

    def runs(self, trace: TraceContext) -> bool:
        return any(loaded.gated(h) is not None for h in trace.comp.heads)

    def made_from(self, trace: TraceContext, name: str, head: int | None) -> list[Key] | None:
        return [] if name == "W_G" else None  # the gate's weights, as given

    def edit_cell(self, trace: TraceContext, op: Operation) -> InputCell | None:
        """g's own input: its weights' column (gated's cells open on what their operands are, as any stage's)."""
        if op.segment.target != "gate" or op.head is None:
            return None
        from qkv_tui.core.cell_edit import InputCell

        return InputCell("W_G", op.head, 0, op.col or 0)

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        assert head is not None
        n, d_v = trace.comp.scenario.n, trace.comp.heads[head].d_v
        return [Plan("gate", n, d_v), Plan("gated", n, d_v)]

    def meaning(self, trace: TraceContext, head: int | None) -> str:
        text = self.stage.meaning
        if trace.comp.norm is None:
            text = text.replace("X̂", "X")
        return text + " Concat joins the gated outputs."

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        if seg.target == "gate":
            return _gate_op(trace, index, seg, row, col, d)
        hr = trace.comp.heads[h]
        assert loaded.gated(hr) is not None
        q = trace.comp.scenario.labels[row]
        value = float(loaded.need_gated(hr).gated[row, col])
        out, g = float(hr.output[row, col]), float(loaded.need_gated(hr).gate[row, col])
        result = trace.formatted("gated", h, value, d)

        def attempt(p: int) -> tuple[tuple[str, str], bool]:
            """The operands as the panes write them (0.000, not 0), with guard digits where the product needs them."""
            texts = operand(out, False, p), operand(g, False, p)
            return texts, agrees(shown(texts[0]) * shown(texts[1]), result)

        at, gt = first_fit(tries(d, False), attempt)
        text = f"gated[{q},{col}] = out[{q},{col}]·g[{q},{col}] = {at}·{gt} = {result}"
        return Operation(index, seg, row, col, value, (Ref("output", h, row, col), Ref("gate", h, row, col)), text)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        if head is None:
            raise KeyError(name)
        hr = trace.comp.heads[head]
        gated = loaded.gated(hr)
        if gated is None or name not in ("W_G", "gate", "gated"):
            raise KeyError(name)
        found: Matrix = getattr(gated, name)
        return found

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        h = op.head
        if op.segment.target == "gate":
            return [(x_in(trace)[0], None), ("W_G", h), ("gate", h)]
        return [("output", h), ("gate", h), ("gated", h)]  # the gate beside the output it scales

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("gate", head), ("gated", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        if name == "W_G":
            return "W_G"
        if name == "gate":
            return f"g = σ({x_in(trace)[1]}·W_G)"
        return "gated = out ⊙ g"

    def formula(self, trace: TraceContext, op: Operation) -> list[FormulaPart]:
        return [FormulaPart(GATE_SLOT, f" ⊙ σ({x_in(trace)[1]}·W_G)")]

    def lights(self, seg: Segment) -> frozenset[int]:
        return frozenset({GATE_SLOT})

    def withheld(self, trace: TraceContext, op: Operation, decimals: int) -> str | None:
        """The gate's dot product and the sigmoid's form, not the worked logit, exponential and sum."""
        if op.segment.target != "gate":
            return None
        target, symbolic, products = op.arithmetic.split(" = ")[:3]
        return f"{target} = {symbolic} = {products} = 1 / (1 + e^−z) = ?"

    def markdown(self, page: MarkdownPage, head: int | None) -> list[str]:
        """W_G (an input the other stages do not show), the gate, the gated output, then the worked lines."""
        return [page.table("W_G", head), "", page.table("gate", head, "g"), "", page.table("gated", head), "",
                *page.worked(self.stage.key, head)]

    def worksheet_tables(self, chain: PrintedChain, head: int | None) -> list[Table]:
        assert head is not None
        sc, hr = chain.sc, chain.sc.heads[head]
        assert hr.W_G is not None
        x_key = "X_norm" if "X_norm" in chain.printed else "X"
        x_values = chain.values(x_key) if x_key in chain.printed else sc.X
        from qkv_tui.kernels.gate import gate as gate_of  # where used: only a gated head's page gets here

        # (n, d_v) from the printed X̂ and output
        g = gate_of(x_values, hr.W_G, chain.values(f"output.{head}"), chain.page)
        cols = idx(hr.d_v)
        return [
            Table(f"W_G.{head}", "W_G", "W_G", "gate", head, hr.W_G, idx(hr.W_G.shape[0]), cols, True, False),
            Table(f"gate.{head}", "g", f"g = σ({'X̂' if x_key == 'X_norm' else 'X'}·W_G)", "gate", head, g.gate,
                  sc.labels, cols, False, True),
            Table(f"gated.{head}", "gated", "gated = output ⊙ g", "gate", head, g.gated, sc.labels, cols, False, True),
        ]

    def worksheet_line(self, cells: PrintedCells, table: Table, row: int, col: int, answer: str) -> str:
        h = table.head
        assert h is not None
        q = cells.sc.labels[row]
        if table.key.startswith("gated."):
            return (f"gated[{q},{col}] = output[{q},{col}]·g[{q},{col}]"
                    f" = {cells.txt(f'output.{h}', row, col)}·{cells.txt(f'gate.{h}', row, col)} = {answer}")
        x_key = "X_norm" if "X_norm" in cells.tables else "X"
        W_G = cells.sc.heads[h].W_G
        assert W_G is not None
        x = cells.tables[x_key]
        z = float(np.dot(x.values[row], W_G[:, col]))
        terms = " + ".join(f"{cells.txt(x_key, row, c)}·{paren(exact(float(W_G[c, col])))}" for c in range(W_G.shape[0]))
        extra = cells.d + 1  # one more decimal than the page for z and e^−z, so the quotient lands on the answer
        zt = fmt(z, z.is_integer(), extra)  # a whole logit (whole inputs) is written bare
        return (f"g[{q},{col}] = σ({x.name}[{q}]·W_G[:,{col}]) = σ({terms}) = σ({zt})"
                f" = 1 / (1 + e^{_negated(zt)}) = {answer}")


SPEC = Gate()


@counts(SPEC)
def _cost(sc: Scenario, ph: Phase) -> Count:
    """g = σ(X̂·W_G) for each gated head (σ: an exponential and a division per cell), then out ⊙ g."""
    from qkv_tui.core.cost import B, Count, fig, term

    d = ("d_model", int(sc.X.shape[1]))
    gated = sum(head.d_v for head in sc.heads if head.W_G is not None)
    x = "X" if sc.norm is None else "X̂"
    g = ("Σ gated d_v", gated)
    return Count(SPEC.stage.key, SPEC.stage.name, ph.name, matmul=fig(term("X·W_G", ("2", 2), ph.R, d, g)),
                 other=fig(term("exp", ph.R, g), term("div", ph.R, g)),
                 read=fig(term(x, ph.R, d, B(ph)), term("W_G", d, g, B(ph)), term("out", ph.R, g, B(ph))),
                 written=fig(term("gated", ph.R, g, B(ph))))


def _negated(text: str) -> str:
    """−z as a calculator reads it after e^: ``e^-0.5`` for z = 0.5, ``e^0.5`` for z = -0.5."""
    if text.startswith("-"):
        return text[1:]
    return text if shown(text) == 0 else f"-{text}"


def _gate_op(trace: TraceContext, index: int, seg: Segment, row: int, col: int, d: int) -> Operation:
    """``g[the,0] = σ(X[the]·W_G[:,0]) = σ(1·(-2) + 0·2) = σ(-2) = 1 / (1 + e^2) = 1 / 8.389 = 0.119``: the logit
    at the digits that make every step re-compute, e^−z written down (by hand, rounded), then the quotient."""
    h = seg.head
    assert h is not None
    comp = trace.comp
    hr = comp.heads[h]
    assert loaded.gated(hr) is not None
    src, xs = x_in(trace)
    q = comp.scenario.labels[row]
    z, value = float(loaded.need_gated(hr).logit[row, col]), float(loaded.need_gated(hr).gate[row, col])
    result = trace.formatted("gate", h, value, d)
    X = comp.X_in
    x_int, w_int = trace.integral(src, None), trace.integral("W_G", h)
    z_int = x_int and w_int and z == round(z)  # whole inputs make a whole logit: written bare, as Q is

    def attempt(p: int) -> tuple[tuple[str, str | None, str | None], bool]:
        zt = fmt(z, z_int, p)
        zv = shown(zt)
        if -zv > 700:  # e^−z past float64: the gate is shut, 0 at any decimals
            return (zt, None, None), True
        e = math.exp(-zv) if trace.hand is None else hround(math.exp(-z), trace.hand)
        et = fmt(e, False, p)
        dt = fmt(1.0 + shown(et), False, p)
        ok = agrees(1.0 / (1.0 + math.exp(-zv)), result) and agrees(1.0 / shown(dt), result) and shown(dt) > 0
        return (zt, et, dt), ok

    zt, et, dt = first_fit(tries(d, False), attempt)
    dot_at = max(d, len(zt.partition(".")[2]))
    work = dot_line(X[row], loaded.need_gated(hr).W_G[:, col], x_int, w_int, zt, dot_at, trace.hand)
    sides = [f"σ({side})" for side in work.split(" = ")]
    head_text = f"g[{q},{col}] = σ({xs}[{q}]·W_G[:,{col}]) = {' = '.join(sides)}"
    details: tuple[str, ...] = ()
    if et is None or dt is None:
        text = f"{head_text} = {result}"
        details = (f"e^{_negated(zt)} is past float64: the gate is shut",)
    else:
        neg = _negated(zt)
        text = f"{head_text} = 1 / (1 + e^{neg}) = 1 / {dt} = {result}"
        details = (f"e^{neg} = {et}; 1 + {et} = {dt}",)
    operands = (Ref(src, None, row, None), Ref("W_G", h, None, col))
    return Operation(index, seg, row, col, value, operands, text, details)


class GateBack(BackwardSpec):
    """The output gate read backwards: gated = out ⊙ σ(z), z = X̂·W_G."""

    stage = Stage("dgate", "dGate",
                  "Back through the gate. gated = out·g, so the head's own output gets dO = dJ·g (dJ: what reached the"
                  " gated output from Concat): a nearly closed gate lets almost no gradient through to the attention"
                  " below it. The gate gets dJ·out, and through the sigmoid, whose slope is g·(1 − g),"
                  " dz = dJ·out·g·(1 − g); its weights met X̂ in every row: dW_G = X̂ᵀ·dz.")
    per_head = True
    matrices = ("dJ", "dO_g", "dz", "dW_G")

    def runs(self, trace: TraceContext) -> bool:
        return has_backward(trace) and any(loaded.gated(h) is not None for h in trace.comp.heads)

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        assert head is not None
        sc, hr = trace.comp.scenario, trace.comp.heads[head]
        assert loaded.gated(hr) is not None
        return [Plan("dO_g", sc.n, hr.d_v), Plan("dz", sc.n, hr.d_v), Plan("dW_G", *loaded.need_gated(hr).W_G.shape)]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        comp = trace.comp
        hr, hg = comp.heads[h], grads(trace).heads[h]
        gb = _back(hg)
        assert gb is not None and loaded.gated(hr) is not None
        dJ = _dJ(trace, h)
        if seg.target == "dW_G":
            x_name, x_label = x_in(trace)
            return dot_cell(trace, index, seg, row, col, d, float(gb.dW_G[row, col]), comp.X_in[:, row],
                            gb.d_logit[:, col], trace.integral(x_name, None), False,
                            f"dW_G[{row},{col}] = {x_label}[:,{row}]·dz[:,{col}]",
                            (Ref(x_name, None, None, row), Ref("dz", h, None, col)))
        q = comp.scenario.labels[row]
        j, g, out = float(dJ[row, col]), float(loaded.need_gated(hr).gate[row, col]), float(hr.output[row, col])
        if seg.target == "dO_g":
            return formula_cell(trace, index, seg, row, col, d, float(gb.d_output[row, col]), lambda a, b: a * b,
                                [j, g], lambda t: f"{t[0]}·{t[1]}", f"dO[{q},{col}] = dJ[{q},{col}]·g[{q},{col}]",
                                (Ref("dJ", h, row, col), Ref("gate", h, row, col)))
        return formula_cell(trace, index, seg, row, col, d, float(gb.d_logit[row, col]),
                            lambda a, o, s, s2: a * o * s * (1 - s2), [j, out, g, g],
                            lambda t: f"{t[0]}·{t[1]}·{t[2]}·(1 − {t[3]})",
                            f"dz[{q},{col}] = dJ[{q},{col}]·out[{q},{col}]·g·(1 − g)",
                            (Ref("dJ", h, row, col), Ref("output", h, row, col), Ref("gate", h, row, col)))

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        if head is None or not has_backward(trace):
            raise KeyError(name)
        gb = _back(grads(trace).heads[head])
        if name == "dJ":
            return _dJ(trace, head)
        if gb is None:
            raise KeyError(name)
        return {"dO_g": gb.d_output, "dz": gb.d_logit, "dW_G": gb.dW_G}[name]

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        h = op.head
        if op.segment.target == "dO_g":
            return [("dJ", h), ("gate", h), ("dO_g", h)]
        if op.segment.target == "dz":
            return [("dJ", h), ("output", h), ("gate", h), ("dz", h)]
        return [(x_in(trace)[0], None), ("dz", h), ("dW_G", h)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        return {"dJ": "dJ (at gated)", "dO_g": "dO = dJ⊙g", "dz": "dz = dJ⊙out⊙g(1−g)", "dW_G": "dW_G = X̂ᵀ·dz"}[name]


def _dJ(trace: TraceContext, head: int) -> Matrix:
    """The gradient at a head's gated output: its columns of d_concat."""
    start = sum(h.d_v for h in trace.comp.heads[:head])
    d_concat = grads(trace).d_concat
    out: Matrix = d_concat[:, start:start + trace.comp.heads[head].d_v]
    return out


BACKWARD = GateBack()
