"""Partial rotary embeddings and RoPE scaling (context extension), as Hugging Face computes their frequencies.

transformers' ``modeling_rope_utils`` initialisers, in float64 (docs/scenario-format.md, ``[rope.scaling]``):

- partial rotary: only the first r = int(partial·d_k) dimensions turn, with θᵢ = base^(−2i/r), i < r/2;
- ``linear`` (Position Interpolation, kaiokendev): θ'ᵢ = θᵢ / factor;
- ``llama3``: each pair by its wavelength λ = 2π/θᵢ against the original context L: λ < L/high_freq_factor
  kept, λ > L/low_freq_factor divided by factor, in between a blend with s = (L/λ − low) / (high − low);
- ``yarn`` (Peng et al., "YaRN"): a ramp over the pair index between the pairs that turn more than beta_fast
  times over L (kept) and fewer than beta_slow times (divided by factor), its ends rounded outward and clamped
  to [0, dim − 1] as transformers' find_correction_range does (so pair 0 is kept however few times it turns),
  and an attention factor (default 0.1·ln(factor) + 1) that multiplies cos and sin.

All three blend the same way, θ'ᵢ = wᵢ·θᵢ + (1 − wᵢ)·θᵢ / factor, with wᵢ the share of the pair kept as it
was: 0 for linear, 1 / s / 0 by band for llama3, 1 − ramp for yarn. :func:`inv_freq` is the entry point for
an importer holding Hugging Face's config fields.
"""

from __future__ import annotations

import math

import numpy as np

from qkv_tui.base.fixed import fixed
from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.rope import angles_at, pairs, rotate, theta
from qkv_tui.kernels.stats import Matrix

SCALING_TYPES = ("linear", "llama3", "yarn")
YARN_BETA_FAST = 32.0
YARN_BETA_SLOW = 1.0


def rotated_dims(d_k: int, partial: float = 1.0) -> int:
    """How many of d_k dimensions turn: int(d_k·partial), as transformers truncates it."""
    return d_k if partial == 1.0 else int(d_k * partial)


def yarn_default_factor(factor: float, mscale: float = 1.0) -> float:
    """YaRN's attention factor when none is given: 0.1·mscale·ln(factor) + 1 (1 for factor ≤ 1, as transformers)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


@fixed(eq=True)
class RopeScaling:
    """One ``rope_scaling`` (``rope_parameters``) of Hugging Face's, with its field names; None where not given."""

    type: str  # "linear" | "llama3" | "yarn"
    factor: float
    low_freq_factor: float | None = None  # llama3
    high_freq_factor: float | None = None  # llama3
    original_max_position_embeddings: float | None = None  # llama3, yarn
    beta_fast: float | None = None  # yarn; default 32
    beta_slow: float | None = None  # yarn; default 1
    attention_factor: float | None = None  # yarn; default yarn_default_factor(factor)
    truncate: bool = True  # yarn: the correction range rounded outward to whole pairs
    mscale: float | None = None  # yarn (DeepSeek): with mscale_all_dim, the default attention factor's ratio
    mscale_all_dim: float | None = None

    @property
    def scale(self) -> float:
        """What cos and sin are multiplied by: yarn's attention factor, 1 for the others."""
        if self.type != "yarn":
            return 1.0
        if self.attention_factor is not None:
            return float(self.attention_factor)
        if self.mscale and self.mscale_all_dim:
            return yarn_default_factor(self.factor, self.mscale) / yarn_default_factor(self.factor, self.mscale_all_dim)
        return yarn_default_factor(self.factor)

    @property
    def softmax_mscale(self) -> float | None:
        """DeepSeek's attention (transformers' DeepseekV3Attention, yarn_apply_mscale): where mscale_all_dim is
        given, the softmax scale qk_head_dim^(−1/2) is multiplied by m², m = 0.1·mscale_all_dim·ln(factor) + 1
        (1 for factor ≤ 1); None where it is not given. [mla] divides by √d_qk / m² (core/variants/mla.py)."""
        if self.type != "yarn" or not self.mscale_all_dim:
            return None
        return yarn_default_factor(self.factor, self.mscale_all_dim)

    @property
    def fast(self) -> float:
        return YARN_BETA_FAST if self.beta_fast is None else float(self.beta_fast)

    @property
    def slow(self) -> float:
        return YARN_BETA_SLOW if self.beta_slow is None else float(self.beta_slow)

    def correction_dims(self, base: float, dim: int) -> tuple[float, float]:
        """The (fractional) pair indices that turn exactly beta_fast and beta_slow times over the original context
        L: dim·ln(L / (2π·β)) / (2·ln base), transformers' find_correction_dim; before rounding and clamping."""
        assert self.original_max_position_embeddings is not None
        orig = float(self.original_max_position_embeddings)

        def correction_dim(rotations: float) -> float:
            return (dim * math.log(orig / (rotations * 2 * math.pi))) / (2 * math.log(base))

        return correction_dim(self.fast), correction_dim(self.slow)

    def yarn_range(self, base: float, dim: int) -> tuple[float, float]:
        """(low, high): the pair indices where YaRN's ramp starts and ends (transformers' find_correction_range):
        rounded outward, then clamped to [0, dim − 1] (dim counts dimensions: the end may lie past the last pair)."""
        low, high = self.correction_dims(base, dim)
        if self.truncate:
            low, high = math.floor(low), math.ceil(high)
        return max(low, 0), min(high, dim - 1)

    def kept(self, base: float, dim: int, thetas: Matrix) -> Matrix:
        """wᵢ, the share of each pair's frequency kept unscaled (the rest is divided by factor): (dim/2,)."""
        half = len(thetas)
        if self.type == "linear":
            return np.zeros(half)
        if self.type == "llama3":
            assert self.original_max_position_embeddings is not None
            assert self.low_freq_factor is not None and self.high_freq_factor is not None
            old = float(self.original_max_position_embeddings)
            wavelen = 2 * math.pi / thetas  # (dim/2,)
            smooth = (old / wavelen - self.low_freq_factor) / (self.high_freq_factor - self.low_freq_factor)
            out: Matrix = np.where(wavelen < old / self.high_freq_factor, 1.0,
                                   np.where(wavelen > old / self.low_freq_factor, 0.0, smooth))
            return out
        low, high = self.yarn_range(base, dim)
        if low == high:
            high += 0.001  # transformers' guard against a zero-width ramp
        ramp = np.clip((np.arange(half, dtype=np.float64) - low) / (high - low), 0.0, 1.0)  # (dim/2,)
        kept: Matrix = 1.0 - ramp
        return kept

    def apply(self, base: float, dim: int, thetas: Matrix) -> Matrix:
        """θ'ᵢ = wᵢ·θᵢ + (1 − wᵢ)·θᵢ / factor for each pair's θᵢ (dim/2,)."""
        w = self.kept(base, dim, thetas)  # (dim/2,)
        out: Matrix = np.where(w == 1.0, thetas, np.where(w == 0.0, thetas / self.factor,
                                                          w * thetas + (1 - w) * thetas / self.factor))
        return out


