"""Kimi Delta Attention (Kimi Linear, arXiv 2510.26692): the gated delta rule with one forget gate per key
channel, one head, token by token, under a numeric policy.

    S_t = (I − β_t k_t k_tᵀ)·diag(e^{g_t})·S_{t−1} + β_t k_t v_tᵀ,   o_t = S_tᵀ q_t

with S a d_k × d_v matrix (rows the key channels), the layout kernels/deltanet.py and transformers'
``recurrent_kimi_delta_attention`` (the FLA reference it follows) both use, and the decay applied before the
correction, as both do. Worked as transformers' recurrence works it:

    S ← diag(e^{g_t})·S  (row i times e^{g_t[i]});  kv = Sᵀk_t;  δ = (v_t − kv)·β_t;  S ← S + k_t δᵀ;  o_t = Sᵀq_t

with q and k L2-normalised (x / √(Σx² + 1e-6)) and q also ÷ √d_k, as in Gated DeltaNet. The only change
from kernels/deltanet.py is g: a vector of d_k log decays per token instead of one number, so a state row
(what the state keeps about one key channel) can be kept while another is forgotten. With every channel's
g equal, each row decays alike and the rule is Gated DeltaNet's, number for number (:attr:`KdaForward.uniform`).

The model's g (transformers' ``KimiLinearForgetGate``) comes from a low-rank projection of each token's X̂:
g = −e^{A_log[h]}·softplus((X̂·W_fa)·W_fb + dt_bias), one A_log per head and one dt_bias per key channel,
with the softplus taken as x itself past 20 (FLA's and transformers' threshold). β = σ(X̂·W_b) per head.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from qkv_tui.kernels.deltanet import decay_mask, decay_rate, l2_rows, state_overflow
from qkv_tui.kernels.deltanet_parts import Convolved, causal_conv
from qkv_tui.kernels.norm import normalise
from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.sigmoid import sigmoid
from qkv_tui.kernels.stats import Matrix

SOFTPLUS_THRESHOLD = 20.0  # transformers' KimiLinearForgetGate (and FLA): softplus(x) is taken as x past it


def _frozen(*arrays: Matrix) -> None:
    for a in arrays:
        a.setflags(write=False)


@dataclass(frozen=True, eq=False)
class KdaForward:
    """One head's Kimi Delta Attention; every array read-only. Field names as kernels/deltanet.DeltaForward's."""

    sq_q: Matrix  # (n,) Σq² of each raw query row
    sq_k: Matrix  # (n,) Σk²
    root_q: Matrix  # (n,) √(Σq² + eps)
    root_k: Matrix  # (n,)
    divisor: float  # √d_k, as kept
    q: Matrix  # (n, d_k) q / root / √d_k
    k: Matrix  # (n, d_k) k / root
    g: Matrix  # (n, d_k) the log decay of each key channel
    beta: Matrix  # (n,) the write strength
    decay: Matrix  # (n, d_k) e^g, each channel's own
    decayed: Matrix  # (n, d_k, d_v) diag(e^{g_t})·S_{t−1}: row i times e^{g_t[i]}
    kv: Matrix  # (n, d_v) decayedᵀ k_t: what the state recalls for k_t
    delta: Matrix  # (n, d_v) (v_t − kv)·β_t
    S: Matrix  # (n, d_k, d_v) the state after token t
    output: Matrix  # (n, d_v) S_tᵀ q_t
    uniform: bool  # every token's g the same in every channel: Gated DeltaNet's rule exactly

    def overflow(self, stage: str, at: Any) -> tuple[str, str, str] | None:
        """Its values past float64, as the delta rule's (core/part_questions.py)."""
        return state_overflow(self, stage, at)


