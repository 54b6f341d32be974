"""The soft-cap ([softcap], Gemma 2): the scaled scores become c·tanh(s/c) before any term and the mask. A part of
a head's pass (CapSpec) that hands the softmax its step (kernels/attention.py's ``step``), and its record (Capped)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

from qkv_tui.kernels.attention import Attended, HeadPass, PartSpec
from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.softmax import Index
from qkv_tui.kernels.stats import Matrix


def soft_cap(scaled: Matrix, cap: float | None, policy: Policy = EXACT) -> Matrix:
    """Gemma 2's soft-cap, cap·tanh(scaled / cap), before any bias and the mask; ``scaled`` as it is without a cap.

    tanh bounds every logit within ±cap while leaving small ones almost as they were (|s| ≪ cap)."""
    if cap is None:
        return scaled
    with np.errstate(over="ignore"):  # s/c past float64 (a subnormal cap) is ±∞, whose tanh is the ±1 it stands for
        ratio = scaled / cap
    return policy.stepped(cap * np.tanh(ratio))  # (n, m)


def cap_tanh(scaled: Matrix, cap: float) -> Matrix:
    """tanh(scaled / cap), the soft-cap's own factor: its slope 1 − tanh² is what the backward pass multiplies by."""
    with np.errstate(over="ignore"):  # as soft_cap: an s/c past float64 is ±∞, and its tanh ±1
        out: Matrix = np.tanh(scaled / cap)
    return out


