"""A Hugging Face "mamba2" layer's mixer (transformers ``Mamba2Mixer``) as an ``[ssd]`` scenario.

The tensors, as transformers names them under a layer's ``mixer.`` (nn.Linear (out, in), transposed here):
``in_proj.weight`` ([z | x B C | dt] rows: I, I + 2·G·N, H with I = num_heads·head_dim), ``conv1d.weight``
(channels, 1, K) and ``conv1d.bias`` (the causal depthwise convolution over x, B and C), ``dt_bias``, ``A_log``
(A = −e^A_log), ``D``, ``norm.weight`` (MambaRMSNormGated's γ, over n_groups groups) and ``out_proj.weight``;
``in_proj.bias`` and ``out_proj.bias`` where the config's use_bias says so.

What the table shows of the layer: z, x, B and C as the mixer computes them on the layer's input (in_proj,
then the convolution and SiLU for x, B, C), given to [ssd] as numbers; dt from its own columns of in_proj
(``W_dt``, with in_proj's dt bias folded into ``dt_bias``) so the Steps stage works softplus; A, D, the gated
norm's γ and eps; out_proj as W_O. The scenario's heads are one per SSD head (head_dim wide W_V, not read).

A "mamba2" folder opens through importers/hf_mamba2_folder.py, which reads each layer's mixer here, and so does
a Nemotron-H hybrid's Mamba-2 layer (importers/hf_nemotron_h.py). tests/test_hf_mamba2_layer.py compares this
with transformers' Mamba2Mixer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from qkv_tui.importers.errors import ImporterError
from qkv_tui.kernels.policy import EXACT
from qkv_tui.kernels.ssd import MixerWeights, causal_conv, decay_rate, silu
from qkv_tui.kernels.stats import Matrix


def _int(config: Mapping[str, Any], key: str) -> int:
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ImporterError(f"config.json: {key} = {value!r}; expected a whole number >= 1")
    return value


def _get(tensors: Mapping[str, np.ndarray], key: str, shape: tuple[int, ...]) -> Matrix:
    if key not in tensors:
        raise ImporterError(f"the checkpoint has no {key}; expected a Mamba-2 mixer's tensors")
    t = np.asarray(tensors[key], dtype=np.float64)
    if t.shape != shape:
        raise ImporterError(f"{key} has shape {t.shape}; expected {shape} from config.json")
    return t


def mixer_weights(config: Mapping[str, Any], tensors: Mapping[str, np.ndarray], prefix: str) -> MixerWeights:
    """The mixer under ``prefix`` (e.g. "backbone.layers.0.mixer.") in the x·W orientation."""
    H, P, G, N = (_int(config, k) for k in ("num_heads", "head_dim", "n_groups", "state_size"))
    d_model, K = _int(config, "hidden_size"), _int(config, "conv_kernel")
    if H % G:
        raise ImporterError(f"config.json: n_groups = {G} does not divide num_heads = {H}")
    inner = H * P
    conv_width = inner + 2 * G * N
    width = 2 * inner + 2 * G * N + H
    W_in = _get(tensors, prefix + "in_proj.weight", (width, d_model)).T
    conv = _get(tensors, prefix + "conv1d.weight", (conv_width, 1, K))[:, 0, :]
    conv_b = _get(tensors, prefix + "conv1d.bias", (conv_width,)) if prefix + "conv1d.bias" in tensors else None
    b_in = _get(tensors, prefix + "in_proj.bias", (width,)) if prefix + "in_proj.bias" in tensors else None
    b_out = _get(tensors, prefix + "out_proj.bias", (d_model,)) if prefix + "out_proj.bias" in tensors else None
    limit = config.get("time_step_limit", (0.0, float("inf")))
    if not isinstance(limit, Sequence) or len(limit) != 2:
        raise ImporterError(f"config.json: time_step_limit = {limit!r}; expected two numbers")
    eps = config.get("layer_norm_epsilon", 1e-5)
    return MixerWeights(H, P, G, N, W_in, conv, conv_b, _get(tensors, prefix + "dt_bias", (H,)),
                        decay_rate(_get(tensors, prefix + "A_log", (H,))), _get(tensors, prefix + "D", (H,)),
                        _get(tensors, prefix + "norm.weight", (inner,)), float(eps),
                        _get(tensors, prefix + "out_proj.weight", (d_model, inner)).T, b_in, b_out,
                        (float(limit[0]), float(limit[1])))


DESCRIPTION = ("A Mamba-2 layer (Hugging Face mamba2, transformers Mamba2Mixer) on its input: z, x, B and C as the"
               " mixer computes them, dt from in_proj, then the SSD both ways, the z-gate, the grouped RMSNorm and"
               " out_proj as W_O.")


def mixer_table(X: Matrix, w: MixerWeights) -> dict[str, Any]:
    """The [ssd] table, as scenario data, of the mixer on its input X (n, d_model): z, x, B and C as the mixer makes
    them, dt's columns of in_proj with their bias, A, D, the gated norm's γ and eps."""
    inner, GN, H = w.num_heads * w.head_dim, w.groups * w.d_state, w.num_heads
    proj = X @ w.W_in + (0.0 if w.b_in is None else w.b_in[None, :])
    z, xBC_raw = proj[:, :inner], proj[:, inner:2 * inner + 2 * GN]
    xBC = silu(causal_conv(xBC_raw, w.conv_w, w.conv_b, EXACT))
    x, B, C = xBC[:, :inner], xBC[:, inner:inner + GN], xBC[:, inner + GN:]
    W_dt = w.W_in[:, 2 * inner + 2 * GN:]
    dt_bias = w.dt_bias + (0.0 if w.b_in is None else w.b_in[2 * inner + 2 * GN:])
    table: dict[str, Any] = {
        "num_heads": H, "num_groups": w.groups, "A": w.A.tolist(), "W_dt": W_dt, "dt_bias": dt_bias.tolist(),
        "dt_min": w.dt_limit[0], "B": B, "C": C, "x": x, "D": w.D.tolist(), "z": z,
        "gamma": None if w.gamma is None else w.gamma.tolist(), "eps": w.eps,
    }
    if np.isfinite(w.dt_limit[1]):
        table["dt_max"] = w.dt_limit[1]
    return table
