"""Kimi Linear folders (model_type "kimi_linear"), read as transformers' KimiLinearForCausalLM computes them.

Two kinds of layer (hf_kimi_linear_config.py says which is which):
- Kimi Delta Attention ("linear_attention", KimiLinearDeltaAttention): a ``[deltanet]`` scenario with a gate per key
  channel. q, k and v (``q_proj``, ``k_proj``, ``v_proj``) each through a causal convolution of
  short_conv_kernel_size taps and SiLU (``q_conv1d``, ``k_conv1d``, ``v_conv1d``, or transformers' stacked
  ``conv1d``), l2-normed in the rule (q also ÷ √d_k); the forget gate g = −e^{A_log}·softplus((X̂·W_fa)·W_fb +
  dt_bias) per key channel (``f_a_proj``, ``f_b_proj``, ``dt_bias``, ``A_log``, at the attention's level or under
  ``forget_gate.``), β = σ(X̂·W_b) (``b_proj``); each head's output through KimiLinearRMSNormGated,
  rmsnorm(o)·γ·σ(z) (``o_norm``, eps rms_norm_eps), z = (X̂·W_ga)·W_gb (``g_a_proj``, ``g_b_proj``), which the
  scenario holds multiplied out as W_Z = W_ga·W_gb (the same z, one matrix: [deltanet] has no low-rank W_Z); then
  ``o_proj``. Every head has d_k = d_v = linear_head_dim.
- latent attention ("full_attention", KimiLinearAttention): DeepSeek's MLA read as hf_deepseek.py reads it (an
  ``[mla]`` table), but with no RoPE anywhere (NoPE): the qk_rope_head_dim part of each query and the shared key
  k_R = X̂·W_KR stay as projected, so the scenario has no [rope]; the scale is (qk_nope + qk_rope)^-1/2, [mla]'s
  default; both latent norms have eps 1e-6 (transformers builds them without the config's eps).

Every layer is pre-norm (RMSNorm, γ as stored) with an MLP after it: SwiGLU in the "dense" ones, in the "sparse"
ones DeepSeek-V3's router and routed experts (hf_mimo.py's SigmoidMoe, as KimiLinearTopkRouter and KimiLinearMoE
run them) plus the shared experts, run in NumPy beneath a deeper layer. The experts are read as the Hub stores
them (``block_sparse_moe.experts.E.w1`` gate, ``w3`` up, ``w2`` down), which is also what save_pretrained writes,
or fused (``mlp.experts.gate_up_proj``, ``mlp.experts.down_proj``). No position enters anywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from qkv_tui.base.values import show as _show
from qkv_tui.importers.errors import ImporterError
from qkv_tui.importers.hf_config import Config
from qkv_tui.importers.hf_deepseek import LATENT_EPS, _as_heads
from qkv_tui.importers.hf_kimi_linear_config import FULL, KimiSizes, kimi_sizes, whole
from qkv_tui.importers.hf_mimo import SigmoidMoe
from qkv_tui.importers.hf_mlp import read_router, read_swiglu, read_swiglu_experts
from qkv_tui.importers.hf_tensors import lookup, prefix_of
from qkv_tui.importers.safetensors_raw import TensorFiles
from qkv_tui.importers.stack import ACTIVATIONS, Array, Attention, Layer, Model, Norm, Tokenize
from qkv_tui.kernels.kda import KdaLayerWeights, kda_layer
from qkv_tui.kernels.mla import MlaWeights


def _c(values: Array) -> Array:
    return np.ascontiguousarray(values)


def read_kda(s: KimiSizes, config: Config, tensors: TensorFiles, a: str) -> KdaLayerWeights:
    """A Kimi Delta Attention layer's weights under ``a`` (a layer's "self_attn."), in the x·W orientation."""
    d, H, dk, K = config.d_model, s.linear_heads, s.linear_head_dim, s.conv_taps
    w = H * dk
    get = tensors.get
    if a + "conv1d.weight" in tensors:  # transformers' stacked form: channels [q | k | v]
        stacked = get(a + "conv1d.weight", (3 * w, 1, K))[:, 0, :].T  # (K, 3w)
        conv_q, conv_k, conv_v = stacked[:, :w], stacked[:, w:2 * w], stacked[:, 2 * w:]
    else:
        conv_q, conv_k, conv_v = (get(f"{a}{c}_conv1d.weight", (w, 1, K))[:, 0, :].T for c in "qkv")  # (K, w) each
    for conv in ("q_conv1d", "k_conv1d", "v_conv1d", "conv1d"):
        if f"{a}{conv}.bias" in tensors:
            raise ImporterError(f"the checkpoint's self_attn.{conv} has a bias; the short convolution is read without one")
    f = a + "forget_gate." if a + "forget_gate.f_a_proj.weight" in tensors else a
    f_a = get(f + "f_a_proj.weight", (None, d))  # (r, d)
    r = int(f_a.shape[0])
    held = tensors.entries.get(f + "A_log")  # (1, 1, H, 1) as Kimi stores it; any shape of H numbers is read
    A_log = get(f + "A_log", (None,) * (1 if held is None else len(held.shape))).reshape(-1)
    if A_log.shape != (H,):
        raise ImporterError(f"tensor {f + 'A_log'!r} holds {A_log.size} numbers; expected one per KDA head ({H})")
    g_a = get(a + "g_a_proj.weight", (None, d))  # (r', d)
    return KdaLayerWeights(
        H, dk, _c(get(a + "q_proj.weight", (w, d)).T), _c(get(a + "k_proj.weight", (w, d)).T),
        _c(get(a + "v_proj.weight", (w, d)).T), _c(conv_q), _c(conv_k), _c(conv_v), _c(f_a.T),
        _c(get(f + "f_b_proj.weight", (w, r)).T), A_log, get(f + "dt_bias", (w,)), _c(get(a + "b_proj.weight", (H, d)).T),
        _c(g_a.T), _c(get(a + "g_b_proj.weight", (w, int(g_a.shape[0]))).T), get(a + "o_norm.weight", (dk,)),
        config.eps, _c(get(a + "o_proj.weight", (d, w)).T))


def deltanet_table(w: KdaLayerWeights) -> dict[str, Any]:
    """The layer's [deltanet] table as a scenario file spells it (docs/scenario-format.md, Kimi Delta Attention)."""
    dk = w.d_k
    return {"W_fa": w.W_fa, "W_fb": w.W_fb, "A_log": w.A_log.tolist(),
            "dt_bias": [w.dt_bias[h * dk:(h + 1) * dk].tolist() for h in range(w.num_heads)], "W_b": w.W_b,
            "conv_q": w.conv_q, "conv_k": w.conv_k, "conv_v": w.conv_v, "W_Z": w.W_ga @ w.W_gb,
            "gamma_o": w.gamma_o.tolist(), "eps_o": w.eps, "gate_o": "sigmoid"}


