"""DeepSeek-V2 and V3 folders (``deepseek_v2``, ``deepseek_v3``): their attention is latent attention, an ``[mla]`` table.
V3.2 (``deepseek_v32``) is V3's with an indexer beside it: hf_deepseek_v32.py adds it to what this module reads.

As transformers' DeepseekV2Attention and DeepseekV3Attention read the weights (all nn.Linear, (out, in),
transposed here): ``kv_a_proj_with_mqa`` gives the latent's W_DKV in its first kv_lora_rank rows and
the shared rotary key's W_KR in its last qk_rope_head_dim rows; ``kv_a_layernorm`` is the latent's
RMSNorm (kv_norm, gamma_kv); ``kv_b_proj`` holds each head's [k_nope | v] rows one head after the
other, cut here into W_UK and W_UV; the queries are ``q_proj`` (W_Q) or, with q_lora_rank,
``q_a_proj``, ``q_a_layernorm`` and ``q_b_proj`` (W_DQ, q_norm/gamma_q, W_UQ).

RoPE: V2 turns the rotary parts as complex numbers, pairs (2i, 2i+1); V3 does the same with
``rope_interleave`` (its default) and LLaMA's rotate_half without it. V3's interleaved form writes the
turned pairs back evens first, then odds, the same permutation for q_R and k_R, so the scores are those
of the interleaved layout here. The softmax scale is qk_head_dim^-0.5, the format's default for
[mla]. YaRN (rope_type "yarn", the only scaling DeepSeek's checkpoints use) becomes [rope.scaling] with DeepSeek's
mscale and mscale_all_dim kept as given: the attention factor on cos and sin is m(mscale) / m(mscale_all_dim), and
the softmax scale is multiplied by m(mscale_all_dim)², as DeepseekV3Attention does; any other scaling and a partial
rotary factor are refused. The MLP of layers from first_k_dense_replace on is DeepSeek's mixture of
experts, which stack.py does not run: those layers may be chosen but not run beneath a deeper one.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from qkv_tui.base.values import show as _show
from qkv_tui.importers.errors import ImporterError
from qkv_tui.importers.hf_config import Config
from qkv_tui.importers.hf_mlp import read_swiglu
from qkv_tui.importers.hf_tensors import lookup, prefix_of
from qkv_tui.importers.safetensors_raw import TensorFiles
from qkv_tui.importers.schedule import hf_schedule
from qkv_tui.importers.stack import ACTIVATIONS, Array, Attention, Layer, Model, Norm, Rope, Tokenize
from qkv_tui.kernels.mla import MlaWeights
from qkv_tui.kernels.mla_rope import rotary_width

LATENT_EPS = 1e-6  # q_a_layernorm and kv_a_layernorm are built without the config's rms_norm_eps, so 1e-6
Q_LORA_RANK = {"deepseek_v2": None, "deepseek_v3": 1536, "deepseek_v32": 1536, "glm_moe_dsa": 2048}  # the defaults


def _size(raw: dict[str, Any], key: str, default: int | None) -> int | None:
    value = raw.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ImporterError(f"config.json: {key} = {value!r}; expected a whole number >= 1")
    return value


def _sizes(config: Config) -> tuple[int, int, int, int, int | None]:
    """(kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, q_lora_rank or None), transformers' defaults."""
    raw = config.raw
    glm = config.model_type == "glm_moe_dsa"  # GlmMoeDsaConfig's head widths differ from DeepSeek's
    d_c = _size(raw, "kv_lora_rank", 512)
    d_nope = _size(raw, "qk_nope_head_dim", 192 if glm else 128)
    d_rope = _size(raw, "qk_rope_head_dim", 64)
    d_v = _size(raw, "v_head_dim", 256 if glm else 128)
    d_cq = _size(raw, "q_lora_rank", Q_LORA_RANK.get(config.model_type))
    assert d_c is not None and d_nope is not None and d_rope is not None and d_v is not None
    if d_rope % 2:
        raise ImporterError(f"config.json: qk_rope_head_dim = {d_rope} is odd; RoPE turns the rotary dimensions in pairs")
    return d_c, d_nope, d_rope, d_v, d_cq


def _layout(config: Config) -> str:
    if config.model_type == "deepseek_v3" and config.raw.get("rope_interleave", True) is False:
        return "half"
    return "interleaved"


