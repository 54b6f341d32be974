"""A local Hugging Face model folder (config.json, *.safetensors, tokenizer.json), read without PyTorch.

Two layouts:
- "gpt2": LayerNorm, learned position embeddings added to the token embeddings, one fused
  ``c_attn`` (Q, K, V side by side) with biases. GPT-2's Conv1D stores weights as (in, out), which
  is already the x·W orientation. Keys may carry a ``transformer.`` prefix; ``attn.bias`` and
  ``attn.masked_bias`` are the causal-mask buffers, not biases, and are never read.
- "llama" and its kin "mistral", "qwen2", "qwen3", "smollm3", "granite" and "phi3": RMSNorm, RoPE in the
  "half" layout (Hugging Face's rotate_half), separate ``q_proj``/``k_proj``/``v_proj``/``o_proj``
  stored as nn.Linear (out, in) and transposed here, optional Q/K/V biases (Qwen2), grouped K/V heads,
  SwiGLU MLP. Phi-3 fuses Q, K and V into one ``qkv_proj`` (rows Q, then K, then V) and gate and up
  into ``gate_up_proj``; SmolLM3 leaves RoPE out of some layers (NoPE); Granite multiplies the
  embeddings, the scores and each sub-layer's output by constants of its config. Qwen3 adds QK-norm:
  ``q_norm``/``k_norm``, an RMSNorm over each head's head_dim with gains shared by the heads. OLMo 2
  norms the whole query and key projections (every head's columns together) and puts its norms after
  the sub-layers (``post_attention_layernorm``, ``post_feedforward_layernorm`` on each one's output,
  before the residual add), so its attention reads the stream as it is: no [norm]. gpt-oss adds a
  sink logit per head (``self_attn.sinks``), biases on every projection, YaRN, sliding and full layers
  (``layer_types``) and a mixture-of-experts MLP (stack.MoeMlp; experts stored (in, out), not quantised).
  Gemma 2 and 3: hf_gemma.py. DiffLlama ("diffllama"): LLaMA's layout with differential attention, hf_diffllama.py.
- "deepseek_v2" and "deepseek_v3": latent attention, an [mla] table (hf_deepseek.py); "deepseek_v32" adds the
  lightning indexer of DeepSeek Sparse Attention, an [indexer] table, and so does GLM-5's "glm_moe_dsa"
  (hf_deepseek_v32.py).
- "bert": hf_bert.py.
- "mimo_v2_flash": hybrid sliding and full layers, value heads narrower than query/key heads, a value scale
  (hf_mimo.py).
- "gemma3n" and "gemma3n_text": AltUp streams, LAuReL, per-layer inputs, a value norm, KV shared across layers
  (hf_gemma3n.py).
- "mamba2": no attention; each layer's mixer as an [ssd] scenario (hf_mamba2_folder.py).
- "nemotron_h": Mamba-2, attention and MLP/MoE blocks interleaved (hf_nemotron_h.py).
- "kimi_linear": Kimi Delta Attention layers as [deltanet] scenarios and latent-attention layers without RoPE as
  [mla] ones (hf_kimi_linear.py).
"""

from __future__ import annotations

import stat
from collections.abc import Callable
from pathlib import Path

import qkv_tui.importers.hf_gemma as hf_gemma
import qkv_tui.importers.hf_qwen3next as hf_qwen3next
import qkv_tui.importers.hf_qwen35 as hf_qwen35
from qkv_tui.base.files import file_kind
from qkv_tui.base.values import show as _show
from qkv_tui.base.values import token_label
from qkv_tui.importers.bounds import check_heads, check_layers
from qkv_tui.importers.errors import ImporterError, missing_package
from qkv_tui.importers.files import read_limited, status
from qkv_tui.importers.hf_bert import open_bert
from qkv_tui.importers.hf_config import DEEPSEEK_TYPES, GEMMA_TYPES, Config, read_config, rotary, sliding_window
from qkv_tui.importers.hf_deepseek import open_deepseek
from qkv_tui.importers.hf_deepseek_v32 import open_deepseek_v32
from qkv_tui.importers.hf_diffllama import open_diffllama
from qkv_tui.importers.hf_gated_deltanet import as_heads, linear_note, read_linear
from qkv_tui.importers.hf_gemma3n import open_gemma3n
from qkv_tui.importers.hf_kimi_linear import open_kimi_linear
from qkv_tui.importers.hf_mamba2_folder import open_mamba2
from qkv_tui.importers.hf_mimo import open_mimo
from qkv_tui.importers.hf_mlp import read_swiglu
from qkv_tui.importers.hf_nemotron_h import open_nemotron_h
from qkv_tui.importers.hf_tensors import lookup, prefix_of
from qkv_tui.importers.safetensors_raw import TensorFiles
from qkv_tui.importers.schedule import hf_schedule
from qkv_tui.importers.stack import (
    ACTIVATIONS,
    Array,
    Attention,
    DenseMlp,
    GatedMlp,
    Layer,
    Model,
    MoeMlp,
    Norm,
    QkNorm,
    Rope,
    Tokenize,
)