def read_mla(s: KimiSizes, config: Config, tensors: TensorFiles, a: str) -> MlaWeights:
    """A latent-attention layer's weights under ``a``, as hf_deepseek.py reads DeepSeek's (nn.Linear, transposed)."""
    d, H, get = config.d_model, config.num_heads, tensors.get
    d_c, d_nope, d_rope, d_v, d_cq = s.d_c, s.d_nope, s.d_rope, s.d_v, s.d_cq
    kv_a = get(a + "kv_a_proj_with_mqa.weight", (d_c + d_rope, d)).T  # (d, d_c + d_rope)
    per = get(a + "kv_b_proj.weight", (H * (d_nope + d_v), d_c)).T.reshape(d_c, H, d_nope + d_v)  # each head [k | v]
    W_Q = W_DQ = W_UQ = gamma_q = None
    if d_cq is None:
        W_Q = get(a + "q_proj.weight", (H * (d_nope + d_rope), d)).T  # (d, H·d_qk), each head [nope | rope]
    else:
        W_DQ = get(a + "q_a_proj.weight", (d_cq, d)).T
        gamma_q = get(a + "q_a_layernorm.weight", (d_cq,))
        W_UQ = get(a + "q_b_proj.weight", (H * (d_nope + d_rope), d_cq)).T
    return MlaWeights(H, d_nope, d_v, _c(kv_a[:, :d_c]), _c(per[:, :, :d_nope].reshape(d_c, H * d_nope)),
                      _c(per[:, :, d_nope:].reshape(d_c, H * d_v)), _c(kv_a[:, d_c:]), W_Q, W_DQ, W_UQ,
                      get(a + "kv_a_layernorm.weight", (d_c,)), gamma_q, LATENT_EPS)


def _mlp_prefix(tensors: TensorFiles, h: str, probe: str) -> str:
    """"mlp." (transformers' name, and the Hub's for the dense layers) or "block_sparse_moe." (the Hub's for the
    sparse ones, and what save_pretrained writes for every layer)."""
    return h + ("mlp." if h + "mlp." + probe in tensors else "block_sparse_moe.")


