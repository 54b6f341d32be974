"""[differential] as one part of a head's pass (contracts §14): its ``attend`` hook runs the kernel
(kernels/differential.py diff_maps) in place of the one softmax on the head's Q, K and V as projected and Q and K
as the parts before the scores left them (RoPE's turns each half: core/part_questions.py score_width), and its
record is the kernel's DiffForward.

What the head's result then holds, as the JSON reads it: ``scores``/``scaled``/``masked`` and the softmax's
row max, exponentials and sums are the first map's; ``weights`` is the map that multiplies V (first − λ·second,
rows summing to 1 − λ); ``output`` is the head's output after the sub-norm and the (1 − λ_init) factor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from qkv_tui.core.variants.differential import TABLE
from qkv_tui.kernels.attention import Attended, HeadPass, PartSpec

# this module loads only where a scenario has [differential] (its table's head face), so its kernel with it
from qkv_tui.kernels.differential import DiffForward, DiffHead, diff_maps, moved_by
from qkv_tui.kernels.softmax import SoftmaxRows


@dataclass(frozen=True, eq=False)
class DiffSpec(PartSpec):
    """One differential head: its λ and sub-norm and the divisor (None: √d, the half width); the head pass gives
    its projections, 2d wide, which the kernel splits."""

    diff: DiffHead
    scale: float | None

    def attend(self, p: HeadPass) -> Attended:
        f = diff_maps(p.Q, p.K, p.V, p.allow, self.diff, Q_used=p.Q_used, K_used=p.K_used, moved=moved_by(p.records),
                      scale=self.scale, bias=p.bias, step=p.step, policy=p.policy)
        p.notes["differential"] = f
        m = f.map_1.softmax
        # the first map's steps, the weights that multiply V, and the head's output: what every head's result holds
        soft = SoftmaxRows(m.row_max, m.exps, m.row_sum, f.weights, None)
        return Attended(f.divisor, f.map_1.scores, f.map_1.scaled, f.bias, f.map_1.masked, soft, f.output,
                        f.map_1.stepped)

    def after_mix(self, p: HeadPass, attended: Attended) -> None:
        f = p.notes["differential"]
        assert isinstance(f, DiffForward)
        p.records.append(f)


def diff_part(run: Any) -> Callable[[int], DiffSpec] | None:
    """Each head's DiffSpec where the scenario has [differential] (``run`` is core/head_parts.py's Run)."""
    sc = run.sc
    df = TABLE.of(sc)
    if df is None:
        return None

    def spec(h: int) -> DiffSpec:
        # the exact head's divisor by hand (as every head's), the scenario's own, or None: √d, not √d_k = √(2d)
        scale = run.exact[h].scale if run.exact is not None else sc.scale
        return DiffSpec(df.head(h), scale)
    return spec
