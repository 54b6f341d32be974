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

from qkv_tui.core.engine import HeadResult, softmax_rows
from qkv_tui.core.scenario import BoolMatrix, Matrix

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
        stretched = scores * math.sqrt(f)  # the same score distribution at width f·dₖ
        divisor = math.sqrt(f * head.d_k) if head.scale_is_default else head.scale * math.sqrt(f)
        with np.errstate(over="ignore"):
            scaled = _softmax(stretched / divisor, allowed)
            unscaled = _softmax(stretched, allowed)
        out.append(WhatIfRow(f, f * head.d_k, scaled, unscaled))
    return out


def _softmax(values: Matrix, allowed: BoolMatrix) -> Matrix:
    weights: Matrix = softmax_rows(np.where(allowed, values, -np.inf)[None, :])[3][0]
    return weights
