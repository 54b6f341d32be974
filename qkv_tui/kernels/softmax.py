"""The softmax's input and the stable row softmax, with a logit beside the map (an attention sink) joining each
row's sum."""

from __future__ import annotations

import numpy as np

from qkv_tui.base.fixed import fixed
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


@fixed
class SoftmaxRows:
    """A masked softmax's rows and the parts they are made of."""

    row_max: Matrix  # (n,) subtracted before exp: the row's max, or the logit beside it where that is larger
    exps: Matrix  # (n, m) e^(masked − row_max); exactly 0 where masked
    row_sum: Matrix  # (n,) Σ exps, plus the exponential of the logit beside the map where there is one
    weights: Matrix  # (n, m), rows sum to 1 (less than 1 with a logit beside the map)
    beside_exp: Matrix | None  # (n,) e^(beside − row_max), the part of each row sum the column beside takes


def softmax_rows(masked: Matrix, beside: float | None = None, policy: Policy = EXACT) -> SoftmaxRows:
    """Stable row softmax of ``masked`` (n, m), −∞ where the mask forbids.

    With ``beside`` (an attention sink's logit), it joins every row as an extra column with no Value: the max
    subtracted is the larger of the row max and it, and e^(beside − max) joins the row sum (it is not among
    ``exps``: the column is dropped after the sum). Every row allows a key.
    """
    row_max = masked.max(axis=1)  # (n,)
    if beside is not None:
        row_max = np.maximum(row_max, beside)
    # a logit far below its row's max may give a difference beyond float64: −inf, whose e^ is the 0 it
    # stands for (e^(−1e308 − 1e308) underflows anyway), so that overflow is not an error
    with np.errstate(over="ignore", under="ignore"):
        shifted = policy.worked(masked - row_max[:, None])  # (n, m) <= 0; −∞ where masked
        # by hand each e^ is written down rounded, then copied, rounded, into the row of exponentials: both
        # roundings are the hand computation's own (a rounded number rounds to itself almost always, not always)
        exps = policy.worked(policy.worked(np.exp(shifted)))  # (n, m); e^-inf = 0 exactly
        beside_exp = None
        if beside is not None:
            beside_exp = policy.worked(policy.worked(np.exp(policy.worked(beside - row_max))))  # (n,)
    row_sum = exps.sum(axis=1)  # (n,)
    if beside_exp is not None:
        row_sum = row_sum + beside_exp
    row_sum = policy.worked(row_sum)
    return SoftmaxRows(row_max, exps, row_sum, policy.table(exps / row_sum[:, None]), beside_exp)
