"""Every matrix of softmax(Q Kᵀ / scale) V for a scenario, in plain NumPy.

Follows contracts §1 "Semantics" line by line: per head Q = X W_Q, K = X_kv W_K,
V = X_kv W_V, scores = Q Kᵀ, scaled = scores / scale, masked entries -> -inf,
weights = stable row softmax, output = weights V; then concat and W_O.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from qkv_tui.core.scenario import BoolMatrix, Head, Matrix, Scenario, ScenarioError


@dataclass(frozen=True, eq=False)
class HeadResult:
    """One head's computation; every array is read-only."""

    name: str
    d_k: int
    d_v: int
    scale: float  # the divisor used
    scale_is_default: bool  # True when scale = sqrt(d_k) (shown as √d_k)
    W_Q: Matrix  # (d_model, d_k)
    W_K: Matrix  # (d_in, d_k)
    W_V: Matrix  # (d_in, d_v)
    Q: Matrix  # (n, d_k)
    K: Matrix  # (m, d_k)
    V: Matrix  # (m, d_v)
    scores: Matrix  # (n, m)
    scaled: Matrix  # (n, m)
    masked: Matrix  # (n, m), -inf where the mask forbids
    row_max: Matrix  # (n,) max of each masked row, subtracted before exp
    exps: Matrix  # (n, m) e^(masked - row_max); exactly 0 where masked
    row_sum: Matrix  # (n,)
    weights: Matrix  # (n, m), rows sum to 1
    output: Matrix  # (n, d_v)


@dataclass(frozen=True, eq=False)
class Computation:
    """The whole computation of a scenario (contracts §3 is its plain-data form)."""

    scenario: Scenario
    heads: tuple[HeadResult, ...]
    concat: Matrix  # (n, sum d_v)
    W_O: Matrix | None  # (sum d_v, d_out)
    output: Matrix  # (n, d_out) = concat W_O, or concat
    hand_decimals: int | None = None  # set when every intermediate was rounded (handcalc), else exact

    @property
    def allow(self) -> BoolMatrix:
        return self.scenario.allow


def _frozen(array: Matrix) -> Matrix:
    array.setflags(write=False)
    return array


def softmax_rows(masked: Matrix) -> tuple[Matrix, Matrix, Matrix, Matrix]:
    """Stable row softmax; returns (row_max, exps, row_sum, weights)."""
    row_max = masked.max(axis=1)  # (n,)
    exps = np.exp(masked - row_max[:, None])  # (n, m); e^-inf = 0 exactly
    row_sum = exps.sum(axis=1)  # (n,)
    return row_max, exps, row_sum, exps / row_sum[:, None]


def compute_head(head: Head, X: Matrix, X_kv: Matrix, allow: BoolMatrix, scale: float | None) -> HeadResult:
    divisor = math.sqrt(head.d_k) if scale is None else scale
    Q = X @ head.W_Q  # (n, d_k)
    K = X_kv @ head.W_K  # (m, d_k)
    V = X_kv @ head.W_V  # (m, d_v)
    scores = Q @ K.T  # (n, m)
    scaled = scores / divisor  # (n, m)
    masked = np.where(allow, scaled, -np.inf)  # (n, m)
    row_max, exps, row_sum, weights = softmax_rows(masked)
    output = weights @ V  # (n, d_v)
    arrays = (Q, K, V, scores, scaled, masked, row_max, exps, row_sum, weights, output)
    for a in arrays:
        _frozen(a)
    return HeadResult(
        head.name, head.d_k, head.d_v, divisor, scale is None,
        head.W_Q, head.W_K, head.W_V, *arrays,
    )


def iter_heads(scenario: Scenario) -> Iterator[HeadResult]:
    """Each head's computation in turn, so a caller can hold one head at a time (the
    streaming JSON export); raises ScenarioError on the first head that overflows."""
    for h in scenario.heads:
        with np.errstate(over="ignore", invalid="ignore"):
            head = compute_head(h, scenario.X, scenario.X_kv, scenario.allow, scenario.scale)
        for name in ("Q", "K", "V", "scores", "scaled", "weights", "output"):
            if not np.isfinite(getattr(head, name)).all():
                raise ScenarioError(
                    scenario.source,
                    f"{head.name}: {name} overflows float64 (values too large);"
                    " expected numbers small enough that every product stays finite",
                )
        yield head


def combine(scenario: Scenario, outputs: Sequence[Matrix]) -> tuple[Matrix, Matrix]:
    """(concat, final output) from the heads' outputs; raises ScenarioError on overflow."""
    with np.errstate(over="ignore", invalid="ignore"):
        concat = np.concatenate(outputs, axis=1)  # (n, sum d_v)
        output = concat @ scenario.W_O if scenario.W_O is not None else concat  # (n, d_out)
    if not np.isfinite(output).all():
        raise ScenarioError(scenario.source, "the final output overflows float64 (W_O values too large)")
    return _frozen(concat), _frozen(output)


def compute(scenario: Scenario) -> Computation:
    """Every matrix of the scenario; raises ScenarioError if a value overflows."""
    heads = tuple(iter_heads(scenario))
    concat, output = combine(scenario, [h.output for h in heads])
    return Computation(scenario, heads, concat, scenario.W_O, output)