def _refuse(config: Config) -> None:
    raw = config.raw
    if raw.get("attention_bias"):
        raise ImporterError("config.json: attention_bias = true is not supported; [mla] has no biases on its projections")
    kind = dict(config.rope.scaling or ()).get("type") if config.rope is not None else None
    if config.rope is not None and (kind not in (None, "yarn") or config.rope.partial != 1.0):
        raise ImporterError(
            f"config.json: DeepSeek's rope scaling {kind or 'partial'!r} is not supported; [mla] scales its rotary"
            " parts only with YaRN (rope_type \"yarn\"), as DeepSeek's checkpoints do"
        )
    if config.num_kv_heads != config.num_heads:
        raise ImporterError(
            f"config.json: num_key_value_heads = {config.num_kv_heads} differs from num_attention_heads ="
            f" {config.num_heads}; DeepSeek's latent attention expands one key and value per query head"
        )


def open_deepseek(config: Config, tensors: TensorFiles, tokenize: Tokenize, source: str) -> Model:
    _refuse(config)
    p = prefix_of(tensors, "embed_tokens.weight", f"{config.model_type} (DeepSeek)")
    d, H = config.d_model, config.num_heads
    d_c, d_nope, d_rope, d_v, d_cq = _sizes(config)
    d_qk = d_nope + d_rope
    table = tensors.rows(p + "embed_tokens.weight", (None, d))  # (vocab, d)
    act = ACTIVATIONS[config.activation]
    assert config.rope_base is not None
    first_dense = _size(config.raw, "first_k_dense_replace", 0 if config.model_type == "deepseek_v2" else 3)
    dense_until = _dense_until(config, first_dense or 0)
    get = tensors.get

    def embed(ids: list[int]) -> Array:
        return lookup(table, p + "embed_tokens.weight", ids)  # (n, d_model); positions enter through RoPE

    def rms(name: str, width: int) -> Array:
        return get(name + ".weight", (width,))

    def weights(a: str) -> MlaWeights:
        kv_a = get(a + "kv_a_proj_with_mqa.weight", (d_c + d_rope, d)).T  # (d, d_c + d_rope)
        kv_b = get(a + "kv_b_proj.weight", (H * (d_nope + d_v), d_c)).T  # (d_c, H·(d_nope + d_v)), each head [k | v]
        per = kv_b.reshape(d_c, H, d_nope + d_v)  # (d_c, H, d_nope + d_v)
        W_UK = np.ascontiguousarray(per[:, :, :d_nope].reshape(d_c, H * d_nope))  # (d_c, H·d_nope)
        W_UV = np.ascontiguousarray(per[:, :, d_nope:].reshape(d_c, H * d_v))  # (d_c, H·d_v)
        W_Q = W_DQ = W_UQ = gamma_q = None
        if d_cq is None:
            W_Q = get(a + "q_proj.weight", (H * d_qk, d)).T  # (d, H·d_qk), each head [nope | rope]
        else:
            W_DQ = get(a + "q_a_proj.weight", (d_cq, d)).T  # (d, d_cq)
            gamma_q = rms(a + "q_a_layernorm", d_cq)
            W_UQ = get(a + "q_b_proj.weight", (H * d_qk, d_cq)).T  # (d_cq, H·d_qk)
        return MlaWeights(H, d_nope, d_v, np.ascontiguousarray(kv_a[:, :d_c]), W_UK, W_UV,
                          np.ascontiguousarray(kv_a[:, d_c:]), W_Q, W_DQ, W_UQ, rms(a + "kv_a_layernorm", d_c),
                          gamma_q, LATENT_EPS)

    def moe(i: int) -> Any:
        def refuse(x: Array) -> Array:
            raise ImporterError(
                f"{source}: layer {i}'s MLP is DeepSeek's mixture of experts (first_k_dense_replace = {dense_until}),"
                f" which qkv-tui does not run; choose model.layer {dense_until} or below"
            )
        return refuse

    def layer(i: int) -> Layer:
        h = f"{p}layers.{i}."
        w = weights(h + "self_attn.")
        W_O = get(h + "self_attn.o_proj.weight", (d, H * d_v)).T  # (H·d_v, d)
        if i < dense_until:
            mlp: Any = read_swiglu(tensors, h + "mlp.", d, act)
        else:
            mlp = moe(i)
        return Layer(
            norm=Norm("rms", rms(h + "input_layernorm", d), None, config.eps),
            attention=_as_heads(w, W_O),
            mlp_norm=Norm("rms", rms(h + "post_attention_layernorm", d), None, config.eps),
            mlp=mlp, scale=None, window=None, mla=w,
        )

    version = {"deepseek_v2": "V2", "deepseek_v3": "V3", "deepseek_v32": "V3.2",
               "glm_moe_dsa": "GLM-5"}[config.model_type]
    said = (f"DeepSeek's latent attention ({version}): every head's keys and"
            f" values come from one latent of {d_c} numbers per token (kv_a_proj_with_mqa, then kv_a_layernorm)"
            f" and a rotary key of {d_rope} shared by the heads.")
    rope = Rope(_layout(config), config.rope_base, 1.0, _yarn(config))
    if rope.scaling is not None:
        said += (f" Its RoPE is scaled by YaRN (factor {rope.scaling['factor']:g}), whose mscale_all_dim also"
                 " multiplies the softmax scale by m², as transformers' DeepseekV3Attention does.")
    return Model(source, config.num_layers, H, config.context, rope, tokenize, embed, layer, hf_schedule(config),
                 lambda layer: said)


