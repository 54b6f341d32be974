"""Kimi Linear's config.json (model_type "kimi_linear"), with the defaults transformers' KimiLinearConfig fills in.

The checkpoint keeps the linear-attention sizes in a ``linear_attn_config`` table (``num_heads``, ``head_dim``,
``short_conv_kernel_size``, and the 1-based ``kda_layers`` and ``full_attn_layers``); transformers copies them to
``linear_num_heads``, ``linear_head_dim``, ``linear_conv_kernel_dim`` and ``layer_types`` (0-based, one a layer)
and writes both when it saves. The layer types come from ``layer_types``, else from the two 1-based lists, else
transformers' default (every 4th layer from layer 4 on, 0-based, full). The MLP types come from ``mlp_layer_types``,
else the first ``first_k_dense_replace`` (default 1) layers dense, the rest sparse. Several keys have two spellings,
the checkpoint's and transformers' (its attribute_map): ``num_experts`` / ``num_local_experts``,
``num_experts_per_token`` / ``num_experts_per_tok``, ``num_expert_group`` / ``n_group``, ``moe_renormalize`` /
``norm_topk_prob``, ``num_shared_experts`` / ``n_shared_experts``, ``model_max_length`` / ``max_position_embeddings``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from qkv_tui.base.values import show as _show
from qkv_tui.importers.errors import ImporterError

KIMI_TYPES = ("kimi_linear",)
FULL, LINEAR = "full_attention", "linear_attention"


def _get(data: dict[str, Any], *keys: str) -> Any:
    """The first of ``keys`` the file gives (None where it gives none of them)."""
    for key in keys:
        if data.get(key) is not None:
            return data[key]
    return None


def whole(name: str, data: dict[str, Any], keys: tuple[str, ...], default: int, least: int = 1) -> int:
    value = _get(data, *keys)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ImporterError(f"{name}: {keys[0]} = {value!r}; expected a whole number >= {least}")
    return value


def positive(name: str, data: dict[str, Any], key: str, default: float) -> float:
    value = data.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ImporterError(f"{name}: {key} = {value!r}; expected a number > 0")
    return float(value)


@dataclass(frozen=True)
class KimiSizes:
    """What the layers' shapes hang on, from config.json with transformers' defaults."""

    linear_heads: int  # KDA heads
    linear_head_dim: int  # KDA's d_k = d_v
    conv_taps: int  # the short convolution's kernel
    d_c: int  # kv_lora_rank
    d_cq: int | None  # q_lora_rank; None: one q_proj
    d_nope: int  # qk_nope_head_dim
    d_rope: int  # qk_rope_head_dim: the shared key part, never rotated (NoPE)
    d_v: int  # v_head_dim
    layer_types: tuple[str, ...]  # FULL or LINEAR, one a layer
    mlp_types: tuple[str, ...]  # "dense" or "sparse", one a layer


def linear_table(name: str, data: dict[str, Any]) -> dict[str, Any]:
    table = data.get("linear_attn_config") or {}
    if not isinstance(table, dict):
        raise ImporterError(f"{name}: linear_attn_config = {_show(table)}; expected a table")
    return table


def kimi_sizes(name: str, data: dict[str, Any]) -> KimiSizes:
    lin = linear_table(name, data)
    heads = whole(name, lin, ("num_heads",), 0) or whole(name, data, ("linear_num_heads",), 32)
    head_dim = whole(name, lin, ("head_dim",), 0) or whole(name, data, ("linear_head_dim",), 128)
    taps = whole(name, lin, ("short_conv_kernel_size",), 0) or whole(name, data, ("linear_conv_kernel_dim",), 4)
    if taps > 64:
        raise ImporterError(f"{name}: short_conv_kernel_size = {taps}; expected at most 64 (a short convolution: the"
                            " released model uses 4)")
    layers = whole(name, data, ("num_hidden_layers",), 27)
    d_rope = whole(name, data, ("qk_rope_head_dim",), 64, least=0)
    if d_rope < 2 or d_rope % 2:
        raise ImporterError(f"{name}: qk_rope_head_dim = {d_rope} is not supported; [mla] holds the shared key part"
                            " as its d_rope, an even number >= 2 (the released model's is 64; Kimi never rotates it)")
    d_cq = None if data.get("q_lora_rank") is None else whole(name, data, ("q_lora_rank",), 1)
    return KimiSizes(heads, head_dim, taps, whole(name, data, ("kv_lora_rank",), 512), d_cq,
                     whole(name, data, ("qk_nope_head_dim",), 128), d_rope, whole(name, data, ("v_head_dim",), 128),
                     _layer_types(name, data, lin, layers), _mlp_types(name, data, layers))


def _layer_types(name: str, data: dict[str, Any], lin: dict[str, Any], layers: int) -> tuple[str, ...]:
    given = data.get("layer_types")
    if given is not None:
        if not isinstance(given, list) or len(given) != layers or any(k not in (FULL, LINEAR) for k in given):
            raise ImporterError(f"{name}: layer_types must list \"full_attention\" or \"linear_attention\" for each of"
                                f" the {layers} layers")
        return tuple(given)
    if "full_attn_layers" in lin and "kda_layers" in lin:
        kinds: list[str | None] = [None] * layers
        for key, kind in (("full_attn_layers", FULL), ("kda_layers", LINEAR)):
            listed = lin[key]
            if not isinstance(listed, list) or any(isinstance(i, bool) or not isinstance(i, int) or not 1 <= i <= layers
                                                   for i in listed):
                raise ImporterError(f"{name}: linear_attn_config.{key} must list layer numbers 1 … {layers} (1-based)")
            for i in listed:
                kinds[i - 1] = kind
        if None in kinds:
            raise ImporterError(f"{name}: layer {kinds.index(None) + 1} (1-based) is in neither linear_attn_config."
                                "kda_layers nor full_attn_layers; expected every layer in one of them")
        return tuple(str(k) for k in kinds)
    return tuple(FULL if i and i % 4 == 0 else LINEAR for i in range(layers))


def _mlp_types(name: str, data: dict[str, Any], layers: int) -> tuple[str, ...]:
    given = data.get("mlp_layer_types")
    if given is not None:
        if not isinstance(given, list) or len(given) != layers or any(k not in ("dense", "sparse") for k in given):
            raise ImporterError(f"{name}: mlp_layer_types must list \"dense\" or \"sparse\" for each of the {layers}"
                                " layers")
        return tuple(given)
    first = whole(name, data, ("first_k_dense_replace",), 1, least=0)
    return tuple("dense" if i < first else "sparse" for i in range(layers))


def kimi_config(name: str, data: dict[str, Any]) -> tuple[Any, ...]:
    """hf_config.Config's fields after model_type, in its order: (d_model, layers, heads, kv_heads, head_dim, context,
    eps, activation, rope_base None: Kimi Linear has no RoPE, raw). Every size and type list is checked here first."""
    kimi_sizes(name, data)
    if data.get("attention_bias"):
        raise ImporterError(f"{name}: attention_bias = true is not supported; [mla] has no biases on its projections")
    act = data.get("hidden_act", "silu")
    if not isinstance(act, str):
        raise ImporterError(f"{name}: hidden_act = {act!r}; expected a string")
    heads = whole(name, data, ("num_attention_heads",), 32)
    kv_heads = whole(name, data, ("num_key_value_heads",), heads)
    if kv_heads != heads:
        raise ImporterError(f"{name}: num_key_value_heads = {kv_heads} differs from num_attention_heads = {heads};"
                            " Kimi Linear's latent attention expands one key and value per query head")
    head_dim = whole(name, data, ("qk_nope_head_dim",), 128) + whole(name, data, ("qk_rope_head_dim",), 64)
    return (whole(name, data, ("hidden_size",), 2304), whole(name, data, ("num_hidden_layers",), 27), heads, kv_heads,
            head_dim, whole(name, data, ("model_max_length", "max_position_embeddings"), 1048576),
            positive(name, data, "rms_norm_eps", 1e-5), act, None, data)