def kda_forward(Q: Matrix, K: Matrix, V: Matrix, g: Matrix, beta: Matrix, policy: Policy = EXACT) -> KdaForward:
    """One head: Q, K (n, d_k) as projected, V (n, d_v), g (n, d_k) the per-channel log decay, β (n,)."""
    n, d_k = Q.shape
    d_v = V.shape[1]
    g_kept, beta_kept = np.array(g, dtype=float), np.array(beta, dtype=float)
    if g_kept.shape != (n, d_k):
        raise ValueError(f"g has shape {g_kept.shape}; expected (n, d_k) = ({n}, {d_k}), one log decay per key channel")
    sq_q, root_q, q_hat = l2_rows(Q, policy)
    sq_k, root_k, k = l2_rows(K, policy)
    divisor = policy.divisor(float(np.sqrt(d_k)))
    q = policy.table(q_hat / divisor)  # (n, d_k)
    decay = policy.worked(np.exp(g_kept))  # (n, d_k)
    decayed, S = np.zeros((n, d_k, d_v)), np.zeros((n, d_k, d_v))
    kv, delta, output = np.zeros((n, d_v)), np.zeros((n, d_v)), np.zeros((n, d_v))
    state = np.zeros((d_k, d_v))
    for t in range(n):
        state = policy.worked(state * decay[t][:, None])  # (d_k, d_v): key channel i's row fades by its own e^g
        decayed[t] = state
        kv[t] = policy.worked(policy.worked(state * k[t][:, None]).sum(axis=0))  # (d_v,)
        delta[t] = policy.worked(policy.worked(V[t] - kv[t]) * beta_kept[t])  # (d_v,)
        state = policy.worked(state + policy.worked(k[t][:, None] * delta[t][None, :]))  # (d_k, d_v)
        S[t] = state
        output[t] = policy.worked(policy.worked(state * q[t][:, None]).sum(axis=0))  # (d_v,)
    uniform = bool((g_kept == g_kept[:, :1]).all())
    _frozen(sq_q, sq_k, root_q, root_k, q, k, g_kept, beta_kept, decay, decayed, kv, delta, S, output)
    return KdaForward(sq_q, sq_k, root_q, root_k, divisor, q, k, g_kept, beta_kept, decay, decayed, kv, delta, S,
                      output, uniform)


def channel_mask(g: Matrix) -> Matrix:
    """D[t, s, i] = e^{G_t[i] − G_s[i]} = e^{g_{s+1}[i]}·…·e^{g_t[i]} for s ≤ t, 0 for a later s: (n, n, d_k), each
    channel's product of its decays taken directly (kernels/deltanet.decay_mask), never from running sums."""
    return decay_mask(g)


def channel_weights(q: Matrix, k: Matrix, g: Matrix) -> Matrix:
    """A[t, s] = Σ_i q_t[i]·e^{G_t[i] − G_s[i]}·k_s[i]: what o_t = Σ_s A[t, s]·δ_s weighs each correction by (n, n)."""
    weights: Matrix = np.einsum("ti,si,tsi->ts", q, k, channel_mask(g))
    return weights


@dataclass(frozen=True, eq=False)
class ChannelGates:
    """g and β for every token, head and key channel as Kimi Linear computes them; every array read-only."""

    low: Matrix  # (n, r) X̂·W_fa, the low-rank bottleneck (r = d_k in Kimi Linear)
    a: Matrix  # (n, H, d_k) low·W_fb + dt_bias, the softplus's input
    softplus: Matrix  # (n, H, d_k) ln(1 + e^a), or a itself past 20
    rate: Matrix  # (H,) e^{A_log}
    g: Matrix  # (n, H, d_k) −rate·softplus: each channel's log decay
    b: Matrix  # (n, H) X̂·W_b
    beta: Matrix  # (n, H) σ(b)


def softplus(a: Matrix, policy: Policy = EXACT) -> Matrix:
    """ln(1 + e^a) as Kimi Linear takes it: a itself past 20 (the two differ by under 2.1e-9 there)."""
    with np.errstate(over="ignore"):
        return policy.worked(np.where(a > SOFTPLUS_THRESHOLD, a, np.logaddexp(0.0, a)))


def channel_gates(X: Matrix, W_fa: Matrix, W_fb: Matrix, A_log: Matrix, dt_bias: Matrix, W_b: Matrix,
                  policy: Policy = EXACT) -> ChannelGates:
    """X (n, d_model); W_fa (d_model, r), W_fb (r, H·d_k), A_log (H,), dt_bias (H·d_k,), W_b (d_model, H).

    g[t, h, i] = −e^{A_log[h]}·softplus(((X·W_fa)·W_fb)[t, h·d_k + i] + dt_bias[h·d_k + i]); β = σ(X·W_b)."""
    n, heads = X.shape[0], len(A_log)
    d_k = W_fb.shape[1] // heads
    low = policy.table(policy.matmul(X, W_fa))  # (n, r)
    a = policy.table(policy.matmul(low, W_fb) + dt_bias[None, :]).reshape(n, heads, d_k)
    sp = softplus(a, policy)  # (n, H, d_k)
    rate = policy.worked(decay_rate(np.asarray(A_log, dtype=float)))  # (H,)
    with np.errstate(invalid="ignore"):  # ∞·0 only where A_log overflows and the softplus is 0: NaN, as the model
        g = policy.table(-rate[None, :, None] * sp)  # (n, H, d_k)
    b = policy.table(policy.matmul(X, W_b))  # (n, H)
    beta = sigmoid(b, policy)  # (n, H)
    _frozen(low, a, sp, rate, g, b, beta)
    return ChannelGates(low, a, sp, rate, g, b, beta)