def base_inv_freq(base: float, dim: int) -> Matrix:
    """θᵢ = base^(−2i/dim) for i < dim/2, before any scaling: (dim/2,)."""
    return np.array([theta(base, i, dim) for i in range(dim // 2)], dtype=np.float64)


def inv_freq(rope_type: str, base: float, head_dim: int, *, partial_rotary_factor: float = 1.0,
             factor: float | None = None, low_freq_factor: float | None = None,
             high_freq_factor: float | None = None, original_max_position_embeddings: float | None = None,
             beta_fast: float | None = None, beta_slow: float | None = None,
             attention_factor: float | None = None, truncate: bool = True, mscale: float | None = None,
             mscale_all_dim: float | None = None) -> tuple[Matrix, float]:
    """(inv_freq (r/2,), attention_factor) from Hugging Face's config fields, as its ROPE_INIT_FUNCTIONS give them.

    ``rope_type`` is "default", "linear", "llama3" or "yarn"; r = int(head_dim·partial_rotary_factor)."""
    dim = rotated_dims(head_dim, partial_rotary_factor)
    thetas = base_inv_freq(base, dim)  # (dim/2,)
    if rope_type == "default":
        return thetas, 1.0
    if rope_type not in SCALING_TYPES or factor is None:
        raise ValueError(f"rope type {rope_type!r} needs a factor and is one of {SCALING_TYPES}")
    scaling = RopeScaling(rope_type, float(factor), low_freq_factor, high_freq_factor,
                          original_max_position_embeddings, beta_fast, beta_slow, attention_factor, truncate,
                          mscale, mscale_all_dim)
    return scaling.apply(base, dim, thetas), scaling.scale


def turn_scaled(M: Matrix, layout: str, thetas: Matrix, factor: float, positions: Matrix,
                policy: Policy = EXACT) -> Matrix:
    """RoPE on the rows of M (rows, d_k) with the given frequencies (r/2,), as :func:`inv_freq` returns them:
    the first r = 2·len(thetas) dims turn (cos and sin times ``factor``), the rest pass through."""
    a = angles_at(thetas, positions)  # (rows, r/2)
    return rotate(M, np.cos(a) * factor, np.sin(a) * factor, pairs(layout, 2 * len(thetas)), policy)
