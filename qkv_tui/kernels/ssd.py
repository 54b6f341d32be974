"""Mamba-2's state-space duality (Dao and Gu 2024): one layer written as a recurrence and as masked attention.

Per head: a step dt_t = softplus(the projection's dt + dt_bias) (clamped to the model's limits), a decay
a_t = e^(dt_t·A) with A < 0, and from x_t (d wide) and B_t, C_t (d_state wide):

    recurrence   h_t = a_t·h_{t−1} + (dt_t·x_t)ᵀ·B_t      (d × d_state, every cell kept)
                 y_t = h_t·C_t + D·x_t
    attention    y = (L ∘ C·Bᵀ)·(dt·x) + D·x,   L[i,j] = Π_{k=j+1..i} a_k (1 on the diagonal, 0 above)

transformers' chunked scan (``mamba2_chunk_scan``) multiplies x by dt (hidden_states * dt) and leaves B as it
is; its one-token step (``mamba2_selective_state_update``) multiplies B by dt instead. The product is the
same; here dt goes with x, as the scan and the paper's attention form write it. softplus follows torch's
(and mamba_ssm's kernels'): above 20 it is the input itself. Heads share B and C within a group:
head h reads group h // (H / G), as transformers' repeat_interleave.

A Mamba-2 layer (transformers ``Mamba2Mixer``) around this: in_proj gives [z | x B C | dt]; x, B, C go through
a causal depthwise convolution and SiLU; after the SSD, y·SiLU(z) is RMS-normalised group by group
(``MambaRMSNormGated``, norm_before_gate=False) and projected out (contracts §15).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qkv_tui.kernels.norm import normalise
from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.stats import Matrix

SOFTPLUS_THRESHOLD = 20.0  # torch.nn.functional.softplus's default, and mamba_ssm's: above it softplus(x) = x
NO_LIMIT = (0.0, float("inf"))  # Mamba2Config.time_step_limit's default


@dataclass(frozen=True, eq=False)
class SsdHead:
    """One head both ways, every number as the policy kept it."""

    A: float  # < 0
    D: float
    dt: Matrix  # (n,) the step of each token
    a: Matrix  # (n,) e^(dt·A), the per-token decay
    x: Matrix  # (n, d) the value stream
    xdt: Matrix  # (n, d) dt·x
    B: Matrix  # (n, d_state)
    C: Matrix  # (n, d_state)
    states: Matrix  # (n, d, d_state) h_t after token t
    y_recurrent: Matrix  # (n, d)
    L: Matrix  # (n, n) the cumulative decay: 1 on the diagonal, 0 above
    G: Matrix  # (n, n) C·Bᵀ
    M: Matrix  # (n, n) L ∘ C·Bᵀ, the attention form's map
    y_attention: Matrix  # (n, d)

    @property
    def y(self) -> Matrix:
        return self.y_attention

    @property
    def gap(self) -> float:
        """The largest difference between the two forms' outputs (0 up to float64 noise in exact arithmetic)."""
        return float(np.max(np.abs(self.y_recurrent - self.y_attention), initial=0.0))


@dataclass(frozen=True, eq=False)
class SsdHeads:
    heads: tuple[SsdHead, ...]
    y: Matrix  # (n, H·d) every head's y side by side (the attention form's)

    def fields(self) -> dict[str, list[dict[str, Matrix]]]:
        """What the JSON export's ``"ssd"`` carries (contracts §15): each head's dt, a, L and y."""
        return {"heads": [{"dt": h.dt, "a": h.a, "L": h.L, "y": h.y} for h in self.heads]}


def decay_rate(A_log: Matrix) -> Matrix:
    """Each head's A = −e^A_log (< 0): the models keep its log, so that a step's decay e^(dt·A) stays below 1."""
    rate: Matrix = -np.exp(A_log)
    return rate


def softplus(x: Matrix) -> Matrix:
    """log(1 + eˣ), and x itself above the threshold, as torch computes it."""
    with np.errstate(over="ignore"):
        out: Matrix = np.where(x > SOFTPLUS_THRESHOLD, x, np.logaddexp(0.0, np.minimum(x, SOFTPLUS_THRESHOLD)))
    return out


def silu(x: Matrix) -> Matrix:
    """x·σ(x), safe for large |x|."""
    with np.errstate(over="ignore"):
        out: Matrix = x / (1.0 + np.exp(-x))
    return out


def steps(dt_raw: Matrix, dt_bias: Matrix, limit: tuple[float, float] = NO_LIMIT, policy: Policy = EXACT) -> Matrix:
    """Each token's and head's dt = clamp(softplus(dt_raw + dt_bias)): (n, H)."""
    summed = policy.worked(dt_raw + dt_bias[None, :])
    return policy.table(np.clip(policy.worked(softplus(summed)), limit[0], limit[1]))


def decay_mask(a: Matrix, policy: Policy = EXACT) -> Matrix:
    """L[i,j] = a_{j+1}·…·a_i for j ≤ i (1 on the diagonal), 0 above: each product from the one to its right."""
    n = a.shape[0]
    L = np.eye(n)
    below = np.tril(np.ones((n, n), dtype=bool), -1)
    for j in range(n - 2, -1, -1):  # a column at a time, from the diagonal leftwards: each row's products at once
        L[:, j] = np.where(below[:, j], policy.worked(L[:, j + 1] * a[j + 1]), L[:, j])
    return policy.table(L)