TOKENIZER_LIMIT = 256 * 2**20  # the largest tokenizer.json files in use (Gemma's, Qwen's) are tens of MB


def open_folder(folder: Path, source: str) -> Model:
    """``source`` is the source as the user wrote it: the model's name in messages and the description."""
    shown = _show(source)
    found = status(folder)
    if found is None:
        raise ImporterError(
            f"model.source {shown}: no such folder ({_show(str(folder))}); expected a Hugging Face folder"
            " or glassllm:en / glassllm:pt"
        )
    if not stat.S_ISDIR(found.st_mode):
        raise ImporterError(
            f"model.source {shown} is {file_kind(found.st_mode) or 'a file'}; expected a folder holding config.json,"
            " *.safetensors and tokenizer.json"
        )
    for needed in ("config.json", "tokenizer.json"):
        if status(folder / needed) is None:
            raise ImporterError(f"model.source {shown} has no {needed}; expected config.json, *.safetensors and tokenizer.json")
    weights = sorted(folder.glob("*.safetensors"))
    if not weights:
        raise ImporterError(
            f"model.source {shown} has no *.safetensors weights; expected model.safetensors (pytorch_model.bin is not read)"
        )
    config = read_config(folder / "config.json")
    if config.activation not in ACTIVATIONS:
        key = "activation_function" if config.model_type == "gpt2" else "hidden_act"
        raise ImporterError(
            f"config.json: {key} {_show(config.activation)} is not supported; expected one of: {', '.join(ACTIVATIONS)}"
        )
    tokenize = _tokenizer(folder / "tokenizer.json")
    tensors = TensorFiles(weights)
    _bounded(config, tensors)
    if config.model_type == "gpt2":
        return _gpt2(config, tensors, tokenize, source)
    if config.model_type == "bert":
        return open_bert(config, tensors, tokenize, source)
    if config.model_type in ("deepseek_v32", "glm_moe_dsa"):
        return open_deepseek_v32(config, tensors, tokenize, source)
    if config.model_type in DEEPSEEK_TYPES:
        return open_deepseek(config, tensors, tokenize, source)
    if config.model_type == "mimo_v2_flash":
        return open_mimo(config, tensors, tokenize, source)
    if config.model_type == "gemma3n_text":
        return open_gemma3n(config, tensors, tokenize, source)
    if config.model_type == "kimi_linear":  # KDA and NoPE latent-attention layers (hf_kimi_linear.py)
        return open_kimi_linear(config, tensors, tokenize, source)
    if config.model_type == "mamba2":  # no attention: each layer's mixer as an [ssd] scenario (hf_mamba2_folder.py)
        return open_mamba2(config, tensors, tokenize, source)
    if config.model_type == "nemotron_h":  # a hybrid of Mamba-2, attention and MLP blocks (hf_nemotron_h.py)
        return open_nemotron_h(config, tensors, tokenize, source)
    if config.model_type == "diffllama":  # LLaMA's layout, its attention differential (hf_diffllama.py)
        return open_diffllama(_llama(config, tensors, tokenize, source), config, tensors)
    return _llama(config, tensors, tokenize, source)


def _bounded(config: Config, tensors: TensorFiles) -> None:
    """The config's layer and head counts, checked against the tensors before the schedule walks every layer."""
    gpt2 = config.model_type == "gpt2"
    check_layers("config.json", "n_layer" if gpt2 else "num_hidden_layers", config.num_layers, tensors.names())
    numbers = tensors.numbers()
    key = "n_head" if gpt2 else "num_heads" if config.model_type == "mamba2" else "num_attention_heads"
    check_heads("config.json", key, config.num_heads, config.d_model, numbers)


