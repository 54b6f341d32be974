"""DeepSeek-V3.2 (``deepseek_v32``) and GLM-5 (``glm_moe_dsa``) folders: DeepSeek-V3's latent attention, an ``[mla]``
table, with the lightning indexer of DeepSeek Sparse Attention beside it, an ``[indexer]`` table (contracts §15).

Everything but the indexer is V3's (hf_deepseek.py reads it; V3.2 always has the query latent and turns its MLA's
rotary parts in interleaved pairs). As transformers' DeepseekV32Indexer reads the weights (nn.Linear, (out, in),
transposed here): ``indexer.wq_b`` reads the query latent c_Q = q_a_layernorm(q_a_proj(x)), [mla]'s c_Q, so it is
``W_q`` (d_cq × H_I·d_I); ``indexer.wk`` is ``W_k``, ``indexer.k_norm`` a LayerNorm with gain and bias (eps
1e-6), ``indexer.weights_proj`` is ``W_w``. The first qk_rope_head_dim dimensions of every index vector turn, with
the main attention's frequencies but in half-split pairs (rotate_half) where the MLA turns interleaved ones;
index_topk is ``top_k``. transformers multiplies q·k by index_head_dim^-1/2 and the weights by index_n_heads^-1/2;
the [indexer] table folds both into w (kernels/indexer.py), the same scores.

GLM-5 is the same but for two things (transformers' GlmMoeDsaIndexer and GlmMoeDsaAttention): its indexer turns
interleaved pairs (transformers writes the turned pairs out as [evens | odds], for q and k alike, so every q·k is
the in-place turn's), and its ``indexer_types`` make some layers "shared": they run no indexer and attend with the
selection of the last "full" layer before them.

The mixture-of-experts layers (``mlp_layer_types`` "sparse") run beneath a deeper layer: DeepSeek-V3's router
(hf_mimo.py's SigmoidMoe) and the shared experts, added, as DeepseekV32MoE and GlmMoeDsaMoE compute them.

A layer's forward (the residual stream beneath a deeper layer) applies its selection as the model does: its own
indexer's, or for a shared layer that of the full layer it reuses, kept from when that layer ran. Every walk up the
stack starts at layer 0, a full layer (transformers refuses a shared first layer), so the kept selection is this
text's. A shared layer cannot be the chosen one: [indexer] computes a selection from the layer's own X, and the
shared one comes from an earlier layer's; it is one line naming that layer.
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
from qkv_tui.importers.hf_mimo import _moe as sigmoid_moe
from qkv_tui.importers.hf_mlp import read_swiglu
from qkv_tui.importers.hf_tensors import prefix_of
from qkv_tui.importers.safetensors_raw import TensorFiles
from qkv_tui.importers.stack import ACTIVATIONS, Array, Layer, Model, Rope, Tokenize
from qkv_tui.kernels.attention import project
from qkv_tui.kernels.indexer import DEFAULT_K_EPS, BoolMatrix, IndexerWeights, index
from qkv_tui.kernels.mla import MlaWeights, mla_head, mla_shared
from qkv_tui.kernels.mla_rope import Rotary, rotary_width
from qkv_tui.kernels.rope import columns

# the indexer's RoPE layout and transformers' default index_n_heads: DeepseekV32Indexer turns with rotate_half
# (apply_rotary_pos_emb), unlike its MLA; GlmMoeDsaIndexer with apply_rotary_pos_emb_interleave
INDEX_LAYOUT = {"deepseek_v32": "half", "glm_moe_dsa": "interleaved"}
INDEX_HEADS = {"deepseek_v32": 64, "glm_moe_dsa": 32}


def _whole(raw: dict[str, Any], key: str, default: int) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ImporterError(f"config.json: {key} = {value!r}; expected a whole number >= 1")
    return value


def _refuse(config: Config) -> tuple[int, int, int]:
    """(index_n_heads, index_head_dim, index_topk), transformers' defaults; what the reading cannot take, one line."""
    raw = config.raw
    if "q_lora_rank" in raw and raw["q_lora_rank"] is None:
        raise ImporterError("config.json: q_lora_rank = null is not supported; DeepSeek Sparse Attention's indexer reads"
                            " the query latent (q_a_proj, q_a_layernorm), so the model has one")
    kinds = raw.get("layer_types")
    if kinds is not None and not isinstance(kinds, list):
        raise ImporterError(f"config.json: layer_types = {_show(kinds)}; expected a list, \"indexed_attention\" for every"
                            " layer")
    for i, kind in enumerate(kinds or ()):
        if kind != "indexed_attention":
            raise ImporterError(f"config.json: layer_types[{i}] = {_show(kind)} is not supported; expected"
                                " \"indexed_attention\" for every layer (every layer has its indexer, or shares one)")
    heads, d_I, top_k = (_whole(raw, "index_n_heads", INDEX_HEADS[config.model_type]), _whole(raw, "index_head_dim", 128),
                         _whole(raw, "index_topk", 2048))
    d_rope = _whole(raw, "qk_rope_head_dim", 64)
    if d_rope > d_I:
        raise ImporterError(f"config.json: qk_rope_head_dim = {d_rope} is wider than index_head_dim = {d_I}; the"
                            " indexer turns the first qk_rope_head_dim dimensions of its vectors")
    return heads, d_I, top_k


