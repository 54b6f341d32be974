"""Hugging Face "diffllama" folders (transformers' DiffLlamaForCausalLM): LLaMA's layout with differential attention.

Everything but the attention is LLaMA's (hf_folder.py reads it); each layer's q_proj, k_proj and v_proj are mapped
into the per-head form of ``[differential]`` by hf_diffllama_layout.py, with transformers' pairing: differential
head p scores its first map with query head p and its second with query head p + H/2, and its values are K/V
heads c and c + KV/2 side by side. So the scenario has H/2 heads, each 2·head_dim wide, and KV/2 K/V heads; o_proj
reads the heads' outputs as they are. λ_init is transformers' lambda_init_fn(layer_idx), written as ``layer``;
the sub-norm is DiffLlama's RMSNorm over 2·head_dim columns without gains, with the config's rms_norm_eps.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from qkv_tui.importers.errors import ImporterError
from qkv_tui.importers.hf_config import Config
from qkv_tui.importers.hf_diffllama_layout import DiffLayout, diffllama_heads
from qkv_tui.importers.hf_tensors import prefix_of
from qkv_tui.importers.safetensors_raw import TensorFiles
from qkv_tui.importers.stack import Array, Attention, Layer, Model, Rope
from qkv_tui.kernels.attention import Turn, project
from qkv_tui.kernels.differential import DiffForward, DiffHead, diff_forward, lambda_init_of_layer
from qkv_tui.kernels.rope import RopeSpec, angles, angles_at, pairs
from qkv_tui.kernels.rope_scaling import inv_freq

LAMBDAS = ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2")


def note(config: Config, layout: DiffLayout) -> str:
    H = config.num_heads
    return (f"DiffLlama's differential attention: its {H} query heads of head_dim {config.head_dim} are read as"
            f" {H // 2} differential heads of 2·{config.head_dim} columns, {layout.description} (the paper's code"
            " pairs heads 2i and 2i + 1 instead), each pair's values its two K/V heads side by side. transformers"
            " keeps one set of λ vectors per layer: every head's row is the same.")


def _turn(rope: Rope | None, n: int, d: int) -> Turn | None:
    """RoPE's cos and sin for one half of a head (width d), positions 0 … n − 1, as Rope.rotate turns a row."""
    if rope is None:
        return None
    if rope.partial == 1.0 and rope.scaling is None:
        a = angles(rope.base, d, list(range(n)))  # (n, d/2)
        return Turn(np.cos(a), np.sin(a), pairs(rope.layout, d))
    fields = dict(rope.scaling or {"type": "default"})
    thetas, factor = inv_freq(fields.pop("type"), rope.base, d, partial_rotary_factor=rope.partial, **fields)
    a = angles_at(thetas, np.arange(n, dtype=np.float64))  # (n, r/2)
    return Turn(np.cos(a) * factor, np.sin(a) * factor, pairs(rope.layout, 2 * len(thetas)))


def _block(parts: tuple[Array, ...] | None) -> Array | None:
    return None if parts is None else np.concatenate(parts)


def _layer(layer: Layer, layout: DiffLayout, eps: float, index: int) -> Layer:
    """``layer`` (as hf_folder.py reads a LLaMA layer) with its attention in the per-head form and run differentially."""
    att = layer.attention
    wide = Attention(np.concatenate(layout.W_Q, axis=1), np.concatenate(layout.W_K, axis=1),
                     np.concatenate(layout.W_V, axis=1), att.W_O, _block(layout.b_Q), _block(layout.b_K),
                     _block(layout.b_V), att.b_O, layout.num_heads, layout.num_kv_heads)
    lambda_init = lambda_init_of_layer(index)  # transformers' lambda_init_fn(layer_idx)
    heads = [DiffHead(layout.lambda_q1[p], layout.lambda_k1[p], layout.lambda_q2[p], layout.lambda_k2[p], lambda_init, eps)
             for p in range(layout.num_heads)]

    def attend(x: Array, rope: Rope | None) -> Array:
        """The sub-layer's output for the normed input x (n, d_model): every differential head, then o_proj."""
        n = x.shape[0]
        allow = np.tril(np.ones((n, n), dtype=bool))
        turn = _turn(rope, n, layout.d)
        each_half = () if turn is None else (RopeSpec(turn, layout.d),)  # RoPE's part turns each half on its own
        done: dict[int, DiffForward] = {}
        outs = []
        for p in range(layout.num_heads):
            c = wide.kv_head(p)
            f = diff_forward(x, x, layout.W_Q[p], layout.W_K[c], layout.W_V[c], _at(layout.b_Q, p), _at(layout.b_K, c),
                             _at(layout.b_V, c), allow, heads[p], parts=each_half, shared=done.get(c))
            done.setdefault(c, f)
            outs.append(f.output)
        return project(np.concatenate(outs, axis=1), wide.W_O, wide.b_O)

    def tables(chosen: list[int]) -> dict[str, Any]:
        """The scenario's [differential] for the chosen heads (their rows of the λ vectors), λ_init as the layer's."""
        table: dict[str, Any] = {key: getattr(layout, key)[chosen].tolist() for key in LAMBDAS}
        return {"differential": table | {"layer": index, "eps": eps}}

    return replace(layer, attention=wide, attend=attend, tables=tables)


def _at(parts: tuple[Array, ...] | None, i: int) -> Array | None:
    return None if parts is None else parts[i]


def open_diffllama(model: Model, config: Config, tensors: TensorFiles) -> Model:
    """``model`` (hf_folder.py's LLaMA reading of the folder) with every layer's attention differential."""
    p = prefix_of(tensors, "embed_tokens.weight", "diffllama (LLaMA-family)")
    H, KV, hd, d = config.num_heads, config.num_kv_heads, config.head_dim, config.d_model
    if H % 2 or KV % 2:
        raise ImporterError(f"config.json: DiffLlama pairs its heads across the halves, so num_attention_heads = {H} and"
                            f" num_key_value_heads = {KV} must both be even")
    eps = config.eps

    def layout(i: int) -> DiffLayout:
        a = f"{p}layers.{i}.self_attn."
        get = tensors.get

        def bias(name: str, width: int) -> Array | None:
            return get(a + name + ".bias", (width,)) if a + name + ".bias" in tensors else None

        return diffllama_heads(get(a + "q_proj.weight", (H * hd, d)), get(a + "k_proj.weight", (KV * hd, d)),
                               get(a + "v_proj.weight", (KV * hd, d)), [get(a + name, (hd,)) for name in LAMBDAS],
                               H, KV, hd, biases=(bias("q_proj", H * hd), bias("k_proj", KV * hd), bias("v_proj", KV * hd)))

    def layer(i: int) -> Layer:
        return _layer(model.layer(i), layout(i), eps, i)

    said = note(config, layout(0)) if config.num_layers else ""
    return replace(model, num_heads=H // 2, layer=layer, note=lambda i: said)
