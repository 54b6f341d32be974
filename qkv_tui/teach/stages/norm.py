"""The Norm stage (pre-norm, after Embed): each cell of X̂, RMSNorm or LayerNorm, checkable on a calculator."""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import Decimal, localcontext
from typing import TYPE_CHECKING

import numpy as np

from qkv_tui.base.fixed import fixed
from qkv_tui.core.engine import Computation
from qkv_tui.core.fmt import BIG, fmt, is_integral, operand
from qkv_tui.core.scenario import Matrix
from qkv_tui.kernels.norm import normalise
from qkv_tui.kernels.policy import statistic_places
from qkv_tui.teach.arith import MAX_TERMS, agrees, elide, hidden_terms, shown
from qkv_tui.teach.arith import tries as _places
from qkv_tui.teach.stages.common import (
    INPUT,
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
)
from qkv_tui.teach.stages.context import TraceContext
from qkv_tui.teach.stages.grads import BackwardSpec, dot_cell, formula_cell, grads, has_backward, kept, sum_cell
from qkv_tui.teach.stages.markdown import MarkdownPage
from qkv_tui.teach.stages.printed import PrintedCells, PrintedChain, Table, idx

if TYPE_CHECKING:  # the cost view's module loads on its first use
    from qkv_tui.core.cost import Count, Phase
    from qkv_tui.core.scenario import Scenario


NORM_MEANING = (
    "Normalise each token's row of X before attention (pre-norm, as LLaMA, Mistral and Qwen do)."
    " RMSNorm divides each cell by the row's root mean square, √(mean(x²) + eps), then multiplies by a"
    " learned gain γ; LayerNorm first subtracts the row's mean, divides by √(variance + eps), then"
    " multiplies by γ and adds β. Every token arrives at the projections at the same scale."
)


