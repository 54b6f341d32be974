"""[shared_kv] as one part of a head's pass (contracts §15, Gemma 3n's cross-layer KV sharing): before anything
reads them, the head's K and V become the source layer's, as it cached them, and the head pass says its K is given
(kernels/attention.py HeadPass.K_given): the parts that act on Queries and Keys (QK-norm, RoPE) find the Keys
already as they enter the scores, so only Q is normed and rotated here. Its record says so to the views
(``kv_given``) and refuses those not built for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar

from qkv_tui.core.arrays import Matrix
from qkv_tui.core.variants.shared_kv import TABLE
from qkv_tui.kernels.attention import Attended, HeadPass, PartSpec


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
class ReuseSpec(PartSpec):
    record: ReusedKV

    def values(self, p: HeadPass) -> None:
        K, V = self.record.K, self.record.V
        p.K = p.K_turned = p.K_used = K
        p.V = V
        p.K_given = True  # as they enter the scores: the parts that act on Q and K step Q alone

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
