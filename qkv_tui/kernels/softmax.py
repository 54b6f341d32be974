"""The softmax's input and the stable row softmax, with an attention sink joining each row's sum."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.stats import Matrix


def alibi_bias(slope: float, positions: tuple[int, ...]) -> Matrix:
    """slope · (pos_j − pos_i): 0 on the diagonal, more negative the further back the key: (n, n)."""
    p = np.asarray(positions, dtype=np.float64)
    bias: Matrix = slope * (p[None, :] - p[:, None])  # (n, n)
    return bias


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
class Biased:
    """ALiBi's record of one head ([alibi])."""

    bias: Matrix  # (n, m) slope·(pos_j − pos_i), as kept
    slope: float  # the head's slope


@dataclass(frozen=True, eq=False)
class Sunk:
    """An attention sink's record of one head ([sinks])."""

    sink: float  # the sink's logit
    sink_exp: Matrix  # (n,) e^(sink − row_max), the part of each row sum the sink takes


@dataclass(frozen=True, eq=False)
class Capped:
    """The soft-cap's record of one head ([softcap])."""

    capped: Matrix  # (n, m) softcap·tanh(scaled / softcap), without the bias
    softcap: float  # the cap c


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
