"""A Hugging Face "nemotron_h" config.json (NVIDIA Nemotron-H), as transformers 5.24's NemotronHConfig reads it.

Each layer is one block of one kind (``layers_block_type``; older files give ``hybrid_override_pattern``, one
character a layer: M Mamba-2, * attention, - MLP, E mixture of experts; and older names "mamba" and "attention"
are renamed as transformers renames them):
- "linear_attention": a Mamba-2 mixer (mamba_num_heads heads of mamba_head_dim, n_groups, ssm_state_size);
- "full_attention": grouped-query attention without RoPE and without biases;
- "mlp": up_proj, relu² (mlp_hidden_act), down_proj;
- "moe": DeepSeek-V3's sigmoid router over relu² experts, plus a shared expert.
save_pretrained leaves out keys at the class's default, so the defaults here are NemotronHConfig's. The old
``mamba_*`` spellings its __post_init__ renames are renamed here too. Note that NemotronHMamba2Mixer clamps each
step dt to (time_step_min, ∞), not to time_step_limit: that is what the [ssd] table gets.
"""

from __future__ import annotations

import math
from typing import Any

from qkv_tui.base.values import show as _show
from qkv_tui.importers.errors import ImporterError
from qkv_tui.importers.stack import ACTIVATIONS

NEMOTRON_H_TYPES = ("nemotron_h",)
MAMBA, ATTENTION, MLP, MOE = "linear_attention", "full_attention", "mlp", "moe"
_PATTERN = {"M": MAMBA, "*": ATTENTION, "-": MLP, "E": MOE}  # NemotronHConfig._pattern_to_list
_LEGACY = {"mamba": MAMBA, "attention": ATTENTION}  # transformers' _LEGACY_LAYER_TYPE_REMAP, the ones this model uses
_RENAMED = {"mamba_n_groups": "n_groups", "mamba_d_conv": "conv_kernel", "mamba_expand": "expand",
            "mamba_dt_min": "time_step_min", "mamba_dt_max": "time_step_max", "mamba_dt_limit": "time_step_limit",
            "mamba_conv_bias": "use_conv_bias", "mamba_chunk_size": "chunk_size"}
_DEFAULTS: dict[str, Any] = {
    "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
    "max_position_embeddings": 4096, "intermediate_size": 21504, "mlp_hidden_act": "relu2", "mlp_bias": False,
    "ssm_state_size": 128, "mamba_num_heads": 128, "mamba_head_dim": 64, "mamba_hidden_act": "silu", "n_groups": 8,
    "conv_kernel": 4, "time_step_min": 0.001, "use_conv_bias": True, "use_bias": False, "n_routed_experts": 8,
    "n_shared_experts": 1, "moe_intermediate_size": 7688, "moe_shared_expert_intermediate_size": 7688,
    "moe_latent_size": None, "num_experts_per_tok": 2, "routed_scaling_factor": 1.0, "n_group": 1, "topk_group": 1,
    "norm_topk_prob": True, "layer_norm_epsilon": 1e-5,
}
_SILU = ("silu", "swish")
MLP_ACTS = ("relu2", *ACTIVATIONS)  # relu² is Nemotron's own (hf_nemotron_h.relu2); the others are stack.py's


def block_types(name: str, data: dict[str, Any]) -> list[str]:
    """Each layer's kind, as NemotronHConfig.layers_block_type holds it."""
    given = data.get("layers_block_type", data.get("layer_types"))
    pattern = data.get("hybrid_override_pattern")
    if given is None and pattern is not None:
        if not isinstance(pattern, str) or not pattern or any(c not in _PATTERN for c in pattern):
            raise ImporterError(f"{name}: hybrid_override_pattern = {_show(pattern)}; expected a string of M (Mamba-2),"
                                " * (attention), - (MLP) and E (mixture of experts), one a layer")
        return [_PATTERN[c] for c in pattern]
    if given is None:
        return [MAMBA, MOE, ATTENTION, MLP]  # NemotronHConfig's default
    if not isinstance(given, list) or not given:
        raise ImporterError(f"{name}: layers_block_type = {_show(given)}; expected a list of layer kinds")
    kinds = [_LEGACY.get(k, k) if isinstance(k, str) else k for k in given]
    for i, kind in enumerate(kinds):
        if kind not in (MAMBA, ATTENTION, MLP, MOE):
            raise ImporterError(f"{name}: layers_block_type[{i}] = {_show(given[i])}; expected 'linear_attention',"
                                " 'full_attention', 'mlp' or 'moe'")
    return kinds


