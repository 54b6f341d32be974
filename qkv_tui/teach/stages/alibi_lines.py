"""ALiBi's lines in the Scale stage: the bias slope·(j − i) worked into a scaled cell, its pane's title, its Markdown
and its worksheet slopes. The stage reaches this module through the head's record (kernels/alibi.py Biased, its
``faces["scale"]``), so the Scale stage names no ALiBi."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from qkv_tui.core.engine import HeadResult
from qkv_tui.core.fmt import fmt, operand
from qkv_tui.core.scenario import Matrix
from qkv_tui.core.variants.alibi import TABLE as ALIBI
from qkv_tui.kernels.alibi import Biased, alibi_bias
from qkv_tui.kernels.policy import round_to
from qkv_tui.teach.arith import SIGNIFICANT, agrees, shown, significant
from qkv_tui.teach.arith import tries as _places
from qkv_tui.teach.stages.printed import PrintedCells, PrintedChain, Table, exact

if TYPE_CHECKING:
    from qkv_tui.teach.stages.markdown import MarkdownPage

MEANING = (" ALiBi then adds slope·(j − i) to each scaled cell (after the division, as BLOOM's code does):"
           " 0 on the diagonal and more negative the further back the key, so nearer keys are favoured;"
           " the bias pane shows it, and the softmax takes the sum.")


def scaled_line(head: HeadResult, row: int, col: int, positions: tuple[int, ...], score_int: bool, symbol: str | None,
                d: int, hand: int | None) -> tuple[str, tuple[str, ...]]:
    """A scaled cell's work with the bias added (:func:`alibi_line`), and the line that says where the term is from."""
    work, term, bias_t = alibi_line(head, row, col, positions, score_int, symbol, d, hand)
    return work, (f"ALiBi: {head.name}'s slope {head.need(Biased).slope or 0:g} times the distance"
                  f" j − i; bias = {term} = {bias_t}",)


def title(hr: HeadResult | None) -> str:
    return f"bias = {hr.need(Biased).slope if hr is not None and hr.part(Biased) is not None else 0:g}·(j − i)"


def markdown(page: MarkdownPage, hr: HeadResult, head: int, *, after_step: bool) -> list[str]:
    """The bias table and what it is, before the scaled table (or after the cap's, under a soft-cap)."""
    if after_step:
        return [f"ALiBi bias, slope {hr.need(Biased).slope:g} · (j − i), added after the cap:", "",
                page.table("bias", head), ""]
    return [f"ALiBi bias, slope {hr.need(Biased).slope:g} · (j − i):", "", page.table("bias", head), "",
            "scaled + bias (the softmax's input):", ""]


def printed_terms(chain: PrintedChain, h: int) -> tuple[Matrix, str]:
    """(n, n) slope·(j − i) from the printed slope, and how a table's title writes it."""
    sc = chain.sc
    assert sc.positions is not None
    return alibi_bias(_printed_slopes(chain)[h], sc.positions), " + slope·(j − i)"


def capped_term(hr: HeadResult, positions: tuple[int, ...], row: int, col: int) -> tuple[tuple[float, float, str], str]:
    """The bias added after a soft-cap (teach/stages/soft_cap.py capped_line: its value, its value redone from the
    slope and distance its text shows, its text), and the line that says where it is from, up to its value."""
    slope = float(hr.need(Biased).slope or 0.0)
    distance = positions[col] - positions[row]
    value = float(hr.need(Biased).bias[row, col])
    slope_t = exact(slope)
    term = f"{f'({slope_t})' if slope < 0 else slope_t}·({positions[col]} − {positions[row]})"
    return ((value, slope * distance, term),
            f"ALiBi: {hr.name}'s slope {slope:g} times the distance j − i, added after the cap; bias = {term}")


def printed_capped_term(cells: PrintedCells, h: int, row: int, col: int) -> tuple[tuple[float, float, str], str] | None:
    """The bias after a printed capped cell from the printed slope, and how the line's left side writes it; None
    where the page printed no slopes."""
    if "slopes" not in cells.tables:
        return None
    sc = cells.sc
    assert sc.positions is not None
    slope_t = cells.txt("slopes", 0, h)
    pi, pj = sc.positions[row], sc.positions[col]
    term = f"{f'({slope_t})' if slope_t.startswith('-') else slope_t}·({pj} − {pi})"
    slope = shown(slope_t)
    return (slope * (pj - pi), slope * (pj - pi), term), " + slope·(j − i)"


