"""The softmax's input and the stable row softmax, with an attention sink joining each row's sum."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.stats import Matrix

Index = int | slice  # a row or a column, or a range of them, of a head's (n, m) map


def soft_cap(scaled: Matrix, cap: float | None, policy: Policy = EXACT) -> Matrix:
    """Gemma 2's soft-cap, cap·tanh(scaled / cap), before any bias and the mask; ``scaled`` as it is without a cap.

    tanh bounds every logit within ±cap while leaving small ones almost as they were (|s| ≪ cap)."""
    if cap is None:
        return scaled
    with np.errstate(over="ignore"):  # s/c past float64 (a subnormal cap) is ±∞, whose tanh is the ±1 it stands for
        ratio = scaled / cap
    return policy.capped(cap * np.tanh(ratio))  # (n, m)


def cap_tanh(scaled: Matrix, cap: float) -> Matrix:
    """tanh(scaled / cap), the soft-cap's own factor: its slope 1 − tanh² is what the backward pass multiplies by."""
    with np.errstate(over="ignore"):  # as soft_cap: an s/c past float64 is ±∞, and its tanh ±1
        out: Matrix = np.tanh(scaled / cap)
    return out


def from_logsumexp(S: Matrix, L: Matrix | float) -> Matrix:
    """e^(S − L): a softmax's weights again from its logits and the saved log-sum-exp L of each row
    (FlashAttention-2's backward recomputes P this way instead of keeping the n × n matrix)."""
    out: Matrix = np.exp(S - L)
    return out


def masked_logits(scaled: Matrix, allow: np.ndarray, bias: Matrix | None = None, policy: Policy = EXACT) -> Matrix:
    """The softmax's input: scaled + bias (as the policy adds them), −∞ where the mask forbids: (n, m)."""
    out: Matrix = np.where(allow, policy.logits(scaled, bias), -np.inf)
    return out


def exp_of_difference(a: Matrix, b: Matrix) -> Matrix:
    """e^(a − b), with e^(−∞ − (−∞)) taken as 1: a row that has seen no key yet has nothing to rescale.

    A difference beyond float64 is −∞, and its e^ the 0 it stands for."""
    with np.errstate(invalid="ignore", over="ignore"):
        diff = a - b
    out: Matrix = np.exp(np.where(np.isnan(diff), 0.0, diff))
    return out


@dataclass(frozen=True, eq=False)
class Sunk:
    """An attention sink's record of one head ([sinks]): a column beside the map, a logit with no Value that
    joins each row's sum (core/part_questions.py asks it as such)."""

    sink: float  # the sink's logit
    sink_exp: Matrix  # (n,) e^(sink − row_max), the part of each row sum the sink takes

    # what the views say of the column, at the places they ask (core/part_questions.said)
    words: ClassVar[Mapping[str, str]] = MappingProxyType({
        "tiles.start": "    the sink joins as a column with no Value: m starts at its logit {part.sink:g},"
                       " ℓ at e^({part.sink:g} − {part.sink:g}) = 1, Õ at 0",
        "tiles.back.dS": "the sink's column has no Value, so its dP is 0 and its dS = P_sink·(0 − D): its share"
                         " leaves the row's keys, as in the Backward stages",
        "cache.softmax": "softmax({kept} with the sink {part.sink:g}, then dropped)",
        "summary.rows": "every weight row plus its sink's share sums to 1",
    })

    @property
    def beside(self) -> float:
        """The logit of the column beside the map."""
        return self.sink

    def beside_share(self, row_sum: Matrix) -> Matrix:
        """(n,) the share of each row the column takes: its exponential over the row's sum."""
        out: Matrix = self.sink_exp / row_sum
        return out

    def softmax_options(self, rows: Index, cols: Index) -> dict[str, object]:
        return {"sink": self.sink}