def _whole(name: str, data: dict[str, Any], key: str) -> int:
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ImporterError(f"{name}: {key} = {value!r}; expected a whole number >= 1")
    return value


def _number(name: str, data: dict[str, Any], key: str, low: float = 0.0) -> float:
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value < math.inf:
        raise ImporterError(f"{name}: {key} = {value!r}; expected a number >= {low:g}")
    return float(value)


def nemotron_h_defaults(name: str, data: dict[str, Any]) -> dict[str, Any]:
    """The config as NemotronHConfig holds it, checked: ``layers_block_type`` a list of kinds and every default
    filled in."""
    out = {_RENAMED.get(key, key): value for key, value in data.items()}
    for key, value in _DEFAULTS.items():
        if key not in out or (out[key] is None and value is not None):
            out[key] = value
    kinds = block_types(name, out)
    out["layers_block_type"] = kinds
    H, H_kv = (_whole(name, out, k) for k in ("num_attention_heads", "num_key_value_heads"))
    _whole(name, out, "hidden_size")
    _whole(name, out, "head_dim")
    if H % H_kv:
        raise ImporterError(f"{name}: num_key_value_heads = {H_kv} does not divide num_attention_heads = {H}")
    if MAMBA in kinds:
        mH, G = _whole(name, out, "mamba_num_heads"), _whole(name, out, "n_groups")
        if mH % G:
            raise ImporterError(f"{name}: n_groups = {G} does not divide mamba_num_heads = {mH}; expected a divisor (each"
                                " group's heads share one B and C)")
        for key in ("mamba_head_dim", "ssm_state_size", "conv_kernel"):
            _whole(name, out, key)
        if out["mamba_hidden_act"] not in _SILU:
            raise ImporterError(f"{name}: mamba_hidden_act {_show(out['mamba_hidden_act'])} is not supported; expected"
                                " 'silu' (the activation after the Mamba-2 convolution, as [ssd]'s mixer computes it)")
    if (MLP in kinds or MOE in kinds) and out["mlp_hidden_act"] not in MLP_ACTS:
        raise ImporterError(f"{name}: mlp_hidden_act {_show(out['mlp_hidden_act'])} is not supported; expected one of:"
                            f" {', '.join(MLP_ACTS)}")
    if MOE in kinds:
        E, k, groups, top = (_whole(name, out, key) for key in ("n_routed_experts", "num_experts_per_tok", "n_group",
                                                                 "topk_group"))
        if k > E or E % groups or top > groups or E // groups < 2:
            raise ImporterError(f"{name}: num_experts_per_tok = {k}, n_routed_experts = {E}, n_group = {groups},"
                                f" topk_group = {top}; expected top-k ≤ experts, n_group dividing the experts into"
                                " groups of at least 2 and topk_group ≤ n_group (NemotronHTopkRouter sums each"
                                " group's two best scores)")
        _number(name, out, "routed_scaling_factor")
    low = _number(name, out, "time_step_min")
    eps = _number(name, out, "layer_norm_epsilon")
    if eps <= 0:
        raise ImporterError(f"{name}: layer_norm_epsilon = {eps!r}; expected a number > 0")
    if out.get("quantization_config") is not None:
        raise ImporterError(f"{name}: quantization_config is set; expected unquantised weights (qkv-tui reads float32,"
                            " float16 and bfloat16 tensors)")
    out["time_step_min"] = low
    return out


def mixer_config(raw: dict[str, Any]) -> dict[str, Any]:
    """The keys hf_mamba2.mixer_weights reads, from a checked nemotron_h config."""
    return {"num_heads": raw["mamba_num_heads"], "head_dim": raw["mamba_head_dim"], "n_groups": raw["n_groups"],
            "state_size": raw["ssm_state_size"], "hidden_size": raw["hidden_size"], "conv_kernel": raw["conv_kernel"],
            "time_step_limit": [raw["time_step_min"], math.inf],  # NemotronHMamba2Mixer's clamp, not time_step_limit
            "layer_norm_epsilon": raw["layer_norm_epsilon"]}