def worksheet_line(cells: PrintedCells, h: int, row: int, col: int, score: str, divisor: str,
                   answer: str) -> str | None:
    """A printed scaled cell with the bias worked from the printed slope; None where the page printed no slopes."""
    if "slopes" not in cells.tables:
        return None
    sc = cells.sc
    assert sc.positions is not None
    q, k = sc.labels[row], sc.key_labels[col]
    slope = cells.txt("slopes", 0, h)
    pi, pj = sc.positions[row], sc.positions[col]
    return (f"scaled[{q},{k}] = scores[{q},{k}] / {divisor} + slope·(j − i)"
            f" = {score} / {divisor} + {slope}·({pj} − {pi}) = {answer}")


def alibi_line(head: HeadResult, row: int, col: int, positions: tuple[int, ...], score_int: bool, symbol: str | None,
               d: int, hand: int | None) -> tuple[str, str, str]:
    """``4 / √3 + 0.25·(1 − 2) = 2.309 + (-0.250) = 2.059``, the bias term alone and its value, one precision for all."""
    assert head.part(Biased) is not None
    slope = head.need(Biased).slope
    slope_int = slope == round(slope)
    distance = positions[col] - positions[row]
    score = float(head.scores[row, col])
    scaled, bias = float(head.scaled[row, col]), float(head.need(Biased).bias[row, col])
    result = fmt(scaled + bias, False, d)
    div_int = head.scale == round(head.scale)
    line, term, bias_t = "", "", ""
    # as in quotient_line: fixed decimals first, then the quotient's operands in scientific notation (a tiny
    # scale reads 0.000 at fixed decimals; a calculator needs its significant digits)
    # (by hand the first form that can be divided by is the one written down)
    forms = [(p, False) for p in _places(d, hand is not None)] + [(p, True) for p in range(d, SIGNIFICANT)]
    for p, scientific in forms:
        num_t = significant(score, score_int, p, scientific)
        div_t = symbol if symbol is not None else significant(head.scale, div_int, p, scientific)
        divisor = head.scale if symbol is not None else shown(div_t)
        if divisor == 0:
            continue
        q_t, bias_t = fmt(scaled, False, p), fmt(bias, False, p)
        given = repr(float(slope)) if not slope_int else str(int(slope))
        # the slope as written in the file when it is short (0.25, 0.0625): by hand too it is used as given
        slope_t = (f"({given})" if slope < 0 else given) if len(given) <= 10 else operand(slope, slope_int, p)
        term = f"{slope_t}·({positions[col]} − {positions[row]})"
        line = f"{num_t} / {div_t} + {term} = {operand(scaled, False, p)} + {operand(bias, False, p)} = {result}"
        total = shown(q_t) + shown(bias_t)
        sums = (abs(total - shown(result)) < 1e-9 * max(1.0, abs(total))) if p == d else agrees(total, result)
        whole = agrees(shown(num_t) / divisor + shown(slope_t) * distance, result)  # the left side, redone, too
        if hand is not None or (sums and whole and agrees(shown(num_t) / divisor, q_t)
                                and agrees(shown(slope_t) * distance, bias_t)):
            break
    return line, term, bias_t


def _printed_slopes(chain: PrintedChain) -> list[float]:
    """The ALiBi slopes as printed (an input printed after the weights), one per head."""

    def make() -> list[float]:
        sc = chain.sc
        table = ALIBI.of(sc)
        assert table is not None and sc.positions is not None
        places = _slope_places(chain.d, table.slopes, sc.positions)
        slopes = [float(round_to(np.array(s), places)) if places is not None else s for s in table.slopes]
        notes = (["the ALiBi paper code's default"] if table.default else []) + (
            [f"rounded to {places} decimals"] if places is not None else [])
        default = f" ({', '.join(notes)})" if notes else ""
        chain.late_input(Table("slopes", "slope", f"ALiBi slopes{default}", "scale", None, np.array([slopes]), ("slope",),
                               tuple(h.name for h in sc.heads), True, False, places=places))
        return slopes

    return chain.memo("slopes", make)


def _slope_places(d: int, slopes: tuple[float, ...], positions: tuple[int, ...]) -> int | None:
    """None when every slope is short enough to print as given (0.5, 0.0625); else decimals that keep
    slope·(j − i) within a tenth of a unit of the page's last digit at the largest distance."""
    if all(len(exact(s)) <= 8 for s in slopes):
        return None
    far = max(positions) - min(positions) if positions else 0
    return d + 1 + len(str(max(1, far)))


