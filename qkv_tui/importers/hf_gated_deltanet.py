"""The linear-attention layers (Gated DeltaNet) of "qwen3_next" and "qwen3_5" folders, read as transformers reads them.

Both keep num_k_heads query/key heads and num_v_heads value heads (each query/key head serves
num_v_heads / num_k_heads consecutive value heads, ``repeat_interleave``): the columns of W_Q and W_K are
repeated here so every value head is a head of its own, which is exact. The projections (nn.Linear, (out, in),
transposed here):
- Qwen3-Next fuses them: ``in_proj_qkvz`` holds, per query/key head, [q (d_k) | k (d_k) | v (r·d_v) | z (r·d_v)]
  with r = num_v_heads / num_k_heads, and ``in_proj_ba`` per query/key head [b (r) | a (r)];
- Qwen3.5 keeps them apart: ``in_proj_qkv`` (every q, then every k, then every v), ``in_proj_z``, ``in_proj_b``,
  ``in_proj_a``.
Then ``conv1d`` (one kernel of linear_conv_kernel_dim taps per channel of [q | k | v], channels in that
order), ``A_log``, ``dt_bias``, ``norm`` (the gated RMSNorm's γ, stored as is) and ``out_proj``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qkv_tui.base.values import show as _show
from qkv_tui.importers.errors import ImporterError
from qkv_tui.importers.hf_config import Config
from qkv_tui.importers.safetensors_raw import TensorFiles
from qkv_tui.importers.stack import Array, Attention
from qkv_tui.kernels.deltanet_layer import DeltaLayerWeights

DEFAULTS = (("linear_num_key_heads", 16), ("linear_num_value_heads", 32), ("linear_key_head_dim", 128),
            ("linear_value_head_dim", 128), ("linear_conv_kernel_dim", 4))


def _sizes(config: Config) -> tuple[int, int, int, int, int]:
    """(num_k_heads, num_v_heads, d_k, d_v, K) with transformers' defaults."""
    out = []
    for key, default in DEFAULTS:
        value = config.raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ImporterError(f"config.json: {key} = {value!r}; expected a whole number >= 1")
        out.append(value)
    k_heads, v_heads = out[0], out[1]
    if v_heads % k_heads:
        raise ImporterError(f"config.json: linear_num_key_heads = {k_heads} does not divide linear_num_value_heads ="
                            f" {v_heads} (each key head serves the same number of value heads)")
    if config.activation != "silu":
        raise ImporterError(f"config.json: hidden_act {config.activation!r} is not supported for the linear-attention"
                            " layers; their short convolution and gated norm are read with SiLU, as released")
    return out[0], out[1], out[2], out[3], out[4]


def _repeat(W: Array, heads: int, width: int, times: int) -> Array:
    """Columns of ``heads`` heads of ``width`` each, every head's block repeated ``times`` times in place."""
    return np.ascontiguousarray(np.repeat(W.reshape(W.shape[0], heads, width), times, axis=1).reshape(W.shape[0], -1))


