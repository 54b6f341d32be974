"""The AdamW step that ends a backward worksheet where [backward] optimizer = "adamw": each trained weight moved once,
as the Train view's first step moves it (core/training.py's AdamW, torch.optim.AdamW's update).

At the first step m and v start at 0 and t = 1: m = (1 − β₁)·g, v = (1 − β₂)·g·g, m̂ = m/(1 − β₁), v̂ = v/(1 − β₂),
and new w = w − lr·(m̂/(√v̂ + ε) + wd·w). The page's new weights are core's AdamW run on the weight as given and
its gradient as printed, rounded once (the printed-page policy of :mod:`qkv_tui.edges.worksheet.chain`). The weights
are the SGD step's (edges/worksheet/sgd.py finds each weight's gradient on the page); the section keeps that step's
key, so ``--stages`` and the blanks treat it as the step that ends the sheet, under its own name. A key line shows m,
v, m̂ and v̂ of its cell exactly, as decimals (each a product or quotient of printed numbers), in one chain whose
every side gives the answer.
"""

from __future__ import annotations

from decimal import Decimal

import numpy as np

from qkv_tui.core.engine import Computation
from qkv_tui.core.training import AdamW
from qkv_tui.edges.faces import faces
from qkv_tui.edges.worksheet import sgd
from qkv_tui.kernels.policy import round_to
from qkv_tui.teach.stages.common import Stage, StageSpec
from qkv_tui.teach.stages.printed import PrintedCells, Table, exact

STAGE = Stage(sgd.STAGE.key, "AdamW step",
              "one step of AdamW: every trained weight moves by about lr, in the direction against its gradient")


def applies(comp: Computation) -> bool:
    bw = comp.scenario.backward
    return bw is not None and bw.adamw


def unmoved(comp: Computation) -> list[str]:
    """The [backward] train names whose step the page leaves to the Train view: a sink's logit, a part's own vectors
    (differential attention's λ), whose modules write their step as SGD's only."""
    bw = comp.scenario.backward
    assert bw is not None
    movable = {*sgd.PER_HEAD, *sgd.SHARED, *(name for f in faces() for name, _ in (*f.sgd_head, *f.sgd_layer))}
    return [name for name in bw.train if name not in movable]


def adamw_tables(tables: list[Table], comp: Computation, d: int) -> list[Table]:
    """The AdamW step's tables, after every other table of the page, for the weights the SGD step would move."""
    bw = comp.scenario.backward
    assert bw is not None
    adam = AdamW(bw.lr, bw.betas, bw.eps, bw.weight_decay)
    adam.begin()  # t = 1: the Train view's first step

    def move(w: Table, g: Table, head: int | None) -> Table | None:
        with np.errstate(over="ignore", invalid="ignore"):
            new = round_to(adam((w.key, head), w.values, g.values), d)  # the printed operands, rounded once
        if not np.isfinite(new).all():  # past float64: a step the page cannot print (the Train view says why)
            return None
        heading = f"new {w.name}: AdamW, g = {g.name}"  # its rule line has the formula
        return Table(f"sgd.{w.key}", f"new {w.name}", heading, STAGE.key, head, np.asarray(new, dtype=float),
                     w.rows, w.cols, False, True)

    return sgd.sgd_tables(tables, comp, d, move)


def _dec(text: str) -> Decimal:
    return Decimal(text.strip("()"))


def _text(x: Decimal) -> str:
    """A decimal as written: ``0.0000036``, ``-0.06``, ``0``."""
    out = format(x.normalize(), "f")
    return "0" if out in ("-0", "0") else out


def _op(text: str) -> str:
    return f"({text})" if text.startswith("-") else text


class AdamwSheet(StageSpec):
    """The AdamW step's rule and answer-key lines (not a stage of the trace: the Train view is where it runs)."""

    stage = STAGE

    def worksheet_rules(self, comp: Computation) -> list[str]:
        bw = comp.scenario.backward
        if bw is None:
            return []
        b1, b2 = (exact(float(b)) for b in bw.betas)
        return [f"- AdamW step (the Train view's first: t = 1, m = v = 0 before): m = (1 − β₁)·g, v = (1 − β₂)·g·g,"
                f" m̂ = m / (1 − β₁), v̂ = v / (1 − β₂), new w = w − lr·(m̂/(√v̂ + ε) + wd·w); lr = {exact(float(bw.lr))},"
                f" β₁ = {b1}, β₂ = {b2}, ε = {exact(float(bw.eps))}, wd = {exact(float(bw.weight_decay))}.",
                *([f"  Not on this page: the step of {', '.join(left)} (the Train view takes it)."]
                  if (left := unmoved(comp)) else [])]

    def worksheet_line(self, cells: PrintedCells, table: Table, row: int, col: int, answer: str) -> str:
        bw = cells.sc.backward
        assert bw is not None
        weight, grad, _ = sgd.operands(table, cells.tables)
        where = f"[{col}]" if len(table.rows) == 1 else f"[{row},{col}]"
        w, g = cells.txt(weight, row, col), _dec(cells.txt(grad, row, col))
        one_b1, one_b2 = 1 - Decimal(exact(float(bw.betas[0]))), 1 - Decimal(exact(float(bw.betas[1])))
        m, v = one_b1 * g, one_b2 * g * g
        lr, eps, wd = (exact(float(x)) for x in (bw.lr, bw.eps, bw.weight_decay))
        # one chain whose every side is the answer: m and v worked from g, then m̂ and v̂ (exact: g and g·g at t = 1)
        raw = f"{_op(_text(m))} / {_text(one_b1)} / (√({_text(v)} / {_text(one_b2)}) + {eps})"
        hat = f"{_op(_text(m / one_b1))} / (√({_text(v / one_b2)}) + {eps})"
        return (f"{table.name}{where} = w − lr·(m / (1 − β₁) / (√(v / (1 − β₂)) + ε) + wd·w) = {w} − {lr}·({raw} +"
                f" {wd}·{w}) = w − lr·(m̂ / (√v̂ + ε) + wd·w) = {w} − {lr}·({hat} + {wd}·{w}) = {answer}")


SHEET = AdamwSheet()
