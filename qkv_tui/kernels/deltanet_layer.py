"""A whole Gated DeltaNet layer (Qwen3-Next's and Qwen3.5's linear attention), from the normed stream to out_proj.

Per value head h: q, k, v = silu(conv(X̂·W_Q)), … (kernels/deltanet_parts.py); g and β from W_a, W_b, A_log and
dt_bias (kernels/deltanet.py's gates); the delta rule; rmsnorm(o)·γ·silu(X̂·W_Z); every head side by side,
times W_O. The query and key columns are already repeated per value head (repeat_interleave), so each value
head reads its own copy: the convolution is depthwise, so a repeated channel convolves exactly as the shared one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qkv_tui.kernels.deltanet import deltanet_forward, gates
from qkv_tui.kernels.deltanet_parts import causal_conv, gated_norm
from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.stats import Matrix


@dataclass(frozen=True, eq=False)
class DeltaLayerWeights:
    """One layer's weights in the x·W orientation, heads side by side in the columns (one head per value head)."""

    num_heads: int  # value heads: each keeps its own state
    d_k: int
    d_v: int
    W_Q: Matrix  # (d_model, H·d_k)
    W_K: Matrix  # (d_model, H·d_k)
    W_V: Matrix  # (d_model, H·d_v)
    W_Z: Matrix  # (d_model, H·d_v) the output gate's input
    W_a: Matrix  # (d_model, H)
    W_b: Matrix  # (d_model, H)
    A_log: Matrix  # (H,)
    dt_bias: Matrix  # (H,)
    conv_q: Matrix  # (K, H·d_k) taps, the current token's last
    conv_k: Matrix  # (K, H·d_k)
    conv_v: Matrix  # (K, H·d_v)
    gamma_o: Matrix  # (d_v,) the gated norm's gain, shared by the heads
    eps: float
    W_O: Matrix  # (H·d_v, d_model)


def deltanet_layer(w: DeltaLayerWeights, x: Matrix, policy: Policy = EXACT) -> Matrix:
    """The layer's output (n, d_model) for the normed stream x (n, d_model)."""
    q_all = causal_conv(policy.matmul(x, w.W_Q), w.conv_q, policy).out  # (n, H·d_k)
    k_all = causal_conv(policy.matmul(x, w.W_K), w.conv_k, policy).out  # (n, H·d_k)
    v_all = causal_conv(policy.matmul(x, w.W_V), w.conv_v, policy).out  # (n, H·d_v)
    z_all = policy.matmul(x, w.W_Z)  # (n, H·d_v)
    g, beta = gates(x, w.W_a, w.W_b, w.A_log, w.dt_bias, policy)  # (n, H) each
    d_k, d_v = w.d_k, w.d_v
    outputs = []
    for h in range(w.num_heads):
        ks, vs = slice(h * d_k, (h + 1) * d_k), slice(h * d_v, (h + 1) * d_v)
        o = deltanet_forward(q_all[:, ks], k_all[:, ks], v_all[:, vs], g[:, h], beta[:, h], policy).output  # (n, d_v)
        outputs.append(gated_norm(o, z_all[:, vs], w.gamma_o, w.eps, policy).out)
    out: Matrix = policy.matmul(np.concatenate(outputs, axis=1), w.W_O)  # (n, d_model)
    return out
