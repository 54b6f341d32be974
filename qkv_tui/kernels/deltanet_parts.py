"""What Qwen3-Next's and Qwen3.5's Gated DeltaNet layers do around the delta rule (kernels/deltanet.py):

- before it, a short causal convolution over every channel of q, k and v on its own (depthwise, kernel K,
  no bias), then SiLU: each channel of token t reads itself and the K − 1 tokens before it, zeros before
  the first token (transformers' ``causal_conv1d_fn``: ``conv1d(padding=K − 1)[:, :, :n]``, then SiLU);
- after it, the gated RMSNorm of each head's output (``Qwen3NextRMSNormGated``): rmsnorm(o)·γ·silu(z),
  z = X̂·W_Z, the norm before the gate and γ stored as is (no 1 + γ, unlike the models' other norms); Kimi
  Linear's (``KimiLinearRMSNormGated``) gates with σ(z) in place of silu(z).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

import numpy as np

from qkv_tui.kernels.norm import normalise
from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.sigmoid import sigmoid
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
    sig_z: Matrix  # (n, d_v) σ(z)
    gate_z: Matrix  # (n, d_v) the gate: silu(z) = z·σ(z), or σ(z) itself where gate is "sigmoid"
    out: Matrix  # (n, d_v) normed ⊙ gate_z: what W_O reads
    gate: str = "silu"  # "silu" (Qwen3-Next, Qwen3.5) or "sigmoid" (Kimi Linear)


def gated_norm(o: Matrix, z: Matrix, gamma: Matrix, eps: float, policy: Policy = EXACT,
               gate: str = "silu") -> GatedNorm:
    """rmsnorm(o)·γ·silu(z) (or ·σ(z) with gate "sigmoid") over each row of one head's output o (n, d_v), z (n, d_v)
    its gate's input."""
    normed = normalise(policy, "rms", o, gamma, None, eps)
    sig_z = sigmoid(z, policy)  # (n, d_v)
    gate_z = sig_z if gate == "sigmoid" else policy.table(z * sig_z)  # (n, d_v)
    out = policy.table(normed.X_norm * gate_z)  # (n, d_v)
    z_kept = np.array(z, dtype=np.float64)
    for a in (sig_z, gate_z, out, z_kept):
        a.setflags(write=False)
    return GatedNorm(normed.spread, normed.root, normed.X_norm, z_kept, sig_z, gate_z, out, gate)


@dataclass(frozen=True, eq=False)
class AroundSpec:
    """One head's weights around the rule; either part may be missing."""

    conv_q: Matrix | None  # (K, d_k) taps; None without the convolution
    conv_k: Matrix | None  # (K, d_k)
    conv_v: Matrix | None  # (K, d_v)
    W_Z: Matrix | None  # (d_model, d_v); None without the output norm
    gamma_o: Matrix | None  # (d_v,)
    eps_o: float
    gate_o: str = "silu"  # the output norm's gate: "silu" or "sigmoid" (Kimi Linear)


@dataclass(frozen=True, eq=False)
class Around:
    """What one head computed around the rule."""

    conv: tuple[Convolved, Convolved, Convolved] | None  # q, k, v; None without the convolution
    out_norm: GatedNorm | None  # None without the output norm

    joined_name: ClassVar[str] = "dn_og"  # what the trace calls it
    joined_label: ClassVar[str] = "normed"  # what Concat's line calls it beside the head's name
    # the views that cannot show it yet (core/part_questions.py refusal): the printed page has no tables for them
    refuses: ClassVar[Mapping[str, str]] = MappingProxyType({
        "worksheet": "a worksheet of [deltanet] with its short convolution or gated output norm (conv_q …, W_Z) is not"
                     " supported yet; use --export markdown for every step, or leave those keys out"})

    @property
    def joined(self) -> Matrix | None:
        """What Concat joins in the head's output's place: the normed output, where there is one."""
        return None if self.out_norm is None else self.out_norm.out


def convolve(spec: AroundSpec, Q: Matrix, K: Matrix, V: Matrix,
             policy: Policy = EXACT) -> tuple[Convolved, Convolved, Convolved] | None:
    if spec.conv_q is None or spec.conv_k is None or spec.conv_v is None:
        return None
    return causal_conv(Q, spec.conv_q, policy), causal_conv(K, spec.conv_k, policy), causal_conv(V, spec.conv_v, policy)


def norm_out(spec: AroundSpec, X: Matrix, o: Matrix, policy: Policy = EXACT) -> GatedNorm | None:
    """rmsnorm(o)·γ·silu(X·W_Z) (or ·σ(X·W_Z)) for the head's output o (n, d_v), X what the projections read."""
    if spec.W_Z is None or spec.gamma_o is None:
        return None
    return gated_norm(o, policy.table(policy.matmul(X, spec.W_Z)), spec.gamma_o, spec.eps_o, policy, spec.gate_o)
