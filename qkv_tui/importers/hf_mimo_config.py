"""MiMo-V2-Flash's config.json (model_type "mimo_v2_flash"), with the defaults transformers' MiMoV2FlashConfig
fills in, and its RoPE per layer type.

MiMoV2FlashConfig (transformers 5.24) is not LLaMA's: head_dim defaults to 192 (not hidden_size / heads),
v_head_dim to 128, the window to 129 (``sliding_window_size`` + 1 where the file gives that instead, as the
reference SGLang code attends the window plus the query), layer_types to full attention at layer 0 and every
6th layer, sliding elsewhere, mlp_layer_types to one dense layer and then mixtures of experts, and
rope_parameters to one table per layer type (bases 5,000,000 and 10,000, a third of each head turning).
Its rotary embedding computes only plain RoPE itself; a table's partial_rotary_factor defaults to 0.334.
"""

from __future__ import annotations

import math
from typing import Any

from qkv_tui.importers.errors import ImporterError
from qkv_tui.importers.hf_rope import RopeConfig

MIMO_TYPES = ("mimo_v2_flash",)
_DEFAULTS: dict[str, Any] = {
    "hidden_size": 4096, "intermediate_size": 16384, "num_hidden_layers": 48, "num_attention_heads": 64,
    "num_key_value_heads": 4, "hidden_act": "silu", "max_position_embeddings": 131072, "rms_norm_eps": 1e-5,
    "head_dim": 192, "v_head_dim": 128, "moe_intermediate_size": 2048, "num_experts_per_tok": 8,
    "n_routed_experts": 256, "n_group": 1, "topk_group": 1, "norm_topk_prob": True, "routed_scaling_factor": 1.0,
    "attention_value_scale": 0.707, "sliding_window": 129,
}
_ROPE = {"full_attention": {"rope_type": "default", "rope_theta": 5_000_000.0, "partial_rotary_factor": 0.334},
         "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0, "partial_rotary_factor": 0.334}}


def mimo_defaults(name: str, data: dict[str, Any]) -> dict[str, Any]:
    """The config as MiMoV2FlashConfig holds it: every key it defaults, filled in where the file leaves it out
    (or null, as the Hub's routed_scaling_factor is)."""
    out = dict(data)
    for key, value in _DEFAULTS.items():
        if out.get(key) is None:
            out[key] = value
    if out.get("sliding_window_size") is not None:
        size = out["sliding_window_size"]
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ImporterError(f"{name}: sliding_window_size = {size!r}; expected a whole number >= 0")
        out["sliding_window"] = size + 1
    layers = out["num_hidden_layers"]
    if out.get("rope_parameters") is None:
        out["rope_parameters"] = _ROPE
    if out.get("quantization_config") is not None:  # the Hub's checkpoint is FP8 with per-block scales
        raise ImporterError(f"{name}: quantization_config is set; expected unquantised weights (qkv-tui reads float32,"
                            " float16 and bfloat16 tensors, not FP8 blocks and their scales)")
    for key in ("layer_types", "mlp_layer_types"):  # computed one layer at a time where absent (mimo_kind)
        if out.get(key) is not None and (not isinstance(out[key], list) or
                                         (isinstance(layers, int) and len(out[key]) != layers)):
            raise ImporterError(f"{name}: {key} must list one entry per layer ({layers})")
    return out


def layer_kind(raw: dict[str, Any], layer: int) -> str:
    """"full_attention" or "sliding_attention": layer_types, else full at layer 0 and every 6th layer."""
    types = raw.get("layer_types")
    if types is None:
        return "full_attention" if layer == 0 or (layer + 1) % 6 == 0 else "sliding_attention"
    kind = types[layer]
    if kind not in ("full_attention", "sliding_attention"):
        raise ImporterError(f"config.json: layer_types[{layer}] = {kind!r} is not supported; expected full_attention"
                            " or sliding_attention")
    return str(kind)


def is_sparse(raw: dict[str, Any], layer: int) -> bool:
    """Whether the layer's MLP is the mixture of experts: mlp_layer_types, else every layer after the first."""
    types = raw.get("mlp_layer_types")
    if types is None:
        return layer > 0
    kind = types[layer]
    if kind not in ("dense", "sparse"):
        raise ImporterError(f"config.json: mlp_layer_types[{layer}] = {kind!r}; expected dense or sparse")
    return bool(kind == "sparse")


def mimo_rope(name: str, raw: dict[str, Any], kind: str, head_dim: int) -> RopeConfig:
    """The RoPE of one layer type, as MiMoV2FlashRotaryEmbedding computes it for plain RoPE."""
    params = raw.get("rope_parameters")
    table = params.get(kind) if isinstance(params, dict) else None
    if not isinstance(table, dict):
        raise ImporterError(f"{name}: rope_parameters has no {kind!r} table; expected one per layer type")
    rope_type = table.get("rope_type", "default")
    if rope_type != "default":
        raise ImporterError(f"{name}: rope_parameters.{kind}.rope_type {rope_type!r} is not supported for MiMo-V2-Flash;"
                            " expected 'default' (plain RoPE on part of each head)")
    base = table.get("rope_theta")
    partial = table.get("partial_rotary_factor", 0.334)
    for key, value in (("rope_theta", base), ("partial_rotary_factor", partial)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ImporterError(f"{name}: rope_parameters.{kind}.{key} = {value!r}; expected a number > 0")
    assert isinstance(base, (int, float)) and isinstance(partial, (int, float))
    turned = int(head_dim * partial)
    if partial > 1 or turned < 2 or turned % 2:
        raise ImporterError(f"{name}: rope_parameters.{kind}.partial_rotary_factor = {partial!r} turns int({head_dim}·"
                            f"{partial!r}) = {turned} dimensions of each head; expected an even number from 2 to head_dim")
    return RopeConfig(float(base), float(partial), None)
