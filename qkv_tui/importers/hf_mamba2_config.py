"""A Hugging Face "mamba2" config.json, with the defaults transformers' Mamba2Config fills in (transformers 5.24).

save_pretrained leaves out every key whose value is the class's default, so a folder's config.json may say nothing
of conv_kernel or n_groups; the defaults here are the class's. What the [ssd] scenario cannot compute is one line:
an activation of the convolution other than SiLU (kernels/ssd.py's mixer applies SiLU, as every released Mamba-2
does), and a config whose hidden_size·expand is not num_heads·head_dim (Mamba2Config refuses it as well).
"""

from __future__ import annotations

import math
from typing import Any

from qkv_tui.base.values import show as _show
from qkv_tui.importers.errors import ImporterError

MAMBA2_TYPES = ("mamba2",)
CONTEXT = 2048  # Mamba-2 has no position limit of its own; its checkpoints were trained on 2,048-token sequences
_DEFAULTS: dict[str, Any] = {
    "num_heads": 128, "head_dim": 64, "hidden_size": 4096, "state_size": 128, "num_hidden_layers": 64,
    "layer_norm_epsilon": 1e-5, "expand": 2, "conv_kernel": 4, "n_groups": 8, "use_bias": False, "use_conv_bias": True,
    "hidden_act": "silu", "time_step_limit": [0.0, math.inf],
}
_SILU = ("silu", "swish")  # ACT2FN's two names of x·σ(x)


def _whole(name: str, data: dict[str, Any], key: str) -> int:
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ImporterError(f"{name}: {key} = {value!r}; expected a whole number >= 1")
    return value


def mamba2_defaults(name: str, data: dict[str, Any]) -> dict[str, Any]:
    """The config as Mamba2Config holds it, every key it defaults filled in where the file leaves it out, checked."""
    out = dict(data)
    for key, value in _DEFAULTS.items():
        if out.get(key) is None:
            out[key] = value
    H, P, d = (_whole(name, out, key) for key in ("num_heads", "head_dim", "hidden_size"))
    expand = out["expand"]
    if isinstance(expand, bool) or not isinstance(expand, (int, float)) or not 0 < expand < math.inf:
        raise ImporterError(f"{name}: expand = {expand!r}; expected a number > 0")
    if int(expand * d) != H * P:  # Mamba2Mixer's intermediate_size is int(expand·hidden_size), cut into H heads of P
        raise ImporterError(f"{name}: hidden_size·expand = {int(expand * d)} is not num_heads·head_dim = {H * P};"
                            " expected a consistent Mamba-2 config (transformers refuses it too)")
    G = _whole(name, out, "n_groups")
    if H % G:
        raise ImporterError(f"{name}: n_groups = {G} does not divide num_heads = {H}; expected a divisor (each group's"
                            " heads share one B and C)")
    act = out["hidden_act"]
    if act not in _SILU:
        raise ImporterError(f"{name}: hidden_act {_show(act)} is not supported for mamba2; expected 'silu' (the"
                            " activation after the convolution over x, B and C, as [ssd]'s mixer computes it)")
    out["time_step_limit"] = _limit(name, out["time_step_limit"])
    if out.get("quantization_config") is not None:
        raise ImporterError(f"{name}: quantization_config is set; expected unquantised weights (qkv-tui reads float32,"
                            " float16 and bfloat16 tensors)")
    return out


def _end(value: Any) -> float | None:
    """A number, or transformers 5's spelling of one JSON cannot hold ({"__float__": "Infinity"})."""
    if isinstance(value, dict) and list(value) == ["__float__"]:
        value = {"Infinity": math.inf}.get(value["__float__"])
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _limit(name: str, value: Any) -> list[float]:
    """time_step_limit as two numbers 0 <= low < high (high may be ∞): what each step dt is clamped to."""
    low, high = [_end(v) for v in value] if isinstance(value, list) and len(value) == 2 else (None, None)
    if low is None or high is None or not 0 <= low < high:
        raise ImporterError(f"{name}: time_step_limit = {value!r}; expected two numbers 0 <= low < high (the clamp of"
                            " each step dt)")
    return [low, high]