@dataclass(frozen=True, eq=False)
class Capped:
    """The soft-cap's record of one head ([softcap]): a step on the scaled scores before any term, which the
    views ask as such (core/part_questions.py)."""

    capped: Matrix  # (n, m) softcap·tanh(scaled / softcap), without the bias
    softcap: float  # the cap c

    stepped_name: ClassVar[str] = "capped"  # what the views call the scores after the step
    gathered: ClassVar[str] = "dscaled"  # what dQ and dK gather behind the step: dS through it
    words: ClassVar[Mapping[str, str]] = MappingProxyType({
        "tiles.back.step": "    through the soft-cap: dS ⊙ (1 − tanh²(s/c)) = {ds} ⊙ (1 − {factor}"
                           " ⊙ {factor}) = {result}",
        # what dScore's meaning says of the gradient it divides (teach/stages/score.py)
        "dscore.scale": "With the scale and the soft-cap folded in, dQ = dscaled·K / scale, where dscaled ="
                        " dS ⊙ (1 − tanh²(scaled / c)): the cap's slope, then the scale.",
        # the what-if table isolates the division: a cap would blur what it shows (display/view.py)
        "whatif.left_out": "  (the division alone: {name}'s soft-cap of {part.softcap:g} is left out here)",
        # under the cap dS is the gradient at the capped scores: the cap's slope turns it into dscaled at the
        # scaled ones, and dscaled (not dS) is what dQ and dK gather (teach/tiled_backward.py, the Pair's dscaled)
        "tiles.back.meaning.dS": "{plain} Under the soft-cap this dS is the gradient at the capped scores; the cap's"
                                 " slope 1 − tanh²(s/c) then makes dscaled = dS ⊙ (1 − tanh²(s/c)) at the scaled ones,"
                                 " which dQ and dK gather.",
        "tiles.back.meaning.dQ": "Scores are Q·Kᵀ/scale, then capped, so a Query row's gradient gathers dscaled·K/scale"
                                 " over the keys, dscaled = dS ⊙ (1 − tanh²(s/c)) the gradient through the cap: each"
                                 " tile adds its share to the block's dQ (FlashAttention-2 adds it to dQ in main"
                                 " memory, the one write it cannot keep on chip).",
        "tiles.back.meaning.dK": "The same product read the other way: each key's gradient gathers dscaledᵀ·Q/scale"
                                 " over the query rows; the tile's dK and dV are written once, after its last block.",
        "tiles.back.meaning.check": "The tiled dQ, dK and dV are sums of the same terms as the Backward stages'"
                                    " dQ = dscaled·K/scale, dK = dscaledᵀ·Q/scale and dV = Pᵀ·dO, with dscaled ="
                                    " dS ⊙ (1 − tanh²(s/c)) the gradient through the soft-cap, gathered in another"
                                    " order: equal up to float64 rounding.",
    })

    def scores_step(self, scaled: Matrix) -> Matrix:
        """The scaled scores after this step: c·tanh(s/c)."""
        return soft_cap(scaled, self.softcap)

    def overflow(self, stage: str, at: Any) -> tuple[str, str, str] | None:
        """The stepped scores past float64 (core/part_questions.py)."""
        if stage != "stepped":
            return None
        said: tuple[str, str, str] | None = at.named((("capped", self.capped, False, True,
                          "expected a larger scale or smaller scores (the soft-cap reads scores / scale)"),))
        return said

    def step_factor(self, scaled: Matrix) -> Matrix:
        """The step's own factor at the scaled scores, tanh(s/c): what its slope and its line read."""
        return cap_tanh(scaled, self.softcap)

    @staticmethod
    def back_step(ds: Matrix, factor: Matrix) -> Matrix:
        """The gradient at the stepped scores taken back through the step: dS·(1 − tanh²)."""
        out: Matrix = ds * (1.0 - factor * factor)
        return out

    # the backward's one-cell line through the step: dscaled = dS·(1 − tanh²(scaled / c)), c among its operands so
    # the line recomputes from what it shows (teach/stages: a stage writes it with back_symbolic, back_operands,
    # back_value and back_written)
    back_symbolic: ClassVar[str] = "(1 − tanh²({scaled} / c))"

    @property
    def back_operands(self) -> tuple[float, ...]:
        """The numbers the line reads besides the gradient and the scaled score: the cap."""
        return (self.softcap,)

    @staticmethod
    def back_value(g: float, s: float, c: float) -> float:
        """The gradient at the scaled score from ``g`` at the capped one, as a calculator works the line."""
        return g * (1 - math.tanh(s / c) * math.tanh(s / c))

    @staticmethod
    def back_written(t: list[str]) -> str:
        """The line's numbers, as shown: ``dS·(1 − tanh(s / c)·tanh(s / c))``."""
        return f"{t[0]}·(1 − tanh({t[1]} / {t[2]})·tanh({t[1]} / {t[2]}))"

    def written(self, inner: str, number: Callable[[float], str]) -> str:
        """The step written around ``inner``, its cap as ``number`` writes it: ``50·tanh(inner/50)``."""
        c = number(self.softcap)
        return f"{c}·tanh({inner}/{c})"

    def symbol(self, number: Callable[[float], str]) -> str:
        """The step in a pane's title: ``50·tanh``."""
        return f"{number(self.softcap)}·tanh"

    def checked(self) -> str:
        """What the cap promises, re-checked on its numbers: every capped score within ±c."""
        top = float(np.abs(self.capped).max())
        stay = "stay" if top <= self.softcap else "do NOT stay"
        return f"the capped scores {stay} within ±{self.softcap:g} (largest |capped| {top:.3f})"

    def softmax_options(self, rows: Index, cols: Index) -> dict[str, object]:
        return {"softcap": self.softcap}