@dataclass(frozen=True, eq=False)
class Capped:
    """The soft-cap's record of one head ([softcap]): a step on the scaled scores before any term, which the
    views ask as such (core/part_questions.py)."""

    capped: Matrix  # (n, m) softcap·tanh(scaled / softcap), without the bias
    softcap: float  # the cap c

    stepped_name: ClassVar[str] = "capped"  # what the views call the scores after the step
    gathered: ClassVar[str] = "dscaled"  # what dQ and dK gather behind the step: dS through it
    words: ClassVar[Mapping[str, str]] = MappingProxyType({
        "tiles.back.step": "    through the soft-cap: dS ⊙ (1 − tanh²(s/c)) = {ds} ⊙ (1 − {factor}"
                           " ⊙ {factor}) = {result}",
        # what dScore's meaning says of the gradient it divides (teach/stages/score.py)
        "dscore.scale": "With the scale and the soft-cap folded in, dQ = dscaled·K / scale, where dscaled ="
                        " dS ⊙ (1 − tanh²(scaled / c)): the cap's slope, then the scale.",
        # the what-if table isolates the division: a cap would blur what it shows (display/view.py)
        "whatif.left_out": "  (the division alone: {name}'s soft-cap of {part.softcap:g} is left out here)",
        # under the cap dS is the gradient at the capped scores: the cap's slope turns it into dscaled at the
        # scaled ones, and dscaled (not dS) is what dQ and dK gather (teach/tiled_backward.py, the Pair's dscaled)
        "tiles.back.meaning.dS": "{plain} Under the soft-cap this dS is the gradient at the capped scores; the cap's"
                                 " slope 1 − tanh²(s/c) then makes dscaled = dS ⊙ (1 − tanh²(s/c)) at the scaled ones,"
                                 " which dQ and dK gather.",
        "tiles.back.meaning.dQ": "Scores are Q·Kᵀ/scale, then capped, so a Query row's gradient gathers dscaled·K/scale"
                                 " over the keys, dscaled = dS ⊙ (1 − tanh²(s/c)) the gradient through the cap: each"
                                 " tile adds its share to the block's dQ (FlashAttention-2 adds it to dQ in main"
                                 " memory, the one write it cannot keep on chip).",
        "tiles.back.meaning.dK": "The same product read the other way: each key's gradient gathers dscaledᵀ·Q/scale"
                                 " over the query rows; the tile's dK and dV are written once, after its last block.",
        "tiles.back.meaning.check": "The tiled dQ, dK and dV are sums of the same terms as the Backward stages'"
                                    " dQ = dscaled·K/scale, dK = dscaledᵀ·Q/scale and dV = Pᵀ·dO, with dscaled ="
                                    " dS ⊙ (1 − tanh²(s/c)) the gradient through the soft-cap, gathered in another"
                                    " order: equal up to float64 rounding.",
    })

    def scores_step(self, scaled: Matrix, policy: Policy = EXACT) -> Matrix:
        """The scaled scores after this step: c·tanh(s/c), written down as ``policy`` writes a step."""
        return soft_cap(scaled, self.softcap, policy)

    def overflow(self, stage: str, at: Any) -> tuple[str, str, str] | None:
        """The stepped scores past float64 (core/part_questions.py)."""
        if stage != "stepped":
            return None
        said: tuple[str, str, str] | None = at.named((("capped", self.capped, False, True,
                          "expected a larger scale or smaller scores (the soft-cap reads scores / scale)"),))
        return said

    def step_factor(self, scaled: Matrix) -> Matrix:
        """The step's own factor at the scaled scores, tanh(s/c): what its slope and its line read."""
        return cap_tanh(scaled, self.softcap)

    @staticmethod
    def back_step(ds: Matrix, factor: Matrix) -> Matrix:
        """The gradient at the stepped scores taken back through the step: dS·(1 − tanh²)."""
        out: Matrix = ds * (1.0 - factor * factor)
        return out

    # the backward's one-cell line through the step: dscaled = dS·(1 − tanh²(scaled / c)), c among its operands so
    # the line recomputes from what it shows (teach/stages: a stage writes it with back_symbolic, back_operands,
    # back_value and back_written)
    back_symbolic: ClassVar[str] = "(1 − tanh²({scaled} / c))"

    @property
    def back_operands(self) -> tuple[float, ...]:
        """The numbers the line reads besides the gradient and the scaled score: the cap."""
        return (self.softcap,)

    @staticmethod
    def back_value(g: float, s: float, c: float) -> float:
        """The gradient at the scaled score from ``g`` at the capped one, as a calculator works the line."""
        return g * (1 - math.tanh(s / c) * math.tanh(s / c))

    @staticmethod
    def back_written(t: list[str]) -> str:
        """The line's numbers, as shown: ``dS·(1 − tanh(s / c)·tanh(s / c))``."""
        return f"{t[0]}·(1 − tanh({t[1]} / {t[2]})·tanh({t[1]} / {t[2]}))"

    def written(self, inner: str, number: Callable[[float], str]) -> str:
        """The step written around ``inner``, its cap as ``number`` writes it: ``50·tanh(inner/50)``."""
        c = number(self.softcap)
        return f"{c}·tanh({inner}/{c})"

    def symbol(self, number: Callable[[float], str]) -> str:
        """The step in a pane's title: ``50·tanh``."""
        return f"{number(self.softcap)}·tanh"

    def checked(self) -> str:
        """What the cap promises, re-checked on its numbers: every capped score within ±c."""
        top = float(np.abs(self.capped).max())
        stay = "stay" if top <= self.softcap else "do NOT stay"
        return f"the capped scores {stay} within ±{self.softcap:g} (largest |capped| {top:.3f})"

    def softmax_options(self, rows: Index, cols: Index) -> dict[str, object]:
        return {"step": self}

    def derivative(self, scaled: Matrix) -> Matrix:
        """The step read backwards: d/ds c·tanh(s/c) = 1 − tanh²(s/c) at each scaled score (the softmax backward's
        ``step``, kernels/attention_backward.py)."""
        t = np.tanh(scaled / self.softcap)  # (n, m)
        out: Matrix = 1.0 - t * t
        return out


@dataclass(frozen=True, eq=False)
class CapSpec(PartSpec):
    """The soft-cap as a part: the scaled scores become softcap·tanh(scaled / softcap) before the bias."""

    softcap: float

    def scores_step(self, scaled: Matrix, policy: Policy = EXACT) -> Matrix:
        """The scaled scores after the cap, as ``policy`` writes them down."""
        return soft_cap(scaled, self.softcap, policy)

    def before_score(self, p: HeadPass) -> None:
        p.step = self

    def after_mix(self, p: HeadPass, attended: Attended) -> None:
        assert attended.stepped is not None
        p.records.append(Capped(attended.stepped, self.softcap))