def ssd_head(x: Matrix, dt: Matrix, A: float, B: Matrix, C: Matrix, D: float, policy: Policy = EXACT) -> SsdHead:
    """One head, x (n, d), dt (n,), B and C (n, d_state): both forms."""
    n, d = x.shape
    N = B.shape[1]
    a = policy.table(policy.worked(np.exp(policy.worked(dt * A))))  # (n,)
    xdt = policy.table(policy.worked(dt[:, None] * x))  # (n, d)
    skip = policy.worked(D * x)  # (n, d)
    states = np.zeros((n, d, N))
    y_rec = np.zeros((n, d))
    h = np.zeros((d, N))
    for t in range(n):
        h = policy.table(policy.worked(policy.worked(a[t] * h) + policy.worked(xdt[t][:, None] * B[t][None, :])))
        states[t] = h
        y_rec[t] = policy.worked(policy.matmul(h, C[t][:, None])[:, 0] + skip[t])
    L = decay_mask(a, policy)
    G = policy.table(policy.matmul(C, B.T))  # (n, n)
    M = policy.table(policy.worked(L * G))  # (n, n), 0 above the diagonal
    y_att = policy.table(policy.worked(policy.matmul(M, xdt) + skip))
    return SsdHead(float(A), float(D), dt, a, x, xdt, B, C, states, policy.table(y_rec), L, G, M, y_att)


def ssd(x: Matrix, dt: Matrix, A: Matrix, B: Matrix, C: Matrix, D: Matrix, groups: int = 1,
        policy: Policy = EXACT) -> SsdHeads:
    """Every head: x (n, H·d), dt (n, H) (after softplus), A and D (H,), B and C (n, G·d_state)."""
    H = A.shape[0]
    d = x.shape[1] // H
    N = B.shape[1] // groups
    per_group = H // groups
    heads = []
    for h in range(H):
        g = h // per_group
        heads.append(ssd_head(x[:, h * d:(h + 1) * d], dt[:, h], float(A[h]), B[:, g * N:(g + 1) * N],
                              C[:, g * N:(g + 1) * N], float(D[h]), policy))
    y = np.concatenate([head.y_attention for head in heads], axis=1)
    return SsdHeads(tuple(heads), y)


def gated_norm(y: Matrix, z: Matrix, gamma: Matrix, groups: int, eps: float, policy: Policy = EXACT) -> Matrix:
    """Mamba-2's output norm: y·SiLU(z), then RMSNorm over each group's columns, times γ: (n, width)."""
    gated = policy.table(policy.worked(y * policy.worked(silu(z))))
    size = y.shape[1] // groups
    parts = [normalise(policy, "rms", gated[:, g * size:(g + 1) * size], gamma[g * size:(g + 1) * size], None, eps).X_norm
             for g in range(groups)]
    return np.concatenate(parts, axis=1)


@dataclass(frozen=True, eq=False)
class MixerWeights:
    """A Mamba-2 layer's weights, in transformers' ``Mamba2Mixer`` layout (matrices as X·W, not nn.Linear's)."""

    num_heads: int
    head_dim: int
    groups: int
    d_state: int
    W_in: Matrix  # (d_model, 2·I + 2·G·N + H): [z | x | B | C | dt], I = num_heads·head_dim
    conv_w: Matrix  # (I + 2·G·N, K) each channel's causal kernel, oldest tap first
    conv_b: Matrix | None  # (I + 2·G·N,)
    dt_bias: Matrix  # (H,)
    A: Matrix  # (H,) = −e^(A_log)
    D: Matrix  # (H,)
    gamma: Matrix  # (I,) the gated norm's gain
    eps: float
    W_out: Matrix  # (I, d_model)
    b_in: Matrix | None = None
    b_out: Matrix | None = None
    dt_limit: tuple[float, float] = NO_LIMIT


@dataclass(frozen=True, eq=False)
class Mixed:
    z: Matrix  # (n, I)
    xBC: Matrix  # (n, I + 2·G·N) after the convolution and SiLU
    dt: Matrix  # (n, H)
    ssd: SsdHeads
    normed: Matrix  # (n, I) after the gate and the grouped norm
    output: Matrix  # (n, d_model)


def causal_conv(u: Matrix, kernel: Matrix, bias: Matrix | None, policy: Policy = EXACT) -> Matrix:
    """Each channel's causal convolution: out[t] = Σ_k kernel[:, k]·u[t − K + 1 + k] (zeros before the start)."""
    n, K = u.shape[0], kernel.shape[1]
    padded = np.concatenate([np.zeros((K - 1, u.shape[1])), u], axis=0)
    out = sum(policy.worked(kernel[:, k][None, :] * padded[k:k + n]) for k in range(K))
    if bias is not None:
        out = out + bias[None, :]
    return policy.table(policy.worked(np.asarray(out)))


def mixer(X: Matrix, w: MixerWeights, policy: Policy = EXACT) -> Mixed:
    """A Mamba-2 layer on X (n, d_model), as transformers' Mamba2Mixer computes it without a cache."""
    width = w.num_heads * w.head_dim
    GN = w.groups * w.d_state
    proj = policy.matmul(X, w.W_in)
    if w.b_in is not None:
        proj = proj + w.b_in[None, :]
    proj = policy.table(proj)
    z, xBC_raw, dt_raw = proj[:, :width], proj[:, width:2 * width + 2 * GN], proj[:, 2 * width + 2 * GN:]
    xBC = policy.table(policy.worked(silu(causal_conv(xBC_raw, w.conv_w, w.conv_b, policy))))
    x, B, C = xBC[:, :width], xBC[:, width:width + GN], xBC[:, width + GN:]
    dt = steps(dt_raw, w.dt_bias, w.dt_limit, policy)
    out = ssd(x, dt, w.A, B, C, w.D, w.groups, policy)
    normed = gated_norm(out.y, z, w.gamma, w.groups, w.eps, policy)
    output = policy.matmul(normed, w.W_out)
    if w.b_out is not None:
        output = output + w.b_out[None, :]
    return Mixed(z, xBC, dt, out, normed, policy.table(output))
