"""[differential] as one part of a head's pass (contracts §14): its ``attend`` hook runs the kernel
(kernels/differential.py diff_forward) in place of the one softmax, and its record is the kernel's DiffForward.

What the head's result then holds, as the JSON reads it: ``scores``/``scaled``/``masked`` and the softmax's
row max, exponentials and sums are the first map's; ``weights`` is the map that multiplies V (first − λ·second,
rows summing to 1 − λ); ``output`` is the head's output after the sub-norm and the (1 − λ_init) factor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from qkv_tui.core import part_questions as ask
from qkv_tui.core.variants.differential import TABLE
from qkv_tui.kernels.attention import Attended, HeadPass, PartSpec, Turn

# this module loads only where a scenario has [differential] (its table's head face), so its kernel with it
from qkv_tui.kernels.differential import DiffForward, DiffHead, diff_forward
from qkv_tui.kernels.softmax import SoftmaxRows


@dataclass(frozen=True, eq=False)
class DiffSpec(PartSpec):
    """One differential head: its weights (the kernel projects and splits them itself), its λ and sub-norm,
    the divisor (None: √d, the half width) and RoPE's turn for width d."""

    head: Any  # core/scenario.py's Head (not imported: the scenario's module imports the builders, which import this)
    diff: DiffHead
    scale: float | None
    turn: Turn | None

    def attend(self, p: HeadPass) -> Attended:
        h = self.head
        earlier = p.shared_part(DiffForward)
        f = diff_forward(p.X, p.X_kv, h.W_Q, h.W_K, h.W_V, h.b_Q, h.b_K, h.b_V, p.allow, self.diff, scale=self.scale,
                         turn=self.turn, bias=p.bias, step=p.step, shared=earlier, policy=p.policy)
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
        # the exact head's divisor by hand (as every head's), the scenario's own, or None: √d, not √d_k = √(2d);
        # the turn of Q and K by position for one half of the head (width d), as for a whole head of that width
        # (the parts that act on Q and K turn each half so too: score_width)
        scale = run.exact[h].scale if run.exact is not None else sc.scale
        return DiffSpec(sc.heads[h], df.head(h), scale, ask.turn(sc, df.d, run.policy))
    return spec
