"""[shared_kv] as one part of a head's pass (contracts §15, Gemma 3n's cross-layer KV sharing): before anything
reads them, the head's K and V become the source layer's, as it cached them; the parts that turn the Keys
(QK-norm, RoPE) find them already turned, as they find an earlier query head's under GQA, so only Q is normed and
rotated here. Its record says so to the views (``kv_given``) and refuses those not built for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, TypeVar

import numpy as np

from qkv_tui.core.arrays import Matrix
from qkv_tui.core.variants.shared_kv import TABLE
from qkv_tui.kernels.attention import Attended, HeadPass, PartSpec
from qkv_tui.kernels.norm import Normed
from qkv_tui.kernels.qk_norm import QKNormed
from qkv_tui.kernels.rope import Rotated

P = TypeVar("P")


@dataclass(frozen=True, eq=False)
class ReusedKV:
    """A head's record: the layer its K and V came from, and what they were (its K/V head's)."""

    source_layer: int
    kv_head: int
    K: Matrix  # (m, d_k) as the source layer cached it: after its k_norm and RoPE
    V: Matrix  # (m, d_v) after its v_norm

    kv_given: ClassVar[bool] = True  # no head here computes K or V (teach/trace.py: none owns them)
    refuses: ClassVar[Mapping[str, str]] = MappingProxyType({
        "cache": "No KV-cache replay for a layer that reuses another's K and V: it stores none of its own (the cost"
                 " view, c, counts 0 bytes for it) and reads the source layer's cache, which is not in this scenario.",
        "worksheet": "a worksheet of [shared_kv] is not written yet (the reused K and V have no printed table); use"
                     " --export markdown for every step",
        "worksheet backward": "are not written for [shared_kv]",
    })


@dataclass(frozen=True, eq=False)
class _FromLayer:
    """The source layer's K and V as an earlier head's are handed to a GQA reader (kernels/attention.py SharedKV):
    QK-norm and RoPE find the Keys they would have made, and reuse them."""

    K: Matrix
    V: Matrix
    records: tuple[object, ...]

    def part(self, kind: type[P]) -> P | None:
        return next((r for r in self.records if isinstance(r, kind)), None)


def _as_normed(K: Matrix) -> Normed:
    """The reused Keys in QK-norm's record form (normed by the source layer; their statistics here are K's own)."""
    spread = np.mean(K * K, axis=1)
    return Normed(K, np.zeros(K.shape[0]), spread, np.sqrt(spread), K)


@dataclass(frozen=True, eq=False)
class ReuseSpec(PartSpec):
    record: ReusedKV

    def values(self, p: HeadPass) -> None:
        K, V = self.record.K, self.record.V
        p.K = p.K_turned = p.K_used = K
        p.V = V
        if p.shared is None:  # a later reader of the same K/V head already finds them in its earlier head
            p.shared = _FromLayer(K, V, (QKNormed(_as_normed(K), _as_normed(K)), Rotated(K, K)))

    def after_mix(self, p: HeadPass, attended: Attended) -> None:
        p.records.append(self.record)


def shared_kv_part(run: Any) -> Callable[[int], ReuseSpec] | None:
    """Each head's ReuseSpec where the scenario has [shared_kv] (``run`` is core/head_parts.py's Run)."""
    sc = run.sc
    s = TABLE.of(sc)
    if s is None:
        return None
    records = {g: ReusedKV(s.source_layer, g, K, V) for g, (K, V) in enumerate(zip(s.K, s.V, strict=True))}
    return lambda h: ReuseSpec(records[sc.kv_head(h)])
