"""What Qwen3-Next's and Qwen3.5's Gated DeltaNet layers do around the delta rule (kernels/deltanet.py):

- before it, a short causal convolution over every channel of q, k and v on its own (depthwise, kernel K,
  no bias), then SiLU: each channel of token t reads itself and the K − 1 tokens before it, zeros before
  the first token (transformers' ``causal_conv1d_fn``: ``conv1d(padding=K − 1)[:, :, :n]``, then SiLU);
- after it, the gated RMSNorm of each head's output (``Qwen3NextRMSNormGated``): rmsnorm(o)·γ·silu(z),
  z = X̂·W_Z, the norm before the gate and γ stored as is (no 1 + γ, unlike the models' other norms).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qkv_tui.kernels.gate import sigmoid
from qkv_tui.kernels.norm import normalise
from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.stats import Matrix


@dataclass(frozen=True, eq=False)
class Convolved:
    """One short convolution; every array read-only."""

    mixed: Matrix  # (n, C) Σ_j w[j]·x[t − K + 1 + j], before the SiLU
    gate: Matrix  # (n, C) σ(mixed)
    out: Matrix  # (n, C) silu(mixed) = mixed·σ(mixed)


def causal_conv(x: Matrix, w: Matrix, policy: Policy = EXACT) -> Convolved:
    """x (n, C) through taps w (K, C), row K − 1 the current token's weight, row 0 the oldest's; then SiLU."""
    n, taps = x.shape[0], w.shape[0]
    padded = np.concatenate([np.zeros((taps - 1, x.shape[1])), x])  # (K − 1 + n, C): zeros before the first token
    terms = np.stack([policy.worked(padded[j:j + n] * w[j]) for j in range(taps)])  # (K, n, C)
    mixed = policy.table(policy.worked(terms.sum(axis=0)))  # (n, C)
    g = sigmoid(mixed, policy)  # (n, C)
    out = policy.table(mixed * g)  # (n, C)
    for a in (mixed, g, out):
        a.setflags(write=False)
    return Convolved(mixed, g, out)


@dataclass(frozen=True, eq=False)
class GatedNorm:
    """One head's gated output norm; every array read-only."""

    mean_sq: Matrix  # (n,) mean of o² of each row
    root: Matrix  # (n,) √(mean + eps)
    normed: Matrix  # (n, d_v) o / root · γ
    z: Matrix  # (n, d_v) X̂·W_Z, the gate's input
    silu_z: Matrix  # (n, d_v) z·σ(z)
    out: Matrix  # (n, d_v) normed ⊙ silu(z): what W_O reads


def gated_norm(o: Matrix, z: Matrix, gamma: Matrix, eps: float, policy: Policy = EXACT) -> GatedNorm:
    """rmsnorm(o)·γ·silu(z) over each row of one head's output o (n, d_v), z (n, d_v) its gate's input."""
    normed = normalise(policy, "rms", o, gamma, None, eps)
    silu_z = policy.table(z * sigmoid(z, policy))  # (n, d_v)
    out = policy.table(normed.X_norm * silu_z)  # (n, d_v)
    z_kept = np.array(z, dtype=np.float64)
    for a in (silu_z, out, z_kept):
        a.setflags(write=False)
    return GatedNorm(normed.spread, normed.root, normed.X_norm, z_kept, silu_z, out)