def read_moe(config: Config, tensors: TensorFiles, h: str) -> Callable[[Array], Array]:
    """A sparse layer's MLP: the routed experts (SigmoidMoe, KimiLinearTopkRouter's choice) plus the shared ones."""
    raw, d, name = config.raw, config.d_model, "config.json"
    act = ACTIVATIONS[config.activation]
    m = _mlp_prefix(tensors, h, "gate.weight")
    experts = whole(name, raw, ("num_experts", "num_local_experts"), 256)
    top_k = whole(name, raw, ("num_experts_per_token", "num_experts_per_tok"), 8)
    groups = whole(name, raw, ("num_expert_group", "n_group"), 1)
    top_groups = whole(name, raw, ("topk_group",), 1)
    if top_k > experts or experts % groups or top_groups > groups:
        raise ImporterError(f"config.json: num_experts_per_token = {top_k}, num_experts = {experts}, num_expert_group ="
                            f" {groups}, topk_group = {top_groups}; expected top-k ≤ experts, groups dividing the"
                            " experts and topk_group ≤ num_expert_group")
    scaling = raw.get("routed_scaling_factor", 2.446)
    if isinstance(scaling, bool) or not isinstance(scaling, (int, float)) or not 0 < scaling < float("inf"):
        raise ImporterError(f"config.json: routed_scaling_factor = {_show(scaling)}; expected a number > 0")
    renorm = raw.get("moe_renormalize", raw.get("norm_topk_prob", True)) is not False
    W_gate, W_up, W_down = read_swiglu_experts(tensors, m, experts, d, "w1", "w3", "w2")
    router = read_router(tensors, m, experts, d, top_k, groups, top_groups, renorm, float(scaling))
    routed = SigmoidMoe(router, W_gate, W_up, W_down, act)
    shared = read_swiglu(tensors, m + "shared_experts.", d, act) if m + "shared_experts.gate_proj.weight" in tensors else None
    return routed if shared is None else (lambda x: routed(x) + shared(x))


def only_every_head(name: str) -> ImporterError:
    return ImporterError(
        f"{_show(name)}: a Kimi Delta Attention layer opens as one [deltanet] scenario of every head (its gates,"
        " convolution and gated norm are cut from the whole layer's matrices); leave out model.heads")


def open_kimi_linear(config: Config, tensors: TensorFiles, tokenize: Tokenize, source: str) -> Model:
    s = kimi_sizes("config.json", config.raw)
    if config.activation != "silu":
        raise ImporterError(f"config.json: hidden_act {config.activation!r} is not supported; Kimi Linear's short"
                            " convolution is read with SiLU (its activation), as released")
    p = prefix_of(tensors, "embed_tokens.weight", "kimi_linear (Kimi Linear)")
    d, H = config.d_model, config.num_heads
    table = tensors.rows(p + "embed_tokens.weight", (None, d))  # (vocab, d)
    act = ACTIVATIONS[config.activation]
    get = tensors.get

    def embed(ids: list[int]) -> Array:
        return lookup(table, p + "embed_tokens.weight", ids)  # (n, d_model); no position enters anywhere

    def rms(name: str) -> Norm:
        return Norm("rms", get(name + ".weight", (d,)), None, config.eps)

    def layer(i: int) -> Layer:
        h = f"{p}layers.{i}."
        mlp = (read_swiglu(tensors, _mlp_prefix(tensors, h, "gate_proj.weight"), d, act) if s.mlp_types[i] == "dense"
               else read_moe(config, tensors, h))
        norms: dict[str, Any] = {"norm": rms(h + "input_layernorm"), "mlp_norm": rms(h + "post_attention_layernorm"),
                                 "mlp": mlp, "scale": None, "window": None, "rotary": False}
        if s.layer_types[i] == FULL:
            w = read_mla(s, config, tensors, h + "self_attn.")
            return Layer(attention=_as_heads(w, get(h + "self_attn.o_proj.weight", (d, H * s.d_v)).T), mla=w, **norms)
        k = read_kda(s, config, tensors, h + "self_attn.")

        def tables(chosen: list[int]) -> dict[str, Any]:
            if chosen != list(range(H)):
                raise only_every_head(source)
            return {"deltanet": deltanet_table(k)}

        heads = Attention(k.W_Q, k.W_K, k.W_V, k.W_O, None, None, None, None, k.num_heads, k.num_heads)
        return Layer(attention=heads, attend=lambda x, rope: kda_layer(k, x).output, tables=tables, **norms)

    schedule = tuple("full" if kind == FULL else "linear" for kind in s.layer_types)
    kda_said = (f"A Kimi Delta Attention layer of Kimi Linear: {s.linear_heads} heads of {s.linear_head_dim}, q, k and v"
                f" each through a causal convolution of {s.conv_taps} taps and SiLU, a forget gate per key channel"
                " (−e^A_log·softplus((X̂·W_fa)·W_fb + dt_bias)), β = σ(X̂·W_b), then rmsnorm(o)·γ·σ(z) with"
                " z = X̂·W_Z before W_O: the model computes z as (X̂·W_ga)·W_gb (g_a_proj, g_b_proj), W_Z here is"
                " their product. No position enters: Kimi Linear has no RoPE.")
    mla_said = (f"A full-attention layer of Kimi Linear: DeepSeek's latent attention with no RoPE (NoPE). Every head's"
                f" keys and values come from one latent of {s.d_c} numbers per token (kv_a_proj_with_mqa, then"
                f" kv_a_layernorm), and a key part of {s.d_rope} shared by the heads, which the model never rotates.")
    return Model(source, config.num_layers, H, config.context, None, tokenize, embed, layer, schedule,
                 lambda i: mla_said if s.layer_types[i] == FULL else kda_said, positionless=True)
