"""What a fused attention kernel keeps, and the attention matrix rebuilt from it on demand.

FlashAttention and PyTorch's scaled_dot_product_attention return O alone; for the backward pass they keep one
number a row, the logsumexp L = m + ln ℓ of the online softmax (Dao 2023, Algorithm 1, line 13). The weights
come back from it exactly: e^(s − m)/ℓ = e^(s − L). This is why transformers' ``output_attentions`` needs the
eager path: the fused kernel never has the n×m matrix to return. Each line here is worked as a calculator
works it, from the numbers it shows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from qkv_tui.core import part_questions as ask
from qkv_tui.core.fmt import fmt
from qkv_tui.core.scenario import Matrix
from qkv_tui.kernels.softmax import from_logsumexp, masked_logits
from qkv_tui.teach.arith import MAX_GUARD, agrees, first_fit, fit, shown
from qkv_tui.teach.tiled import TiledHead

PAGES = ("kept", "rebuilt")  # the tiles view's two pages after the forward's last O = Õ/ℓ


@dataclass(frozen=True, eq=False)
class Fused:
    """One head's fused-kernel memory: L per row from the tiles' final m and ℓ, and P rebuilt from it."""

    th: TiledHead

    @cached_property
    def S(self) -> Matrix:
        """(n, m) the scores again, as the tiles computed them (stepped and plus any term, as the head's parts
        say: capped, plus the bias), −∞ where masked: the very numbers L summed, so e^(S − L) is a softmax row
        whatever rounding the trace's own scores had."""
        hr = self.th.comp.heads[self.th.head]
        scaled = hr.Q_used @ hr.K_used.T / hr.scale  # (n, m)
        return np.asarray(masked_logits(ask.step(hr)(scaled), self.th.comp.scenario.allow, ask.term(hr)))

    @cached_property
    def L(self) -> Matrix:
        """(n,) m + ln ℓ after every tile (−∞ for a row the mask allows no key)."""
        m, ell, _, _ = self.th.finals
        with np.errstate(divide="ignore"):
            return np.asarray(m + np.log(ell))

    @cached_property
    def P(self) -> Matrix:
        """(n, m) e^(S − L), exactly 0 where masked."""
        allow = self.th.comp.scenario.allow
        with np.errstate(invalid="ignore", over="ignore"):
            return np.asarray(np.where(allow, from_logsumexp(self.S, self.L[:, None]), 0.0))


def fused(th: TiledHead) -> Fused:
    return Fused(th)


def l_line(token: str, m: float, ell: float, L: float, decimals: int) -> str:
    """``L[I] = m + ln ℓ = 5.000 + ln(1.157) = 5.146``: a row's logsumexp from its running max and sum."""
    if not math.isfinite(L):
        return f"L[{token}] = −∞: the mask allows {token} no key, so no weight to rebuild"
    texts, res = fit(lambda a, b: a + math.log(b), [m, ell], L, decimals)
    return f"L[{token}] = m + ln ℓ = {texts[0]} + ln({texts[1]}) = {res}"


def _row_text(values: Matrix, places: int, allowed: np.ndarray) -> str:
    return "[" + ", ".join(fmt(float(v), False, places) if a else "−∞" for v, a in zip(values, allowed)) + "]"


def p_line(token: str, S: Matrix, L: float, P: Matrix, allowed: np.ndarray, decimals: int) -> str:
    """``P[I] = e^(S − L) = e^([1.000, 0.000] − 1.862) = e^[-0.862, -1.862] = [0.422, 0.155]``.

    S and L are shown with the fewest places (from ``decimals`` on) at which the calculator's e^ of their shown
    difference reads as the exact weight; the difference of shown decimals is exact at those places."""
    if not math.isfinite(L):
        return f"P[{token}] = 0 for every key: the mask allows {token} none"
    result = "[" + ", ".join(fmt(float(p), False, decimals) if a else "0" for p, a in zip(P, allowed)) + "]"

    def attempt(p: int) -> tuple[tuple[int, Matrix, float, Matrix], bool]:
        s = np.array([shown(fmt(float(v), False, p)) if a else -math.inf for v, a in zip(S, allowed)])
        ell = shown(fmt(float(L), False, p))
        diff = np.array([shown(fmt(round(v - ell, p), False, p)) if a else -math.inf for v, a in zip(s, allowed)])
        calc = np.where(allowed, from_logsumexp(diff, 0.0), 0.0)  # e^ of the shown difference, as a calculator
        return (p, s, ell, diff), agrees(calc, result)

    places, s, ell, diff = first_fit(range(decimals, decimals + MAX_GUARD + 1), attempt)
    diffs = "[" + ", ".join(fmt(float(d), False, places) if a else "−∞" for d, a in zip(diff, allowed)) + "]"
    return (f"P[{token}] = e^(S − L) = e^({_row_text(s, places, allowed)} − {fmt(ell, False, places)})"
            f" = e^{diffs} = {result}")


def memory_lines(n: int, m: int, d_k: int, d_v: int, dtype: str, b: int, context: int) -> list[str]:
    """Keeping P against rebuilding it from L, at this scenario's sizes and at the cost view's context."""
    nm = "N²" if n == m else "n·m"
    kept = n * d_v + n
    return [
        f"a fused kernel writes per head O and L, numbers: n·d_v + n = {n}·{d_v} + {n} = {kept};"
        f" bytes at {dtype} ({b} B a number): {kept}·{b} = {kept * b}",
        f"keeping P as well adds, numbers: {nm} = {n}·{m} = {n * m}; bytes at {dtype}: {n * m}·{b} = {n * m * b}",
        f"rebuilding P from L costs the scores again, FLOPs: 2·n·m·d_k = 2·{n}·{m}·{d_k} = {2 * n * m * d_k};"
        f" and one exponential a cell, exponentials: {nm} = {n}·{m} = {n * m}",
        f"at N = {context} tokens (--context; the cost view, c, FlashAttention page), P per head, bytes:"
        f" N·N·{b} = {context}·{context}·{b} = {context * context * b}; rebuilt, FLOPs: 2·N·N·d_k ="
        f" 2·{context}·{context}·{d_k} = {2 * context * context * d_k}",
    ]