def read_linear(config: Config, tensors: TensorFiles, a: str) -> DeltaLayerWeights:
    """Layer weights under ``a`` (".linear_attn." of a layer), one head per value head."""
    d = config.d_model
    hk, hv, d_k, d_v, taps = _sizes(config)
    r = hv // hk
    get = tensors.get
    if a + "conv1d.bias" in tensors:
        raise ImporterError("the checkpoint's linear_attn.conv1d has a bias; the short convolution is read without one")
    if config.model_type == "qwen3_next":
        per = 2 * d_k + 2 * r * d_v
        qkvz = get(a + "in_proj_qkvz.weight", (hk * per, d)).T.reshape(d, hk, per)  # (d, H_k, [q|k|v|z])
        W_q, W_k = qkvz[:, :, :d_k].reshape(d, -1), qkvz[:, :, d_k:2 * d_k].reshape(d, -1)
        W_V = qkvz[:, :, 2 * d_k:2 * d_k + r * d_v].reshape(d, hv * d_v)  # value heads in order
        W_Z = qkvz[:, :, 2 * d_k + r * d_v:].reshape(d, hv * d_v)
        ba = get(a + "in_proj_ba.weight", (2 * hv, d)).T.reshape(d, hk, 2 * r)  # (d, H_k, [b | a])
        W_b, W_a = ba[:, :, :r].reshape(d, hv), ba[:, :, r:].reshape(d, hv)
    else:
        qkv = get(a + "in_proj_qkv.weight", (2 * hk * d_k + hv * d_v, d)).T  # (d, [q | k | v])
        W_q, W_k, W_V = qkv[:, :hk * d_k], qkv[:, hk * d_k:2 * hk * d_k], qkv[:, 2 * hk * d_k:]
        W_Z = get(a + "in_proj_z.weight", (hv * d_v, d)).T
        W_b, W_a = get(a + "in_proj_b.weight", (hv, d)).T, get(a + "in_proj_a.weight", (hv, d)).T
    conv = get(a + "conv1d.weight", (2 * hk * d_k + hv * d_v, 1, taps))[:, 0, :].T  # (K, channels of [q | k | v])
    key_width = hk * d_k
    return DeltaLayerWeights(
        hv, d_k, d_v, _repeat(W_q, hk, d_k, r), _repeat(W_k, hk, d_k, r), np.ascontiguousarray(W_V),
        np.ascontiguousarray(W_Z), np.ascontiguousarray(W_a), np.ascontiguousarray(W_b),
        get(a + "A_log", (hv,)), get(a + "dt_bias", (hv,)),
        _repeat(conv[:, :key_width], hk, d_k, r), _repeat(conv[:, key_width:2 * key_width], hk, d_k, r),
        np.ascontiguousarray(conv[:, 2 * key_width:]), get(a + "norm.weight", (d_v,)), config.eps,
        get(a + "out_proj.weight", (d, hv * d_v)).T,
    )


def as_heads(w: DeltaLayerWeights) -> Attention:
    """The layer as plain heads hold it (one per value head, no sharing): the shapes the checks and views read."""
    return Attention(w.W_Q, w.W_K, w.W_V, w.W_O, None, None, None, None, w.num_heads, w.num_heads)


def deltanet_table(w: DeltaLayerWeights) -> dict[str, Any]:
    """The [deltanet] table of the layer, as a scenario file spells it (docs/scenario-format.md, [deltanet])."""
    return {"W_a": w.W_a, "W_b": w.W_b, "A_log": w.A_log.tolist(), "dt_bias": w.dt_bias.tolist(),
            "conv_q": w.conv_q, "conv_k": w.conv_k, "conv_v": w.conv_v, "W_Z": w.W_Z,
            "gamma_o": w.gamma_o.tolist(), "eps_o": w.eps}


def only_every_head_dn(name: str) -> ImporterError:
    return ImporterError(
        f"{_show(name)}: a linear-attention layer opens as one [deltanet] scenario of every value head (its short"
        " convolution and gated norm are cut from the whole layer's matrices); leave out model.heads"
    )


def linear_note(config: Config) -> str:
    hk, hv, _, _, taps = _sizes(config)
    name = "Qwen3-Next" if config.model_type == "qwen3_next" else "Qwen3.5"
    shared = (f" Each of its {hk} query/key heads serves {hv // hk} value heads, so each head here carries a copy of its"
              " query and key columns (exact: the convolution is per channel).") if hv != hk else ""
    return (f"A linear-attention layer of {name} (Gated DeltaNet): one head per value head, its Q, K and V through a"
            f" causal convolution of {taps} taps and SiLU, then the gated delta rule, then rmsnorm(o)·γ·silu(X̂·W_Z)"
            f" before W_O (out_proj). Its norms before the layer multiply by 1 + γ (the checkpoint stores γ − 1);"
            f" the gated norm's γ is stored as is.{shared}")