def indexer_types(config: Config) -> list[str]:
    """Each layer's indexer, "full" (its own) or "shared" (the last full layer's selection), as transformers' config
    fills it in: V3.2 every layer full; GLM-5 ``indexer_types``, else ``index_topk_pattern`` ("F"/"S"), else full
    where max(i − index_skip_topk_offset + 1, 0) is a multiple of index_topk_freq (defaults 2 and 1)."""
    raw, count = config.raw, config.num_layers
    if config.model_type == "deepseek_v32":
        return ["full"] * count
    kinds = raw.get("indexer_types")
    pattern = raw.get("index_topk_pattern")
    if kinds is None and isinstance(pattern, str):
        kinds = [{"F": "full", "S": "shared"}.get(c, c) for c in pattern]
    elif kinds is None and pattern is not None:
        kinds = pattern
    elif kinds is None:
        freq, offset = raw.get("index_topk_freq", 1), raw.get("index_skip_topk_offset", 2)
        if any(isinstance(v, bool) or not isinstance(v, int) for v in (freq, offset)):
            raise ImporterError(f"config.json: index_topk_freq = {freq!r}, index_skip_topk_offset = {offset!r};"
                                " expected whole numbers")
        kinds = ["full" if max(i - offset + 1, 0) % max(freq, 1) == 0 else "shared" for i in range(count)]
    if not isinstance(kinds, list) or len(kinds) != count or any(k not in ("full", "shared") for k in kinds):
        raise ImporterError(f"config.json: indexer_types must list \"full\" or \"shared\" for each of the {count}"
                            " layers")
    if count and kinds[0] != "full":
        raise ImporterError("config.json: indexer_types[0] is \"shared\"; expected \"full\" (a shared layer reuses an"
                            " earlier layer's selection, and layer 0 has none before it)")
    return list(kinds)


