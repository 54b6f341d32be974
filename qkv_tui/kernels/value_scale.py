"""A value scale as a part (MiMo-V2-Flash's ``attention_value_scale``): V = (X·W_V + b_V)·s, as transformers'
MiMoV2FlashAttention multiplies the projected values before the cache and the mix, so every later stage reads
the scaled V (core/variants/value_scale.py holds the key)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qkv_tui.kernels.attention import HeadPass, PartSpec, frozen
from qkv_tui.kernels.stats import Matrix


@dataclass(frozen=True, eq=False)
class ValueScaled:
    """A head's values before the scale and the scale as used; Project's line shows V = (X·W_V)·s from them."""

    V_projected: Matrix  # (m, d_v) X·W_V + b_V, before the scale
    V_factor: float  # s as used (by hand: as written down)


@dataclass(frozen=True, eq=False)
class ValueScaleSpec(PartSpec):
    factor: float

    def values(self, p: HeadPass) -> None:
        earlier = p.shared_part(ValueScaled)
        if earlier is not None:  # p.V is the earlier head's, already scaled
            p.records.append(earlier)
            return
        s = float(p.policy.worked(np.array(self.factor)))
        p.records.append(ValueScaled(p.V, s))
        p.V = frozen(p.policy.table(p.V * s))
