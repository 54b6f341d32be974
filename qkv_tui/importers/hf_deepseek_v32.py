"""DeepSeek-V3.2 folders (``deepseek_v32``): DeepSeek-V3's latent attention, an ``[mla]`` table, with the lightning
indexer of DeepSeek Sparse Attention beside it, an ``[indexer]`` table (contracts §15).

Everything but the indexer is V3's (hf_deepseek.py reads it; V3.2 always has the query latent and turns its MLA's
rotary parts in interleaved pairs). As transformers' DeepseekV32Indexer reads the weights (nn.Linear, (out, in),
transposed here): ``indexer.wq_b`` reads the query latent c_Q = q_a_layernorm(q_a_proj(x)), [mla]'s c_Q, so it is
``W_q`` (d_cq × H_I·d_I); ``indexer.wk`` is ``W_k``, ``indexer.k_norm`` a LayerNorm with gain and bias (eps
1e-6), ``indexer.weights_proj`` is ``W_w``. The first qk_rope_head_dim dimensions of every index vector turn, with
the main attention's frequencies but in half-split pairs (rotate_half) where the MLA turns interleaved ones;
index_topk is ``top_k``. transformers multiplies q·k by index_head_dim^-1/2 and the weights by index_n_heads^-1/2;
the [indexer] table folds both into w (kernels/indexer.py), the same scores.

A layer's forward (the residual stream beneath a deeper layer) applies that layer's own selection, as the model
does: every layer of V3.2 has its indexer.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from qkv_tui.base.values import show as _show
from qkv_tui.importers.errors import ImporterError
from qkv_tui.importers.hf_config import Config
from qkv_tui.importers.hf_deepseek import open_deepseek
from qkv_tui.importers.hf_tensors import prefix_of
from qkv_tui.importers.safetensors_raw import TensorFiles
from qkv_tui.importers.stack import Array, Layer, Model, Rope, Tokenize
from qkv_tui.kernels.attention import Turn, project
from qkv_tui.kernels.indexer import DEFAULT_K_EPS, IndexerWeights, index
from qkv_tui.kernels.mla import MlaWeights, mla_head, mla_shared
from qkv_tui.kernels.rope import angles, pairs

INDEX_LAYOUT = "half"  # DeepseekV32Indexer: apply_rotary_pos_emb (rotate_half), unlike its MLA


def _whole(raw: dict[str, Any], key: str, default: int) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ImporterError(f"config.json: {key} = {value!r}; expected a whole number >= 1")
    return value


def _refuse(config: Config) -> tuple[int, int, int]:
    """(index_n_heads, index_head_dim, index_topk), transformers' defaults; what V3.2's reading cannot take, one line."""
    raw = config.raw
    if "q_lora_rank" in raw and raw["q_lora_rank"] is None:
        raise ImporterError("config.json: q_lora_rank = null is not supported; DeepSeek-V3.2's indexer reads the query"
                            " latent (q_a_proj, q_a_layernorm), so the model has one")
    kinds = raw.get("layer_types")
    if kinds is not None and (not isinstance(kinds, list) or any(k != "indexed_attention" for k in kinds)):
        raise ImporterError(f"config.json: layer_types = {_show(kinds)} is not supported; expected \"indexed_attention\""
                            " for every layer (every DeepSeek-V3.2 layer has its indexer)")
    heads, d_I, top_k = (_whole(raw, "index_n_heads", 64), _whole(raw, "index_head_dim", 128),
                         _whole(raw, "index_topk", 2048))
    d_rope = _whole(raw, "qk_rope_head_dim", 64)
    if d_rope > d_I:
        raise ImporterError(f"config.json: qk_rope_head_dim = {d_rope} is wider than index_head_dim = {d_I}; the"
                            " indexer turns the first qk_rope_head_dim dimensions of its vectors")
    return heads, d_I, top_k


def open_deepseek_v32(config: Config, tensors: TensorFiles, tokenize: Tokenize, source: str) -> Model:
    H_I, d_I, top_k = _refuse(config)
    model = open_deepseek(config, tensors, tokenize, source)
    p = prefix_of(tensors, "embed_tokens.weight", "deepseek_v32 (DeepSeek)")
    d = config.d_model
    get = tensors.get

    def indexer(i: int, w: MlaWeights) -> IndexerWeights:
        a = f"{p}layers.{i}.self_attn.indexer."
        d_cq = int(w.W_DQ.shape[1]) if w.W_DQ is not None else 0
        return IndexerWeights(
            H_I, _fixed(get(a + "wq_b.weight", (H_I * d_I, d_cq)).T), _fixed(get(a + "wk.weight", (d_I, d)).T),
            _fixed(get(a + "weights_proj.weight", (H_I, d)).T), top_k, w.d_rope, INDEX_LAYOUT,
            get(a + "k_norm.weight", (d_I,)), get(a + "k_norm.bias", (d_I,)), DEFAULT_K_EPS)

    def layer(i: int) -> Layer:
        base = model.layer(i)
        w = base.mla
        assert w is not None
        ix = indexer(i, w)
        W_O = base.attention.W_O

        def attend(x: Array, rope: Rope | None) -> Array:
            """[mla] over the normed input x (n, d_model), every head's causal mask narrowed to the indexer's pick."""
            n = x.shape[0]
            allow = np.tril(np.ones((n, n), dtype=bool))
            turned = None
            if rope is not None:
                a = angles(rope.base, w.d_rope, list(range(n)))  # (n, d_rope/2)
                turned = Turn(np.cos(a), np.sin(a), pairs(rope.layout, w.d_rope))
            shared = mla_shared(x, w, turned)
            base_ = rope.base if rope is not None else 10000.0
            picked = index(x, ix, allow, list(range(n)), base_, shared.c_Q).selected  # (n, n)
            outs = [mla_head(shared, w, h, picked, math.sqrt(w.d_qk), turned).attended.output for h in range(w.num_heads)]
            return project(np.concatenate(outs, axis=1), W_O, None)  # (n, d_model)

        def tables(chosen: list[int]) -> dict[str, Any]:
            """The layer's [indexer] (one for every head: expand.py refuses a subset of [mla]'s heads first)."""
            assert ix.k_gamma is not None and ix.k_beta is not None
            return {"indexer": {"num_heads": H_I, "top_k": top_k, "rope_dims": ix.rope_dims, "rope_layout": INDEX_LAYOUT,
                                "W_q": ix.W_q, "W_k": ix.W_k, "W_w": ix.W_w,
                                "k_norm": {"gamma": ix.k_gamma.tolist(), "beta": ix.k_beta.tolist(), "eps": ix.k_eps}}}

        return replace(base, attend=attend, tables=tables)

    said = model.note(0)
    said += (f" DeepSeek Sparse Attention: {H_I} index heads of {d_I} score every visible key (W_q reads the query"
             f" latent c_Q; the first {config.raw.get('qk_rope_head_dim', 64)} dimensions turn in half-split pairs,"
             f" transformers' DeepseekV32Indexer, while the MLA turns interleaved ones), and each query keeps its top"
             f" {top_k} keys in every head.")
    return replace(model, layer=layer, note=lambda i: said)


def _fixed(values: Array) -> Array:
    """A read-only C-ordered copy, as the loader keeps a scenario's matrix."""
    out = np.array(values, dtype=np.float64, order="C")
    out.setflags(write=False)
    return out