def open_deepseek_v32(config: Config, tensors: TensorFiles, tokenize: Tokenize, source: str) -> Model:
    H_I, d_I, top_k = _refuse(config)
    kinds = indexer_types(config)
    model = open_deepseek(config, tensors, tokenize, source)
    p = prefix_of(tensors, "embed_tokens.weight", f"{config.model_type} (DeepSeek Sparse Attention)")
    d = config.d_model
    get = tensors.get
    layout = INDEX_LAYOUT[config.model_type]
    kept: dict[int, BoolMatrix] = {}  # each full layer's last selection (n, n), for the shared layers above it

    def source_of(i: int) -> int:
        return max(j for j in range(i + 1) if kinds[j] == "full")

    def indexer(i: int, w: MlaWeights) -> IndexerWeights:
        a = f"{p}layers.{i}.self_attn.indexer."
        d_cq = int(w.W_DQ.shape[1]) if w.W_DQ is not None else 0
        return IndexerWeights(
            H_I, _fixed(get(a + "wq_b.weight", (H_I * d_I, d_cq)).T), _fixed(get(a + "wk.weight", (d_I, d)).T),
            _fixed(get(a + "weights_proj.weight", (H_I, d)).T), top_k, get(a + "k_norm.weight", (d_I,)),
            get(a + "k_norm.bias", (d_I,)), DEFAULT_K_EPS)

    def sparse(i: int) -> Any:
        """A mixture-of-experts layer's MLP: DeepSeek-V3's router and routed experts (hf_mimo.py's SigmoidMoe, as
        transformers' DeepseekV32MoE and GlmMoeDsaMoE run them) plus the shared experts, a SwiGLU on every token."""
        m = f"{p}layers.{i}.mlp."
        routed = sigmoid_moe(config, tensors, m)
        # the shared experts are one SwiGLU of moe_intermediate·n_shared_experts
        common = read_swiglu(tensors, m + "shared_experts.", d, ACTIVATIONS[config.activation])
        return lambda x: routed(x) + common(x)

    def layer(i: int) -> Layer:
        base = model.layer(i)
        if f"{p}layers.{i}.mlp.gate.weight" in tensors:  # the router's: hf_deepseek.py refuses to run this MLP
            base = replace(base, mlp=sparse(i))
        w = base.mla
        assert w is not None
        ix = indexer(i, w) if kinds[i] == "full" else None
        W_O = base.attention.W_O

        def attend(x: Array, rope: Rope | None) -> Array:
            """[mla] over the normed input x (n, d_model), every head's causal mask narrowed to the selection."""
            n = x.shape[0]
            allow = np.tril(np.ones((n, n), dtype=bool))
            # DeepSeek's YaRN where scaled: the scaled frequencies and its attention factor on cos and sin, for the
            # MLA and the indexer alike (transformers hands both the same cos and sin), and m² on the softmax scale
            rotary = Rotary(None if rope is None else rope.latent_turn(rotary_width(w), n))
            divisor = math.sqrt(w.d_qk) if rope is None else rope.latent_divisor(w.d_qk)
            shared = mla_shared(x, w, rotary)
            if ix is not None:
                base_ = rope.base if rope is not None else 10000.0
                thetas, factor = (None, 1.0) if rope is None or rope.scaling is None else rope.thetas(rotary_width(w))
                # the first d_rope of q_I and k_I turn, in the indexer's own layout (RoPE's kernel: columns)
                turn = columns(rotary_width(w), layout, list(range(n)), base_, thetas, factor if rotary_width(w) else 1.0)
                kept[i] = picked = index(x, ix, allow, shared.c_Q, turn).selected  # (n, n)
            else:
                picked = kept.get(source_of(i), np.zeros((0, 0), dtype=bool))
                if picked.shape != (n, n):  # a walk up the stack runs the full layer first; anything else is a bug
                    raise ImporterError(f"{source}: layer {i} reuses layer {source_of(i)}'s selection, which has not"
                                        " run on this text")
            outs = [mla_head(shared, w, h, picked, divisor, rotary).attended.output for h in range(w.num_heads)]
            return project(np.concatenate(outs, axis=1), W_O, None)  # (n, d_model)

        def tables(chosen: list[int]) -> dict[str, Any]:
            """The layer's [indexer] (one for every head: expand.py refuses a subset of [mla]'s heads first)."""
            if ix is None:
                raise ImporterError(
                    f"{source}: layer {i} runs no indexer of its own (indexer_types[{i}] = \"shared\": it attends with"
                    f" layer {source_of(i)}'s selection, computed from that layer's input), which [indexer] cannot take"
                    f" yet; choose layer {source_of(i)} or another \"full\" layer")
            assert ix.k_gamma is not None and ix.k_beta is not None
            return {"indexer": {"num_heads": H_I, "top_k": top_k, "rope_dims": rotary_width(w), "rope_layout": layout,
                                "W_q": ix.W_q, "W_k": ix.W_k, "W_w": ix.W_w,
                                "k_norm": {"gamma": ix.k_gamma.tolist(), "beta": ix.k_beta.tolist(), "eps": ix.k_eps}}}

        return replace(base, attend=attend, tables=tables)

    pairs_are = ("half-split pairs (transformers' DeepseekV32Indexer), while the MLA turns interleaved ones"
                 if layout == "half" else "interleaved pairs (transformers' GlmMoeDsaIndexer), as the MLA does")
    said = model.note(0)
    said += (f" DeepSeek Sparse Attention: {H_I} index heads of {d_I} score every visible key (W_q reads the query"
             f" latent c_Q; the first {config.raw.get('qk_rope_head_dim', 64)} dimensions turn in {pairs_are}), and"
             f" each query keeps its top {top_k} keys in every head.")
    if "shared" in kinds:
        said += (" The layers marked shared in indexer_types run no indexer and reuse the last full layer's"
                 " selection, as the model's own code does.")

    def note(i: int) -> str:
        reusing = [j for j in range(i + 1, len(kinds)) if kinds[j] == "shared" and source_of(j) == i]
        if not reusing or kinds[i] != "full":
            return said
        which = ", ".join(map(str, reusing))
        verb = "attend" if len(reusing) > 1 else "attends"
        return f"{said} This layer's selection is also the one layer{'s' if len(reusing) > 1 else ''} {which} {verb} with."

    return replace(model, layer=layer, note=note)


def _fixed(values: Array) -> Array:
    """A read-only C-ordered copy, as the loader keeps a scenario's matrix."""
    out = np.array(values, dtype=np.float64, order="C")
    out.setflags(write=False)
    return out
