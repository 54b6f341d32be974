"""What if we did not divide by √dₖ? One query row's softmax, scaled and unscaled, at growing widths.

Dot products of dₖ-wide vectors with independent unit-variance parts have a standard
deviation of √dₖ, so a head f times wider produces scores with the same distribution
stretched by √f. Dividing by √(f·dₖ) undoes exactly that stretch: the scaled weights do
not change with width, while the unscaled softmax saturates towards one key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from qkv_tui.core.engine import HeadResult
from qkv_tui.core.scenario import BoolMatrix, Matrix
from qkv_tui.kernels.softmax import masked_logits, softmax_rows

FACTORS = (1, 4, 16)


@dataclass(frozen=True, eq=False)
class WhatIfRow:
    factor: int  # the head is this many times wider
    d_k: int
    scaled: Matrix  # (m,) weights with the division by √(factor·dₖ)
    unscaled: Matrix  # (m,) weights without any division

    @property
    def scaled_max(self) -> float:
        return float(self.scaled.max())

    @property
    def unscaled_max(self) -> float:
        return float(self.unscaled.max())


def what_if(head: HeadResult, allow: BoolMatrix, row: int, factors: tuple[int, ...] = FACTORS) -> list[WhatIfRow]:
    """The softmax of one query row with and without scaling, for heads ``factors`` times wider."""
    scores = head.scores[row]  # (m,)
    allowed = allow[row]
    out = []
    for f in factors:
        stretch = math.sqrt(f)  # the same score distribution at width f·dₖ
        divisor = math.sqrt(f * head.d_k) if head.scale_is_default else head.scale * math.sqrt(f)
        scaled = _softmax(scores, stretch / divisor, allowed)
        unscaled = _softmax(scores, stretch, allowed)
        out.append(WhatIfRow(f, f * head.d_k, scaled, unscaled))
    return out


def _softmax(scores: Matrix, factor: float, allowed: BoolMatrix) -> Matrix:
    """softmax(scores · factor) over the allowed keys, for any finite scores and factor > 0.

    The row max is subtracted before multiplying: (s − max)·factor is never above 0, so it
    cannot overflow to +inf, where scores·factor can (scores of 1e306 with a scale of 0.001),
    and inf − inf is the NaN the table once showed. A difference that overflows downwards
    is −inf, whose exponential is exactly 0, as it should be.
    """
    masked = masked_logits(scores, allowed)  # (m,)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        top = masked.max()
        # the largest key is 0 exactly, even if factor overflowed to inf (0·inf is NaN); masked keys stay out
        shifted = np.where(masked == top, 0.0, (masked - top) * factor)  # (m,) all <= 0
        shifted = masked_logits(shifted, allowed)
    weights: Matrix = softmax_rows(shifted[None, :]).weights[0]
    return weights