@dataclass(frozen=True, eq=False)
class SoftmaxRows:
    row_max: Matrix  # (n,) subtracted before exp: the row's max, or the sink where it is larger
    exps: Matrix  # (n, m) e^(masked − row_max); exactly 0 where masked
    row_sum: Matrix  # (n,) Σ exps, plus the sink's exponential where there is one
    weights: Matrix  # (n, m), rows sum to 1 (less than 1 with a sink)
    sink_exp: Matrix | None  # (n,) e^(sink − row_max), the part of each row sum the sink takes


def softmax_rows(masked: Matrix, sink: float | None = None, policy: Policy = EXACT) -> SoftmaxRows:
    """Stable row softmax of ``masked`` (n, m), −∞ where the mask forbids.

    With a sink, its logit joins every row as an extra column: the max subtracted is the
    larger of the row max and the sink, and e^(sink − max) joins the row sum (it is not
    among ``exps``: the sink's column is dropped after the sum). Every row allows a key.
    """
    row_max = masked.max(axis=1)  # (n,)
    if sink is not None:
        row_max = np.maximum(row_max, sink)
    # a logit far below its row's max may give a difference beyond float64: −inf, whose e^ is the 0 it
    # stands for (e^(−1e308 − 1e308) underflows anyway), so that overflow is not an error
    with np.errstate(over="ignore", under="ignore"):
        shifted = policy.worked(masked - row_max[:, None])  # (n, m) <= 0; −∞ where masked
        # by hand each e^ is written down rounded, then copied, rounded, into the row of exponentials: both
        # roundings are the hand computation's own (a rounded number rounds to itself almost always, not always)
        exps = policy.worked(policy.worked(np.exp(shifted)))  # (n, m); e^-inf = 0 exactly
        sink_exp = None
        if sink is not None:
            sink_exp = policy.worked(policy.worked(np.exp(policy.worked(sink - row_max))))  # (n,)
    row_sum = exps.sum(axis=1)  # (n,)
    if sink_exp is not None:
        row_sum = row_sum + sink_exp
    row_sum = policy.worked(row_sum)
    return SoftmaxRows(row_max, exps, row_sum, policy.table(exps / row_sum[:, None]), sink_exp)
