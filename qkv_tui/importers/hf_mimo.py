"""MiMo-V2-Flash folders (model_type "mimo_v2_flash"), read as transformers' MiMoV2FlashForCausalLM computes them.

- a hybrid of full and sliding-window layers (layer_types; hf_mimo_config.py fills in the defaults). Its sliding
  layers have twice num_key_value_heads K/V heads and a sink logit per query head (``self_attn.sinks``, saved as
  ``attention_sink_bias``, the Hub's name); its full layers neither;
- query and key heads of head_dim, value heads of v_head_dim (narrower: 192 and 128 in the released model),
  so W_O reads num_heads·v_head_dim columns;
- the values multiplied by attention_value_scale right after the projection ([value_scale]), before the mix;
- partial RoPE, Hugging Face's "half" layout on the first int(head_dim·partial_rotary_factor) dimensions, each
  layer type with its own base (rope_parameters per type);
- the scores divided by √head_dim; RMSNorms with plain γ; SwiGLU in the dense layers (mlp_layer_types) and
  DeepSeek-V3's mixture of experts in the others (:class:`SigmoidMoe`), run in NumPy so a deep layer's X
  is the residual stream the model computes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from qkv_tui.importers.errors import ImporterError
from qkv_tui.importers.hf_config import Config, layer_type, sliding_window
from qkv_tui.importers.hf_mimo_config import is_sparse, mimo_rope
from qkv_tui.importers.hf_mlp import (
    GroupedRouter,
    add_swiglu_experts,
    read_router,
    read_swiglu,
    read_swiglu_experts,
)
from qkv_tui.importers.hf_tensors import lookup, prefix_of
from qkv_tui.importers.safetensors_raw import TensorFiles
from qkv_tui.importers.schedule import entry
from qkv_tui.importers.stack import ACTIVATIONS, Array, Attention, Layer, Model, Norm, Rope, Tokenize


@dataclass(frozen=True, eq=False)
class SigmoidMoe:
    """DeepSeek-V3's router, as MiMoV2FlashMoE runs it (no shared expert): σ of the router logits; each token
    picks its top_k experts by σ + e_score_correction_bias among the topk_group groups of experts whose two
    best such scores sum highest; the chosen experts' σ (not the biased score) weigh them, renormalised to
    sum 1 with norm_topk_prob (+ 1e-20), times routed_scaling_factor. Each expert is a SwiGLU."""

    router: GroupedRouter
    W_gate: Array  # (experts, d_model, inner)
    W_up: Array  # (experts, d_model, inner)
    W_down: Array  # (experts, inner, d_model)
    act: Callable[[Array], Array]

    def __call__(self, x: Array) -> Array:
        chosen, weights = self.router.choose(x)
        out = np.zeros_like(x)  # (n, d_model)
        add_swiglu_experts(out, x, chosen, weights, self.W_gate, self.W_up, self.W_down, self.act)
        return out


def _whole(raw: dict[str, Any], key: str) -> int:
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ImporterError(f"config.json: {key} = {value!r}; expected a whole number >= 1")
    return value


def _positive(raw: dict[str, Any], key: str) -> float:
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise ImporterError(f"config.json: {key} = {value!r}; expected a number > 0")
    return float(value)


def _moe(config: Config, tensors: TensorFiles, m: str) -> SigmoidMoe:
    """The sparse MLP under ``m`` (a layer's "mlp."): experts as the Hub stores them, or transformers' fused form."""
    raw, d = config.raw, config.d_model
    experts, top_k = _whole(raw, "n_routed_experts"), _whole(raw, "num_experts_per_tok")
    groups, top_groups = _whole(raw, "n_group"), _whole(raw, "topk_group")
    if top_k > experts or experts % groups or top_groups > groups:
        raise ImporterError(f"config.json: num_experts_per_tok = {top_k}, n_routed_experts = {experts}, n_group ="
                            f" {groups}, topk_group = {top_groups}; expected top-k ≤ experts, groups"
                            " dividing the experts and topk_group ≤ n_group")
    W_gate, W_up, W_down = read_swiglu_experts(tensors, m, experts, d)
    router = read_router(tensors, m, experts, d, top_k, groups, top_groups, raw.get("norm_topk_prob", True) is not False,
                         _positive(raw, "routed_scaling_factor"))
    return SigmoidMoe(router, W_gate, W_up, W_down, ACTIVATIONS[config.activation])


def open_mimo(config: Config, tensors: TensorFiles, tokenize: Tokenize, source: str) -> Model:
    raw = config.raw
    p = prefix_of(tensors, "embed_tokens.weight", "mimo_v2_flash (MiMo-V2-Flash)")
    d, H, d_k = config.d_model, config.num_heads, config.head_dim
    d_v = _whole(raw, "v_head_dim")
    bias = raw.get("attention_bias") is True
    value_scale = raw.get("attention_value_scale")
    factor = 1.0 if value_scale is None else _positive(raw, "attention_value_scale")
    table = tensors.rows(p + "embed_tokens.weight", (None, d))  # (vocab, d)
    act = ACTIVATIONS[config.activation]
    get = tensors.get

    def kv_heads(i: int) -> int:
        """MiMoV2FlashAttention doubles the K/V heads of a sliding layer."""
        count = config.num_kv_heads * (2 if layer_type(config, i) == "sliding_attention" else 1)
        if H % count:
            raise ImporterError(f"config.json: layer {i} is sliding, with 2 × num_key_value_heads = {count} K/V heads,"
                                f" which does not divide num_attention_heads = {H}")
        return count

    def embed(ids: list[int]) -> Array:
        return lookup(table, p + "embed_tokens.weight", ids)  # (n, d_model); positions enter through RoPE

    def optional(name: str, width: int) -> Array | None:
        return get(name, (width,)) if bias else None

    def sinks(a: str) -> Array:
        for name in (a + "sinks", a + "attention_sink_bias"):  # transformers' name, and the Hub's (and save_pretrained's)
            if name in tensors:
                return get(name, (H,))
        raise ImporterError(f"the checkpoint has no {a + 'attention_sink_bias'!r} tensor; MiMo-V2-Flash's sliding layers"
                            " hold one sink logit per query head")

    def layer(i: int) -> Layer:
        h = f"{p}layers.{i}."
        a = h + "self_attn."
        kv = kv_heads(i)
        sliding = layer_type(config, i) == "sliding_attention"
        attention = Attention(
            get(a + "q_proj.weight", (H * d_k, d)).T, get(a + "k_proj.weight", (kv * d_k, d)).T,
            get(a + "v_proj.weight", (kv * d_v, d)).T, get(a + "o_proj.weight", (d, H * d_v)).T,
            optional(a + "q_proj.bias", H * d_k), optional(a + "k_proj.bias", kv * d_k),
            optional(a + "v_proj.bias", kv * d_v), None, H, kv,
        )
        if is_sparse(raw, i):
            mlp: Callable[[Array], Array] = _moe(config, tensors, h + "mlp.")
        else:
            mlp = read_swiglu(tensors, h + "mlp.", d, act)
        read = mimo_rope("config.json", raw, layer_type(config, i), d_k)
        return Layer(
            norm=Norm("rms", get(h + "input_layernorm.weight", (d,)), None, config.eps), attention=attention,
            mlp_norm=Norm("rms", get(h + "post_attention_layernorm.weight", (d,)), None, config.eps), mlp=mlp,
            scale=None, window=sliding_window(config, i), sinks=sinks(a) if sliding else None,
            rope=Rope("half", read.base, read.partial), value_scale=factor,
        )

    schedule = tuple(entry(sliding_window(config, i), True) for i in range(config.num_layers))
    first = mimo_rope("config.json", raw, layer_type(config, 0), d_k)
    said = (f"MiMo-V2-Flash: query and key heads of {d_k}, value heads of {d_v}; the values are multiplied by"
            f" attention_value_scale = {factor:g} after the projection; int({d_k}·partial_rotary_factor) dimensions"
            " of each head turn, with a base per layer type; sliding layers have twice the K/V heads of full ones"
            " and a sink logit per head.")
    return Model(source, config.num_layers, H, config.context, Rope("half", first.base, first.partial), tokenize,
                 embed, layer, schedule, lambda layer: said)