@dataclass(frozen=True, eq=False)
class SigmoidNorm:
    """One head's output norm as Kimi Linear gates it: rmsnorm(o)·γ·σ(z) (σ, where Qwen3-Next's uses silu)."""

    mean_sq: Matrix  # (n,) mean of o² of each row
    root: Matrix  # (n,) √(mean + eps)
    normed: Matrix  # (n, d_v) o / root · γ
    z: Matrix  # (n, d_v) the gate's input, (X̂·W_ga)·W_gb
    sig_z: Matrix  # (n, d_v) σ(z)
    out: Matrix  # (n, d_v) normed ⊙ σ(z): what W_O reads


def sigmoid_norm(o: Matrix, z: Matrix, gamma: Matrix, eps: float, policy: Policy = EXACT) -> SigmoidNorm:
    normed = normalise(policy, "rms", o, gamma, None, eps)
    sig_z = sigmoid(z, policy)  # (n, d_v)
    out = policy.table(normed.X_norm * sig_z)  # (n, d_v)
    z_kept = np.array(z, dtype=np.float64)
    _frozen(sig_z, out, z_kept)
    return SigmoidNorm(normed.spread, normed.root, normed.X_norm, z_kept, sig_z, out)


@dataclass(frozen=True, eq=False)
class KdaLayerWeights:
    """One Kimi Delta Attention layer's weights in the x·W orientation, heads side by side in the columns."""

    num_heads: int
    d_k: int  # Kimi Linear's linear_head_dim: queries, keys and values all this wide
    W_Q: Matrix  # (d_model, H·d_k)
    W_K: Matrix  # (d_model, H·d_k)
    W_V: Matrix  # (d_model, H·d_k)
    conv_q: Matrix  # (K, H·d_k) taps, the current token's last
    conv_k: Matrix  # (K, H·d_k)
    conv_v: Matrix  # (K, H·d_k)
    W_fa: Matrix  # (d_model, r) the forget gate's low-rank pair
    W_fb: Matrix  # (r, H·d_k)
    A_log: Matrix  # (H,)
    dt_bias: Matrix  # (H·d_k,)
    W_b: Matrix  # (d_model, H)
    W_ga: Matrix  # (d_model, r) the output gate's low-rank pair
    W_gb: Matrix  # (r, H·d_k)
    gamma_o: Matrix  # (d_k,) the output norm's gain, shared by the heads
    eps: float
    W_O: Matrix  # (H·d_k, d_model)


@dataclass(frozen=True, eq=False)
class KdaLayer:
    """Everything one layer computed, from the normed stream to out_proj."""

    conv: tuple[Convolved, Convolved, Convolved]  # q, k, v across every head's columns
    gates: ChannelGates
    heads: tuple[KdaForward, ...]
    norms: tuple[SigmoidNorm, ...]
    output: Matrix  # (n, d_model)


def kda_layer(w: KdaLayerWeights, x: Matrix, policy: Policy = EXACT) -> KdaLayer:
    """The layer for the normed stream x (n, d_model), as transformers' KimiLinearDeltaAttention computes it:
    silu(conv(x·W)) for q, k, v; the channel gates; the rule per head; rmsnorm(o)·γ·σ(z); every head times W_O."""
    conv = (causal_conv(policy.matmul(x, w.W_Q), w.conv_q, policy),
            causal_conv(policy.matmul(x, w.W_K), w.conv_k, policy),
            causal_conv(policy.matmul(x, w.W_V), w.conv_v, policy))
    gates = channel_gates(x, w.W_fa, w.W_fb, w.A_log, w.dt_bias, w.W_b, policy)
    z_all = policy.table(policy.matmul(policy.table(policy.matmul(x, w.W_ga)), w.W_gb))  # (n, H·d_k)
    d = w.d_k
    heads, norms = [], []
    for h in range(w.num_heads):
        cols = slice(h * d, (h + 1) * d)
        head = kda_forward(conv[0].out[:, cols], conv[1].out[:, cols], conv[2].out[:, cols], gates.g[:, h],
                           gates.beta[:, h], policy)
        heads.append(head)
        norms.append(sigmoid_norm(head.output, z_all[:, cols], w.gamma_o, w.eps, policy))
    output = policy.table(policy.matmul(np.concatenate([nm.out for nm in norms], axis=1), w.W_O))  # (n, d_model)
    _frozen(output)
    return KdaLayer(conv, gates, tuple(heads), tuple(norms), output)
