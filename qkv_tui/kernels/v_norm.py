"""A value norm as a part (Gemma 3n's ``v_norm``): each row of V, (X·W_V + b_V)[j], divided by
√(mean of its squares + eps), no gain, before the cache and the mix, as transformers' Gemma3nTextAttention
does, so every later stage reads the normed V (core/variants/v_norm.py holds the key)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

import numpy as np

from qkv_tui.kernels.attention import HeadPass, PartSpec, frozen
from qkv_tui.kernels.norm import Normed, normalise


@dataclass(frozen=True, eq=False)
class ValueNormed:
    """A head's values before the norm and each row's statistics; Project's line shows V = u / √(s + eps)."""

    normed: Normed  # its unrounded input is not kept: V_projected is
    V_projected: np.ndarray  # (m, d_v) X·W_V + b_V, before the norm
    eps: float
    refuses: ClassVar[Mapping[str, str]] = MappingProxyType({
        "worksheet": "a worksheet of [v_norm] is not written yet (the value norm has no printed table); use"
                     " --export markdown for every step",
    })


@dataclass(frozen=True, eq=False)
class VNormSpec(PartSpec):
    eps: float

    def values(self, p: HeadPass) -> None:
        earlier = p.shared_part(ValueNormed)
        if earlier is not None:  # p.V is the earlier head's, already normed
            p.records.append(earlier)
            return
        done = normalise(p.policy, "rms", p.V, np.ones(p.V.shape[1]), None, self.eps)
        p.records.append(ValueNormed(done, p.V, self.eps))
        p.V = frozen(np.array(done.X_norm))
