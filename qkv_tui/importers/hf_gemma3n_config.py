"""Gemma 3n's config.json (model_type "gemma3n" with a text_config, or "gemma3n_text"), read as transformers'
Gemma3nTextConfig holds it (transformers 5.24), and its cross-layer KV sharing rule.

Defaults where the file leaves a key out: layer_types full at every 5th layer, sliding elsewhere, with a window of
512; intermediate_size one for every layer or a list; activation_sparsity_pattern 0.95 for the first 10 layers
when there are more than 10, 0 elsewhere; AltUp with 4 streams, the first active; num_kv_shared_layers 15.

KV sharing (Gemma3nTextConfig.kv_sharing_modes): the last num_kv_shared_layers layers compute no K and V of their
own; each reuses those of the last earlier layer of its own type (sliding or full) before them, the layer that
"stores" them. That source layer's K and V were computed from its own input, with its own weights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from qkv_tui.base.values import show as _show
from qkv_tui.importers.errors import ImporterError

GEMMA3N_TYPES = ("gemma3n", "gemma3n_text")
KINDS = ("sliding_attention", "full_attention")


def _whole(name: str, data: dict[str, Any], key: str, default: int, least: int = 1) -> int:
    value = data.get(key, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ImporterError(f"{name}: {key} = {value!r}; expected a whole number >= {least}")
    return value


def _number(name: str, data: dict[str, Any], key: str, default: float) -> float:
    value = data.get(key, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ImporterError(f"{name}: {key} = {value!r}; expected a number > 0")
    return float(value)


@dataclass(frozen=True)
class Gemma3nText:
    """The numbers of Gemma3nTextConfig the forward pass reads."""

    raw: dict[str, Any]  # the text config as the file gives it (with model_type "gemma3n_text")
    d_model: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    eps: float
    context: int
    window: int
    per_layer: int  # hidden_size_per_layer_input
    per_layer_vocab: int  # vocab_size_per_layer_input
    streams: int  # altup_num_inputs
    active: int  # altup_active_idx
    correct_scale: bool  # altup_correct_scale
    shared_layers: int  # num_kv_shared_layers
    activation: str
    dtype: str | None

    def kind(self, layer: int) -> str:
        types = self.raw.get("layer_types")
        if types is None:
            return "full_attention" if (layer + 1) % 5 == 0 else "sliding_attention"
        kind = types[layer]
        if kind not in KINDS:
            raise ImporterError(f"config.json: layer_types[{layer}] = {_show(kind)} is not supported; expected"
                                " sliding_attention or full_attention")
        return str(kind)

    def sparsity(self, layer: int) -> float:
        pattern = self.raw.get("activation_sparsity_pattern")
        if pattern is None:
            return 0.95 if self.num_layers > 10 and layer < 10 else 0.0
        value = pattern if not isinstance(pattern, list) else pattern[layer]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise ImporterError(f"config.json: activation_sparsity_pattern[{layer}] = {value!r}; expected a number"
                                " from 0 up to (not including) 1")
        return float(value)

    def kv_source(self, layer: int) -> int | None:
        """The layer whose K and V ``layer`` reuses, or None where it computes its own."""
        first_shared = self.num_layers - self.shared_layers
        if self.shared_layers == 0 or layer < first_shared:
            return None
        kind = self.kind(layer)
        for earlier in range(first_shared - 1, -1, -1):
            if self.kind(earlier) == kind:
                return earlier
        raise ImporterError(f"config.json: layer {layer} reuses the K and V of an earlier {kind} layer"
                            f" (num_kv_shared_layers = {self.shared_layers}), but no layer before {first_shared} is one")


def text_config(name: str, data: dict[str, Any], model_type: str) -> Gemma3nText:
    """The language model's config: a "gemma3n" file's text_config, or a "gemma3n_text" file itself."""
    if model_type == "gemma3n":
        nested = data.get("text_config")
        if not isinstance(nested, dict):
            raise ImporterError(f"{name}: model_type 'gemma3n' needs a text_config (its language model's config)")
        data = nested
    data = dict(data) | {"model_type": "gemma3n_text"}
    layers = _whole(name, data, "num_hidden_layers", 35)
    for key in ("layer_types", "activation_sparsity_pattern", "intermediate_size"):
        value = data.get(key)
        if isinstance(value, list) and len(value) != layers:
            raise ImporterError(f"{name}: {key} must list one entry per layer ({layers})")
    if data.get("use_bidirectional_attention"):
        raise ImporterError(f"{name}: use_bidirectional_attention = true is not supported; expected Gemma 3n's causal"
                            " decoder")
    heads, kv = _whole(name, data, "num_attention_heads", 8), _whole(name, data, "num_key_value_heads", 2)
    if heads % kv:
        raise ImporterError(f"{name}: num_key_value_heads = {kv} does not divide num_attention_heads = {heads}")
    streams = _whole(name, data, "altup_num_inputs", 4)
    active = _whole(name, data, "altup_active_idx", 0, least=0)
    if active >= streams:
        raise ImporterError(f"{name}: altup_active_idx = {active} is not below altup_num_inputs = {streams}")
    shared = _whole(name, data, "num_kv_shared_layers", 15, least=0)
    if shared >= layers:
        raise ImporterError(f"{name}: num_kv_shared_layers = {shared} leaves no layer of {layers} to compute K and V")
    head_dim = _whole(name, data, "head_dim", 256)
    if head_dim % 2:
        raise ImporterError(f"{name}: head_dim = {head_dim} is odd; RoPE needs an even head_dim")
    activation = data.get("hidden_activation", "gelu_pytorch_tanh")
    dtype = data.get("dtype", data.get("torch_dtype"))
    return Gemma3nText(
        data, _whole(name, data, "hidden_size", 2048), layers, heads, kv, head_dim,
        _number(name, data, "rms_norm_eps", 1e-6), _whole(name, data, "max_position_embeddings", 32768),
        _whole(name, data, "sliding_window", 512), _whole(name, data, "hidden_size_per_layer_input", 256),
        _whole(name, data, "vocab_size_per_layer_input", 262144), streams, active,
        data.get("altup_correct_scale", True) is not False, shared,
        activation if isinstance(activation, str) else "", dtype if isinstance(dtype, str) else None,
    )