def _yarn(config: Config) -> dict[str, Any] | None:
    """[rope.scaling] for a DeepSeek config with YaRN: the fields hf_rope.py reads, with DeepSeek's mscale and
    mscale_all_dim as given (the attention factor is then worked from them, unless the file gives one)."""
    if config.rope is None or config.rope.scaling is None:
        return None
    fields = dict(config.rope.scaling)
    raw = config.raw.get("rope_parameters")
    if not isinstance(raw, dict) or "rope_type" not in raw:
        raw = config.raw.get("rope_scaling")
    raw = raw if isinstance(raw, dict) else {}
    kept = {}
    for key in ("mscale", "mscale_all_dim"):
        value = raw.get(key)
        if value:  # transformers reads them with `if mscale and mscale_all_dim`: 0 and null mean not given
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ImporterError(f"config.json: rope_scaling {key} = {value!r}; expected a number > 0")
            kept[key] = float(value)
    if raw.get("attention_factor") is None and len(kept) == 2:
        fields.pop("attention_factor", None)  # hf_rope.py worked it from the two m's: the scenario works it again
    return {**fields, **kept}


def _dense_until(config: Config, first_dense: int) -> int:
    """How many leading layers have a dense MLP: V3.2's config lists each layer's (mlp_layer_types, "dense" or
    "sparse"; transformers derives it from first_k_dense_replace when the file has none)."""
    kinds = config.raw.get("mlp_layer_types") if config.model_type in ("deepseek_v32", "glm_moe_dsa") else None
    if kinds is None:
        return first_dense
    if not isinstance(kinds, list) or len(kinds) != config.num_layers or any(k not in ("dense", "sparse") for k in kinds):
        raise ImporterError(f"config.json: mlp_layer_types must list \"dense\" or \"sparse\" for each of the"
                            f" {config.num_layers} layers")
    until = kinds.index("sparse") if "sparse" in kinds else len(kinds)
    if "dense" in kinds[until:]:
        raise ImporterError(f"config.json: mlp_layer_types has a dense layer after the mixture of experts (layer"
                            f" {kinds.index('dense', until)}); expected the dense layers first, as DeepSeek's")
    return until


def _as_heads(w: MlaWeights, W_O: Array) -> Attention:
    """The layer as plain heads would hold it, the latent multiplied through: the shapes the checks and views read
    (exact only where there is no latent norm; the forward pass computes from the latent)."""
    if w.W_Q is not None:
        W_Q = w.W_Q
    else:
        assert w.W_DQ is not None and w.W_UQ is not None
        W_Q = w.W_DQ @ w.W_UQ  # (d_model, H·d_qk)
    W_K = np.concatenate([np.concatenate([w.W_DKV @ w.W_UK_of(h), w.W_KR], axis=1) for h in range(w.num_heads)], axis=1)
    return Attention(W_Q, W_K, w.W_DKV @ w.W_UV, W_O, None, None, None, None, w.num_heads, w.num_heads)


def mla_table(w: MlaWeights) -> dict[str, Any]:
    """The [mla] table of the layer, as a scenario file spells it (docs/scenario-format.md, [mla])."""
    out: dict[str, Any] = {"num_heads": w.num_heads, "d_nope": w.d_nope, "d_rope": rotary_width(w), "d_v": w.d_v,
                           "W_DKV": w.W_DKV, "W_UK": w.W_UK, "W_UV": w.W_UV, "W_KR": w.W_KR}
    if w.W_Q is not None:
        out["W_Q"] = w.W_Q
    else:
        out["W_DQ"], out["W_UQ"] = w.W_DQ, w.W_UQ
    if w.gamma_kv is not None:
        out["kv_norm"], out["gamma_kv"] = True, w.gamma_kv.tolist()
    if w.gamma_q is not None:
        out["q_norm"], out["gamma_q"] = True, w.gamma_q.tolist()
    out["eps"] = w.eps
    return out


def only_every_head(name: str) -> ImporterError:
    return ImporterError(
        f"{_show(name)}: its latent attention is one [mla] table for every head (they share the latent and the"
        " rotary key), so the scenario needs every head; leave out model.heads"
    )
