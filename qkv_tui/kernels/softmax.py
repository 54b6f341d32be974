"""The softmax's input and the stable row softmax, with an attention sink joining each row's sum."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

import numpy as np

from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.stats import Matrix

Index = int | slice  # a row or a column, or a range of them, of a head's (n, m) map


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