class Norm(StageSpec):
    stage = Stage("norm", "Norm", NORM_MEANING)
    matrices = ("X_norm",)

    def runs(self, trace: TraceContext) -> bool:
        return trace.comp.norm is not None

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        sc = trace.comp.scenario
        return [Plan("X_norm", sc.n, sc.X.shape[1])]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        assert trace.comp.norm is not None and col is not None
        token = trace.comp.scenario.labels[row]
        value = float(trace.comp.norm.X_norm[row, col])
        text, details = norm_lines(trace.comp, row, col, token, d, trace.hand)
        return Operation(index, seg, row, col, value, (Ref("X", None, row),), text, details)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        if trace.comp.norm is None:
            raise KeyError(name)
        return trace.comp.norm.X_norm

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        return [("X", None), ("X_norm", None)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("X_norm", None)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        norm = trace.comp.scenario.norm
        return f"X̂ = {norm.kind if norm is not None else ''}norm(X)"

    def formula(self, trace: TraceContext, op: Operation) -> list[FormulaPart]:
        return [FormulaPart(INPUT, "X̂ → ")]

    def lights(self, seg: Segment) -> frozenset[int]:
        return frozenset({INPUT})


    def markdown(self, page: MarkdownPage, head: int | None) -> list[str]:
        norm = page.trace.comp.scenario.norm
        return [f"X̂ = {norm.kind if norm else ''}norm(X):", "", page.table("X_norm", None, "X̂"), "",
                *page.worked(self.stage.key, None)]

    def worksheet_tables(self, chain: PrintedChain, head: int | None) -> list[Table]:
        sc = chain.sc
        norm = sc.norm
        assert norm is not None
        tokens = sc.labels
        dm = sc.X.shape[1]
        out = [Table("gamma", "γ", "γ (the norm's gains)", "embed", None, norm.gamma[None, :], ("γ",), idx(dm), True, False)]
        if norm.beta is not None:
            out.append(Table("beta", "β", "β (the norm's shifts)", "embed", None, norm.beta[None, :], ("β",), idx(dm), True,
                             False))
        cols: tuple[str, ...]
        # the engine's statistics, which stay finite where the squares of 1e154 would not; the variance is
        # about the printed mean, and X̂ is worked from the printed statistics
        normed = normalise(chain.page, norm.kind, sc.X, norm.gamma[None, :],
                           None if norm.beta is None else norm.beta[None, :], norm.eps)
        if norm.kind == "rms":
            stats, cols = normed.spread[:, None], ("ms",)
        else:
            stats, cols = np.column_stack([normed.mean, normed.spread]), ("mean", "var")
        raw = normed.unrounded  # (n, d_model)
        kind = "RMSNorm" if norm.kind == "rms" else "LayerNorm"
        what = "ms = the mean of the row's squares" if norm.kind == "rms" else "mean and var = the row's mean and variance"
        return [
            *out,
            Table("stats", "stats", f"Each token's row of X: {what}", "norm", None, stats, tokens, cols, False, True),
            Table("X_norm", "X̂", f"X̂ = {kind}(X), row by row", "norm", None, normed.X_norm, tokens, idx(dm), False, True,
                  whole=is_integral(raw)),
        ]

    def worksheet_line(self, cells: PrintedCells, table: Table, row: int, col: int, answer: str) -> str:
        return _stats_line(cells, row, col, answer) if table.key == "stats" else _norm_line(cells, row, col, answer)


SPEC = Norm()


@counts(SPEC)
def _cost(sc: Scenario, ph: Phase) -> Count:
    """Per row one root, and d_model + 1 divisions (the mean and each cell; LayerNorm's variance one more)."""
    from qkv_tui.core.cost import B, Count, fig, term

    norm = sc.norm
    assert norm is not None
    d = int(sc.X.shape[1])
    means = 1 if norm.kind == "rms" else 2
    gains = [term("γ", ("d_model", d), B(ph))] + ([term("β", ("d_model", d), B(ph))] if norm.beta is not None else [])
    return Count(SPEC.stage.key, SPEC.stage.name, ph.name,
                 other=fig(term("root", ph.R), term("div", ph.R, (f"d_model + {means}", d + means))),
                 read=fig(term("X", ph.R, ("d_model", d), B(ph)), *gains),
                 written=fig(term("X̂", ph.R, ("d_model", d), B(ph))))


def eps_text(eps: float) -> str:
    """eps as a calculator takes it: ``1e-05``, ``0.5``."""
    return f"{eps:g}"


def norm_lines(comp: Computation, row: int, col: int, token: str, d: int, hand: int | None) -> tuple[str, tuple[str, ...]]:
    """``X̂[I,2] = X[I,2] / √(ms + eps)·γ[2] = 1 / √(0.500 + 1e-05)·1 = 1.414`` and the row's statistics."""
    sc = comp.scenario
    norm = sc.norm
    result_norm = comp.norm
    assert norm is not None and result_norm is not None
    beta = float(norm.beta[col]) if norm.beta is not None else None
    layer = norm.kind == "layer"
    symbolic = (f"X̂[{token},{col}] = (X[{token},{col}] − mean) / √(var + eps)·γ[{col}]" if layer
                else f"X̂[{token},{col}] = X[{token},{col}] / √(ms + eps)·γ[{col}]")
    if beta is not None:
        symbolic += f" + β[{col}]"
    stats = RowStats(float(result_norm.mean[row]), float(result_norm.spread[row]), float(result_norm.root[row]), norm.eps)
    return cell_lines(symbolic, sc.X[row], col, float(result_norm.X_norm[row, col]), float(norm.gamma[col]), beta,
                      stats, layer, token, d, hand)


@fixed
class RowStats:
    """One row's statistics as the norm kept them, and the eps under its root."""

    mean: float
    spread: float  # the mean square (rms) or the variance (layer)
    root: float
    eps: float


def cell_lines(symbolic: str, x_row: Matrix, at: int, value: float, gamma: float, beta: float | None, row: RowStats,
               layer: bool, of: str, d: int, hand: int | None) -> tuple[str, tuple[str, ...]]:
    """One normalised cell, ``symbolic = x / √(ms + eps)·γ = … = result``, with the statistics of the row ``x_row``
    it sits in (at ``at``) as details: ``ms(of) = mean of squares = (…) / n``, ``√(ms + eps) = root``."""
    x_int = bool(np.all(x_row == np.round(x_row)))
    result = fmt(value, False, d)
    eps = eps_text(row.eps)
    g_int = gamma == round(gamma)
    token = of
    lines: tuple[str, tuple[str, ...]] = ("", ())
    first: tuple[str, tuple[str, ...]] | None = None
    # the mean square is rarely whole: it may need guard digits. By hand the numbers worked out (the mean, the
    # spread, the root, the centred cell; RMSNorm's x − 0 too) are as written down, at the hand's places, and
    # only the inputs the hand computation used as given (γ, β, LayerNorm's x) take guard digits, as a
    # projection's weights do: γ = 0.45 is shown 0.45 when 0.5 would not give the result
    # a root that rounds to 0 is kept as it is (kernels/norm.py): shown to as many digits as the line needs
    tiny = hand is not None and hround(row.root, hand) == 0 and row.root != 0
    given = g_int and (beta is None or beta == round(beta)) and (x_int or not layer) and not tiny
    places = list(_places(d, hand is not None and given))
    # a root below ¼ moves more than the spread under it: where no places fit, the spread (and the row it is the
    # mean square of) take more digits than the root, so that √(spread + eps) gives the root as shown
    forms = [(p, 0) for p in places] + ([(p, extra) for extra in (2, 4) for p in places] if hand is None else [])
    for p, extra in forms:
        q = p if hand is None else hand  # the places of what the hand computation wrote down
        xp = p if hand is None or layer else q  # the row's x: RMSNorm's by hand are written down rounded
        xp += extra + 1 if extra else 0
        xs = [fmt(float(x), x_int, xp) for x in x_row]
        mean_t = fmt(row.mean, False, q + extra)
        # by hand a statistic below 0.1 keeps two significant digits (kernels/policy.py statistic_places)
        spread_t = fmt(row.spread, False, q + extra if hand is None else _stat_places(row.spread, hand))
        root_t = (f"{row.root:.{p - 1}e}" if tiny
                  else fmt(row.root, False, q if hand is None else _stat_places(row.root, hand)))
        x_t = operand(float(x_row[at]), x_int, p)
        if hand is not None and not layer:  # by hand the cell is written down rounded, as the hand computation does
            x_t = operand(hround(float(x_row[at]), hand), x_int, q)
        g_t = operand(gamma, g_int, p)
        b_t = f" + {operand(beta, beta == round(beta), p)}" if beta is not None else ""
        centred = f"({x_t} − {paren(mean_t)})" if layer else x_t
        work = f"{centred} / √({spread_t} + {eps})·{g_t}{b_t}"
        steps = [work]
        shift = shown(b_t[3:]) if beta is not None else 0.0
        if hand is not None:  # by hand the centred value and the root are written down first
            # the hand computation's own centred cell, x − mean from x as given (kernels/norm.py)
            c_t = fmt(hround(float(x_row[at]) - row.mean, hand), False, q) if layer else x_t
            steps.append(f"{c_t} / {root_t}·{g_t}{b_t}")
            calc = shown(c_t) / shown(root_t) * shown(g_t) + shift if shown(root_t) else math.nan
            # a difference of numbers at the hand's places is exact on a calculator
            cell_ok = (agrees(shown(x_t) - (shown(mean_t) if layer else 0.0), c_t, exact=p == q)
                       and agrees(math.sqrt(shown(spread_t) + row.eps), root_t))
        else:
            calc = ((shown(x_t) - (shown(mean_t) if layer else 0.0)) / math.sqrt(shown(spread_t) + row.eps)
                    * shown(g_t) + shift)
            cell_ok = True
        if layer:
            m_t, mean_v = paren(mean_t), _number(mean_t)

            def centred_square(v: Decimal, m: Decimal = mean_v) -> Decimal:
                return (v - m) * (v - m)

            terms = _sum_text(xs, paren, lambda v: v, xp)
            mean_line = f"mean({token}) = ({terms}) / {len(x_row)} = {mean_t}"
            def centred_text(t: str, m: str = m_t) -> str:
                return f"({t} − {m})·({t} − {m})"

            squares = _sum_text(xs, centred_text, centred_square, xp)
            spread_line = f"var({token}) = ({squares}) / {len(x_row)} = {spread_t}"
            stats_ok = (agrees(_mean_of(xs, lambda v: v), mean_t) and agrees(_mean_of(xs, centred_square), spread_t))
            stats: tuple[str, ...] = (mean_line, spread_line)
        else:
            squares = _sum_text(xs, lambda t: f"{paren(t)}·{paren(t)}", lambda v: v * v, xp)
            stats = (f"ms({token}) = mean of squares = ({squares}) / {len(x_row)} = {spread_t}",)
            stats_ok = agrees(_mean_of(xs, lambda v: v * v), spread_t)
        root_line = f"√({spread_t} + {eps}) = {root_t}"
        lines = (f"{symbolic} = {' = '.join(steps)} = {result}", (*stats, root_line))
        if stats_ok and cell_ok and agrees(calc, result) and agrees(math.sqrt(shown(spread_t) + row.eps), root_t):
            return lines
        first = first or lines
    # by hand, where no guard digits help (a line a hand rounding broke, not the inputs' digits), the fewest
    return first if hand is not None and first is not None else lines


def _stat_places(x: float, hand: int) -> int:
    return int(statistic_places(np.array(x), hand))


def _number(text: str) -> Decimal:
    """A shown number as a calculator takes it, exactly (``(-0.841)`` → -0.841, ``1.000e+154``)."""
    return Decimal(text.strip("() ").replace("−", "-"))


def _mean_of(texts: list[str], term: Callable[[Decimal], Decimal]) -> float:
    """The mean of ``term`` of the shown numbers, worked as a calculator would: in decimal, so that squares of
    1e154 (past float64, not past a calculator) add up before the mean brings them back in range."""
    with localcontext() as ctx:
        ctx.prec = 60
        return float(sum((term(_number(t)) for t in texts), Decimal(0)) / len(texts))


def _sum_text(texts: list[str], item: Callable[[str], str], value: Callable[[Decimal], Decimal], p: int) -> str:
    """``a + b + …``: each shown number as ``item`` writes it (``x·x``); a sum too long for a line keeps its
    ends, as the Project's sums do, and shows what the hidden terms (``value`` of each) add up to at ``p``
    places, so the line can still be redone: ``0.5·0.5 + … 120 more, Σ = 83.210 … + 1.7·1.7``."""
    hidden = hidden_terms(len(texts))
    total = None
    if hidden:
        with localcontext() as ctx:
            ctx.prec = 60
            total = _decimal_text(sum((value(_number(texts[i])) for i in hidden), Decimal(0)), p)
    return elide([item(t) for t in texts], " + ", total)


def _decimal_text(value: Decimal, p: int) -> str:
    """A decimal written as :func:`fmt` writes a float at ``p`` places (scientific from 1e6 on), any size."""
    text = f"{value:.{p}e}" if abs(value) >= BIG else f"{value:.{p}f}"
    if text.startswith("-") and text.lstrip("-").strip("0.") == "":
        return text.lstrip("-")
    return text.replace("E", "e")


def _stats_line(cells: PrintedCells, i: int, j: int, answer: str) -> str:
    """``ms[I] = (1·1 + 0·0 + 1·1 + 0·0) / 4 = 0.500``, ``mean[I] = …``, ``var[I] = ((1 − 0.500)·(1 − 0.500) + …) / 4``."""
    token = cells.sc.labels[i]
    width = cells.tables["X"].values.shape[1]
    xs = [cells.txt("X", i, c) for c in range(width)]
    column = cells.tables["stats"].cols[j]
    if column == "ms":
        terms = " + ".join(f"{x}·{x}" for x in xs)
        return f"ms[{token}] = (X[{token},0]² + … + X[{token},{width - 1}]²) / {width} = ({terms}) / {width} = {answer}"
    if column == "mean":
        terms = " + ".join(xs)
        return f"mean[{token}] = (X[{token},0] + … + X[{token},{width - 1}]) / {width} = ({terms}) / {width} = {answer}"
    mean = cells.txt("stats", i, 0)
    terms = " + ".join(f"({x} − {mean})·({x} − {mean})" for x in xs)
    first, last = f"(X[{token},0] − mean[{token}])²", f"(X[{token},{width - 1}] − mean[{token}])²"
    return f"var[{token}] = ({first} + … + {last}) / {width} = ({terms}) / {width} = {answer}"


def _norm_line(cells: PrintedCells, i: int, j: int, answer: str) -> str:
    """``X̂[I,2] = X[I,2] / √(ms[I] + eps)·γ[2] = 1 / √(0.500 + 1e-05)·1 = 1.414`` (LayerNorm: centred, + β)."""
    sc = cells.sc
    assert sc.norm is not None
    token = sc.labels[i]
    eps = repr(float(sc.norm.eps))
    x, gamma = cells.txt("X", i, j), cells.txt("gamma", 0, j)
    beta = f" + {cells.txt('beta', 0, j)}" if "beta" in cells.tables else ""
    beta_sym = f" + β[{j}]" if beta else ""
    if sc.norm.kind == "rms":
        ms = cells.txt("stats", i, 0)
        return (f"X̂[{token},{j}] = X[{token},{j}] / √(ms[{token}] + eps)·γ[{j}]{beta_sym}"
                f" = {x} / √({ms} + {eps})·{gamma}{beta} = {answer}")
    mean, var = cells.txt("stats", i, 0), cells.txt("stats", i, 1)
    return (f"X̂[{token},{j}] = (X[{token},{j}] − mean[{token}]) / √(var[{token}] + eps)·γ[{j}]{beta_sym}"
            f" = ({x} − {mean}) / √({var} + {eps})·{gamma}{beta} = {answer}")


# --- the backward pass: RMSNorm and LayerNorm read backwards (kernels/norm_backward.py) -------------------------


def back_stat_cell(trace: TraceContext, index: int, seg: Segment, row: int, d: int, value: float, terms: list[float],
                   width: int, said: str, refs: tuple[Ref, ...], triple: bool = True) -> Operation:
    """A row's mean the norm's gradient subtracts: ``m[t] = (γ·dy·x̂ + …) / d`` (``triple``), or ``ḡ = (γ·dy + …) / d``."""
    if width > MAX_TERMS:
        return Operation(index, seg, row, 0, value, refs, f"{said} = {trace.formatted(seg.target, seg.head, value, d)}")
    step = 3 if triple else 2

    def fn(*v: float) -> float:
        return sum(math.prod(v[i:i + step]) for i in range(0, len(v), step)) / width

    def form(t: list[str]) -> str:
        return "(" + " + ".join("·".join(t[i:i + step]) for i in range(0, len(t), step)) + f") / {width}"

    return formula_cell(trace, index, seg, row, 0, d, value, fn, terms, form, said, refs)


def back_cell(trace: TraceContext, index: int, seg: Segment, row: int, col: int, d: int, value: float,
              operands: list[float], layer: bool, said: str, refs: tuple[Ref, ...]) -> Operation:
    """``dx = (γ·dy − ḡ − x̂·m) / root`` for one cell (RMSNorm has no ḡ); ``operands``: γ, dy, [ḡ,] x̂, m, root."""
    if layer:
        return formula_cell(trace, index, seg, row, col, d, value, lambda g, y, gb, x, m, r: (g * y - gb - x * m) / r,
                            operands, lambda t: f"({t[0]}·{t[1]} − {t[2]} − {t[3]}·{t[4]}) / {t[5]}", said, refs)
    return formula_cell(trace, index, seg, row, col, d, value, lambda g, y, x, m, r: (g * y - x * m) / r,
                        operands, lambda t: f"({t[0]}·{t[1]} − {t[2]}·{t[3]}) / {t[4]}", said, refs)


class NormBack(BackwardSpec):
    """The pre-norm read backwards: from dX̂ to dX, dγ and dβ."""

    stage = Stage("dnorm", "dNorm",
                  "Back through the norm. Every x̂ of a row was divided by the row's root, which every x of the row"
                  " fed, so a cell's gradient is its own share, γ·dX̂, less what the row's statistics pass back:"
                  " dX = (γ·dX̂ − x̂·m) / root, with m = mean(γ·dX̂·x̂) worked once per row (LayerNorm also subtracts"
                  " ḡ = mean(γ·dX̂), the mean it took out). The gains meet every row: dγ = Σ rows of dX̂·x̂.")
    matrices = ("dX_m", "dX_g", "dX", "dgamma", "dbeta")

    def runs(self, trace: TraceContext) -> bool:
        return has_backward(trace) and trace.comp.norm is not None

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        sc = trace.comp.scenario
        assert sc.norm is not None
        n, width = sc.X.shape
        plans = [Plan("dX_m", n, 1)]
        if sc.norm.kind == "layer":
            plans.append(Plan("dX_g", n, 1))
        plans += [Plan("dX", n, width), Plan("dgamma", 1, width)]
        return plans + ([Plan("dbeta", 1, width)] if sc.norm.beta is not None else [])

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        comp, g = trace.comp, grads(trace)
        sc, normed = comp.scenario, comp.norm
        assert sc.norm is not None and normed is not None and col is not None
        gamma, dy = sc.norm.gamma, g.dX_norm
        xhat = kept(trace, (sc.X - normed.mean[:, None]) / normed.root[:, None])  # (n, d_model)
        width = sc.X.shape[1]
        q = sc.labels[row]
        stats = tuple(kept(trace, v) for v in _back_stats(gamma, dy, xhat))  # (n,) m, ḡ
        if seg.target == "dX_m":
            terms = [v for c in range(width) for v in (float(gamma[c]), float(dy[row, c]), float(xhat[row, c]))]
            return back_stat_cell(trace, index, seg, row, d, float(stats[0][row]), terms, width,
                                  f"m[{q}] = mean(γ·dX̂[{q}]·x̂[{q}])", (Ref("dX_in", None, row),))
        if seg.target == "dX_g":
            terms = [v for c in range(width) for v in (float(gamma[c]), float(dy[row, c]))]
            return back_stat_cell(trace, index, seg, row, d, float(stats[1][row]), terms, width,
                                  f"ḡ[{q}] = mean(γ·dX̂[{q}])", (Ref("dX_in", None, row),), triple=False)
        if seg.target == "dX":
            layer = sc.norm.kind == "layer"
            ops = [float(gamma[col]), float(dy[row, col])]
            ops += [float(stats[1][row])] if layer else []
            ops += [float(xhat[row, col]), float(stats[0][row]), float(normed.root[row])]
            said = (f"dX[{q},{col}] = (γ[{col}]·dX̂[{q},{col}]" + (f" − ḡ[{q}]" if layer else "")
                    + f" − x̂[{q},{col}]·m[{q}]) / root[{q}]")
            return back_cell(trace, index, seg, row, col, d, float(g.dX[row, col]), ops, layer, said,
                             (Ref("dX_in", None, row, col), Ref("dX_m", None, row)))
        if seg.target == "dgamma":
            assert g.dgamma is not None
            return dot_cell(trace, index, seg, row, col, d, float(g.dgamma[col]), dy[:, col], xhat[:, col], False, False,
                            f"dγ[{col}] = dX̂[:,{col}]·x̂[:,{col}]", (Ref("dX_in", None, None, col),))
        assert g.dbeta is not None
        return sum_cell(trace, index, seg, row, col, d, float(g.dbeta[col]), dy[:, col], f"dβ[{col}] = Σ dX̂[:,{col}]",
                        (Ref("dX_in", None, None, col),))

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        comp = trace.comp
        if not has_backward(trace) or comp.norm is None or comp.scenario.norm is None:
            raise KeyError(name)
        g = grads(trace)
        if name in ("dX_m", "dX_g"):
            xhat = kept(trace, (comp.scenario.X - comp.norm.mean[:, None]) / comp.norm.root[:, None])
            m, gbar = (kept(trace, v) for v in _back_stats(comp.scenario.norm.gamma, g.dX_norm, xhat))
            return (m if name == "dX_m" else gbar)[:, None]
        if name == "dX":
            return g.dX
        value = g.dgamma if name == "dgamma" else g.dbeta
        if value is None:
            raise KeyError(name)
        return value[None, :]

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        target = op.segment.target
        if target in ("dX_m", "dX_g"):
            return [("dX_in", None), ("X", None), (target, None)]
        if target == "dX":
            return [("dX_in", None), ("dX_m", None), ("dX", None)]
        return [("dX_in", None), ("X_norm", None), (target, None)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("dX", None)] if self.runs(trace) else []

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        return {"dX_m": "m = mean(γ·dX̂·x̂)", "dX_g": "ḡ = mean(γ·dX̂)", "dX": "dX (through the norm)",
                "dgamma": "dγ = Σ dX̂·x̂", "dbeta": "dβ = Σ dX̂"}[name]


def _back_stats(gamma: Matrix, dy: Matrix, xhat: Matrix) -> tuple[Matrix, Matrix]:
    """Each row's m = mean(γ·dy·x̂) and ḡ = mean(γ·dy): (n,) each (kernels/norm_backward.py)."""
    from qkv_tui.kernels.norm_backward import row_means  # the backward kernels load with a backward pass

    return row_means(gamma, dy, xhat)


BACKWARD = NormBack()