def _tokenizer(path: Path) -> Tokenize:
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise ImporterError(missing_package("tokenizers", f"reading {path.name}")) from None
    raw = read_limited(path, "a tokenizer.json", TOKENIZER_LIMIT)  # never a blocking open: the library's own would be
    try:
        tokenizer = Tokenizer.from_str(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ImporterError(f"{path.name}: not UTF-8 text; expected the JSON file the tokenizers library writes") from None
    except Exception as exc:  # the Rust side raises plain Exception for every malformed file
        reason = (str(exc).splitlines() or [type(exc).__name__])[0][:120]
        raise ImporterError(f"{path.name}: not a tokenizer the tokenizers library reads ({reason})") from None

    def tokenize(text: str) -> tuple[list[str], list[int]]:
        encoding = tokenizer.encode(text)  # special tokens the post-processor adds (LLaMA's <s>) included
        return [token_label(t) for t in encoding.tokens], [int(i) for i in encoding.ids]

    return tokenize


def _gpt2(config: Config, tensors: TensorFiles, tokenize: Tokenize, source: str) -> Model:
    p = prefix_of(tensors, "wte.weight", "GPT-2")
    d = config.d_model
    wte = tensors.rows(p + "wte.weight", (None, d))  # (vocab, d), rows read as a text needs them
    wpe = tensors.get(p + "wpe.weight", (config.context, d))  # (n_positions, d)
    act = ACTIVATIONS[config.activation]
    raw = config.raw

    def embed(ids: list[int]) -> Array:
        return lookup(wte, p + "wte.weight", ids) + wpe[: len(ids)]  # (n, d_model): token plus learned position

    def layer(i: int) -> Layer:
        h = f"{p}h.{i}."
        get = tensors.get
        c_attn, c_attn_b = get(h + "attn.c_attn.weight", (d, 3 * d)), get(h + "attn.c_attn.bias", (3 * d,))
        c_fc = get(h + "mlp.c_fc.weight", (d, None))  # (d, inner)
        inner = int(c_fc.shape[1])
        scale: float | None = None
        if raw.get("scale_attn_weights", True) is False or raw.get("scale_attn_by_inverse_layer_idx", False):
            base = config.head_dim**0.5 if raw.get("scale_attn_weights", True) is not False else 1.0
            scale = base * (i + 1 if raw.get("scale_attn_by_inverse_layer_idx", False) else 1)
        return Layer(
            norm=Norm("layer", get(h + "ln_1.weight", (d,)), get(h + "ln_1.bias", (d,)), config.eps),
            attention=Attention(
                c_attn[:, :d], c_attn[:, d:2 * d], c_attn[:, 2 * d:], get(h + "attn.c_proj.weight", (d, d)),
                c_attn_b[:d], c_attn_b[d:2 * d], c_attn_b[2 * d:], get(h + "attn.c_proj.bias", (d,)),
                config.num_heads, config.num_heads,
            ),
            mlp_norm=Norm("layer", get(h + "ln_2.weight", (d,)), get(h + "ln_2.bias", (d,)), config.eps),
            mlp=DenseMlp(
                c_fc, get(h + "mlp.c_fc.bias", (inner,)),
                get(h + "mlp.c_proj.weight", (inner, d)), get(h + "mlp.c_proj.bias", (d,)), act,
            ),
            scale=scale,
            window=None,
        )

    return Model(source, config.num_layers, config.num_heads, config.context, None, tokenize, embed, layer,
                 hf_schedule(config))


def _llama(config: Config, tensors: TensorFiles, tokenize: Tokenize, source: str) -> Model:
    p = prefix_of(tensors, "embed_tokens.weight", f"{config.model_type} (LLaMA-family)")
    d = config.d_model
    q_width, kv_width = config.num_heads * config.head_dim, config.num_kv_heads * config.head_dim
    table = tensors.rows(p + "embed_tokens.weight", (None, d))  # (vocab, d), rows read as a text needs them
    act = ACTIVATIONS[config.activation]
    assert config.rope_base is not None
    granite = _granite(config)

    def optional(name: str, width: int) -> Array | None:
        return tensors.get(name, (width,)) if name in tensors else None

    gemma = config.model_type in GEMMA_TYPES
    qwen35 = config.model_type in ("qwen3_5_text", "qwen3_next")  # Qwen3-Next's full-attention layers are the same
    one = 1.0 if gemma or qwen35 else 0.0  # Gemma's and Qwen3.5's norms multiply by 1 + γ

    def embed(ids: list[int]) -> Array:
        rows = lookup(table, p + "embed_tokens.weight", ids)  # (n, d_model); positions enter through RoPE
        if gemma:
            return rows * hf_gemma.embed_scale(config)
        return rows * granite[0] if granite is not None else rows

    def rms(name: str) -> Norm:
        return Norm("rms", tensors.get(name + ".weight", (d,)) + one, None, config.eps)

    def projections(a: str) -> tuple[Array, Array, Array]:
        """W_Q, W_K, W_V in the x·W orientation: nn.Linear is (out, in); Phi-3 stacks the three in one."""
        get = tensors.get
        if config.model_type == "phi3":
            fused = get(a + "qkv_proj.weight", (q_width + 2 * kv_width, d)).T  # (d, q + k + v)
            return fused[:, :q_width], fused[:, q_width:q_width + kv_width], fused[:, q_width + kv_width:]
        if qwen35:  # q_proj holds each head's query and gate side by side
            return hf_qwen35.query_and_gate(config, tensors, a)[0], get(a + "k_proj.weight", (kv_width, d)).T, \
                get(a + "v_proj.weight", (kv_width, d)).T
        return get(a + "q_proj.weight", (q_width, d)).T, get(a + "k_proj.weight", (kv_width, d)).T, \
            get(a + "v_proj.weight", (kv_width, d)).T

    def mlp(h: str, i: int = 0) -> GatedMlp | MoeMlp | hf_qwen3next.SharedExpertMoe:
        get = tensors.get
        if config.model_type == "qwen3_next" and hf_qwen3next.is_sparse(config, i):
            return hf_qwen3next.read_moe(config, tensors, h + "mlp.", act)
        if config.model_type == "gpt_oss":
            return _moe(config, tensors, h + "mlp.")
        if config.model_type == "phi3":
            fused = get(h + "mlp.gate_up_proj.weight", (None, d))  # (2·intermediate, d): gate rows, then up rows
            inter = int(fused.shape[0]) // 2
            return GatedMlp(fused[:inter].T, fused[inter:].T, get(h + "mlp.down_proj.weight", (d, inter)).T, act)
        return read_swiglu(tensors, h + "mlp.", d, act)

    olmo2 = config.model_type == "olmo2"
    schedule = hf_schedule(config)

    def qk_norm(a: str) -> QkNorm | None:
        if olmo2:
            return QkNorm("all", tensors.get(a + "q_norm.weight", (q_width,)),
                          tensors.get(a + "k_norm.weight", (kv_width,)), config.eps)
        if config.model_type not in ("qwen3", "gemma3_text", "qwen3_5_text", "qwen3_next"):
            return None
        return QkNorm("head", tensors.get(a + "q_norm.weight", (config.head_dim,)) + one,
                      tensors.get(a + "k_norm.weight", (config.head_dim,)) + one, config.eps)

    def attention(a: str, W_Q: Array, W_K: Array, W_V: Array) -> Attention:
        return Attention(
            W_Q, W_K, W_V, tensors.get(a + "o_proj.weight", (d, q_width)).T,
            optional(a + "q_proj.bias", q_width), optional(a + "k_proj.bias", kv_width),
            optional(a + "v_proj.bias", kv_width), optional(a + "o_proj.bias", d),
            config.num_heads, config.num_kv_heads,
        )

    def gemma_layer(i: int, h: str, att: Attention, feed: Callable[[Array], Array], qkn: QkNorm | None,
                     norm: Callable[[str], Norm]) -> Layer:
        window = sliding_window(config, i)
        divisor, said = hf_gemma.scale(config)
        return Layer(
            norm=norm(h + "input_layernorm"), attention=att, mlp_norm=norm(h + "pre_feedforward_layernorm"),
            mlp=feed, scale=divisor, window=window, scale_from=said, softcap=hf_gemma.softcap(config), qk_norm=qkn,
            post_attention_norm=norm(h + "post_attention_layernorm"), post_mlp_norm=norm(h + "post_feedforward_layernorm"),
            rope=hf_gemma.layer_rope(config, i),
        )

    def layer(i: int) -> Layer:
        h = f"{p}layers.{i}."
        a = h + "self_attn."
        get = tensors.get
        if qwen35 and schedule[i] == "linear":  # Gated DeltaNet: one head per value head (hf_gated_deltanet.py)
            w = read_linear(config, tensors, h + "linear_attn.")
            return Layer(norm=rms(h + "input_layernorm"), attention=as_heads(w), mlp_norm=rms(h + "post_attention_layernorm"),
                         mlp=mlp(h, i), scale=None, window=None, rotary=False, deltanet=w)
        W_Q, W_K, W_V = projections(a)
        if gemma:
            return gemma_layer(i, h, attention(a, W_Q, W_K, W_V), mlp(h), qk_norm(a), rms)
        if qwen35:
            return Layer(norm=rms(h + "input_layernorm"), attention=attention(a, W_Q, W_K, W_V),
                         mlp_norm=rms(h + "post_attention_layernorm"), mlp=mlp(h, i), scale=None, window=None,
                         qk_norm=qk_norm(a), W_G=hf_qwen35.query_and_gate(config, tensors, a)[1])
        return Layer(
            norm=Norm("rms", get(h + ("post_attention_layernorm" if olmo2 else "input_layernorm") + ".weight", (d,)),
                      None, config.eps),
            attention=attention(a, W_Q, W_K, W_V),
            mlp_norm=Norm("rms", get(h + ("post_feedforward_layernorm" if olmo2 else "post_attention_layernorm")
                                     + ".weight", (d,)), None, config.eps),
            mlp=mlp(h),
            scale=1.0 / granite[1] if granite is not None else None,  # scores × attention_multiplier
            window=sliding_window(config, i),
            rotary=rotary(config, i),
            residual_scale=granite[2] if granite is not None else 1.0,
            qk_norm=qk_norm(a),
            norm_after=olmo2,
            sinks=get(a + "sinks", (config.num_heads,)) if config.model_type == "gpt_oss" else None,
        )

    rope = Rope("half", config.rope_base)
    if config.rope is not None and (config.rope.partial != 1.0 or config.rope.scaling is not None):
        rope = Rope("half", config.rope_base, config.rope.partial, config.rope.scaling_table())
    said = ""
    if granite is not None:
        said = (f"Granite scales its residual stream: the embeddings are multiplied by {_show(granite[0])} and every"
                f" attention and MLP output by {_show(granite[2])} before it is added back; the scores are multiplied"
                f" by attention_multiplier = {_show(granite[1])}, so the scale divides them by its inverse.")
    if gemma:
        said = hf_gemma.note(config)
    if qwen35:
        said = hf_qwen35.NOTE if config.model_type != "qwen3_next" else \
            hf_qwen35.NOTE.replace("Qwen3.5", "Qwen3-Next") + hf_qwen3next.NOTE
    if olmo2:
        said = ("OLMo 2 norms after each sub-layer: its attention reads the stream as it is (no norm before it, so"
                " no Norm stage here), and its output is RMS-normed (post_attention_layernorm) before it is added"
                " back; so is the MLP's. Its QK-norm runs over each token's whole query and key projections,"
                " every head's columns together.")
    return Model(source, config.num_layers, config.num_heads, config.context, rope, tokenize, embed, layer,
                 schedule, lambda layer: linear_note(config) if schedule[layer] == "linear" else said)


def _moe(config: Config, tensors: TensorFiles, m: str) -> MoeMlp:
    """gpt-oss's experts, as transformers stores them (already x·W); the router is an nn.Linear (out, in)."""
    get, d = tensors.get, config.d_model
    raw = config.raw
    experts = raw.get("num_local_experts")
    top_k = raw.get("num_experts_per_tok")
    for key, value in (("num_local_experts", experts), ("num_experts_per_tok", top_k)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ImporterError(f"config.json: {key} = {value!r}; expected a whole number >= 1")
    assert isinstance(experts, int) and isinstance(top_k, int)
    if top_k > experts:
        raise ImporterError(f"config.json: num_experts_per_tok = {top_k} is more than num_local_experts = {experts}")
    numbers = []
    for key, default in (("swiglu_alpha", 1.702), ("swiglu_limit", 7.0)):
        value = raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
            raise ImporterError(f"config.json: {key} = {value!r}; expected a number > 0")
        numbers.append(float(value))
    if m + "experts.gate_up_proj" not in tensors and m + "experts.gate_up_proj_blocks" in tensors:
        raise ImporterError(
            "gpt-oss's experts are MXFP4-quantised (experts.gate_up_proj_blocks); expected the dequantised"
            " checkpoint (transformers' save_pretrained after loading with Mxfp4Config(dequantize=True))"
        )
    gate_up = get(m + "experts.gate_up_proj", (experts, d, None))  # (experts, d_model, 2·inner)
    inner = int(gate_up.shape[2]) // 2
    return MoeMlp(
        get(m + "router.weight", (experts, d)).T, get(m + "router.bias", (experts,)), gate_up,
        get(m + "experts.gate_up_proj_bias", (experts, 2 * inner)), get(m + "experts.down_proj", (experts, inner, d)),
        get(m + "experts.down_proj_bias", (experts, d)), top_k, numbers[0], numbers[1],
    )


def _granite(config: Config) -> tuple[float, float, float] | None:
    """Granite's (embedding_multiplier, attention_multiplier, residual_multiplier); None for the others."""
    if config.model_type != "granite":
        return None
    raw = config.raw
    numbers = []
    for key, default in (("embedding_multiplier", 1.0), ("attention_multiplier", 1.0), ("residual_multiplier", 1.0)):
        value = raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
            raise ImporterError(f"config.json: {key} = {value!r}; expected a number > 0")
        numbers.append(float(value))
    return numbers[0], numbers[1], numbers[2]
