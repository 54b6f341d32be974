"""A local Hugging Face model folder (config.json, *.safetensors, tokenizer.json), read without PyTorch.

Two layouts:
- "gpt2": LayerNorm, learned position embeddings added to the token embeddings, one fused
  ``c_attn`` (Q, K, V side by side) with biases. GPT-2's Conv1D stores weights as (in, out), which
  is already the x·W orientation. Keys may carry a ``transformer.`` prefix; ``attn.bias`` and
  ``attn.masked_bias`` are the causal-mask buffers, not biases, and are never read.
- "llama" and its kin "mistral" and "qwen2": RMSNorm, RoPE in the "half" layout (Hugging Face's
  rotate_half), separate ``q_proj``/``k_proj``/``v_proj``/``o_proj`` stored as nn.Linear (out, in)
  and transposed here, optional Q/K/V biases (Qwen2), grouped K/V heads, SwiGLU MLP.
"""

from __future__ import annotations

from pathlib import Path

from qkv_tui.base.values import token_label
from qkv_tui.importers.errors import ImporterError, missing_package
from qkv_tui.importers.hf_config import Config, read_config, sliding_window
from qkv_tui.importers.safetensors_raw import TensorFiles
from qkv_tui.importers.stack import (
    ACTIVATIONS,
    Array,
    Attention,
    DenseMlp,
    GatedMlp,
    Layer,
    Model,
    Norm,
    Rope,
    Tokenize,
)


def open_folder(folder: Path, shown: str) -> Model:
    """``shown`` is the source as the user wrote it, for messages."""
    if not folder.exists():
        raise ImporterError(
            f"model.source {shown!r}: no such folder ({folder}); expected a Hugging Face folder or glassllm:en / glassllm:pt"
        )
    if not folder.is_dir():
        raise ImporterError(
            f"model.source {shown!r} is a file; expected a folder holding config.json, *.safetensors and tokenizer.json"
        )
    for needed in ("config.json", "tokenizer.json"):
        if not (folder / needed).is_file():
            raise ImporterError(f"model.source {shown!r} has no {needed}; expected config.json, *.safetensors and tokenizer.json")
    weights = sorted(folder.glob("*.safetensors"))
    if not weights:
        raise ImporterError(
            f"model.source {shown!r} has no *.safetensors weights; expected model.safetensors (pytorch_model.bin is not read)"
        )
    config = read_config(folder / "config.json")
    if config.activation not in ACTIVATIONS:
        key = "activation_function" if config.model_type == "gpt2" else "hidden_act"
        raise ImporterError(
            f"config.json: {key} {config.activation!r} is not supported; expected one of: {', '.join(ACTIVATIONS)}"
        )
    tokenize = _tokenizer(folder / "tokenizer.json")
    tensors = TensorFiles(weights)
    if config.model_type == "gpt2":
        return _gpt2(config, tensors, tokenize, shown)
    return _llama(config, tensors, tokenize, shown)


def _tokenizer(path: Path) -> Tokenize:
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise ImporterError(missing_package("tokenizers", f"reading {path.name}")) from None
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # the Rust side raises plain Exception for every malformed file
        raise ImporterError(f"{path}: not a tokenizer the tokenizers library reads ({str(exc).splitlines()[0]})") from None

    def tokenize(text: str) -> tuple[list[str], list[int]]:
        encoding = tokenizer.encode(text)  # special tokens the post-processor adds (LLaMA's <s>) included
        return [token_label(t) for t in encoding.tokens], [int(i) for i in encoding.ids]

    return tokenize


def _prefix(tensors: TensorFiles, suffix: str, what: str) -> str:
    """The key prefix in front of ``suffix`` ("transformer.", "model.", or none)."""
    for name in tensors.names():
        if name == suffix or name.endswith("." + suffix):
            return name[: len(name) - len(suffix)]
    raise ImporterError(f"the checkpoint has no {suffix!r} tensor; expected a {what} checkpoint's key names")


def _gpt2(config: Config, tensors: TensorFiles, tokenize: Tokenize, shown: str) -> Model:
    p = _prefix(tensors, "wte.weight", "GPT-2")
    wte, wpe = tensors.get(p + "wte.weight"), tensors.get(p + "wpe.weight")
    d = config.d_model
    act = ACTIVATIONS[config.activation]
    raw = config.raw

    def embed(ids: list[int]) -> Array:
        return wte[ids] + wpe[: len(ids)]  # (n, d_model): token plus learned position

    def layer(i: int) -> Layer:
        h = f"{p}h.{i}."
        c_attn, c_attn_b = tensors.get(h + "attn.c_attn.weight"), tensors.get(h + "attn.c_attn.bias")  # (d, 3d), (3d,)
        scale: float | None = None
        if raw.get("scale_attn_weights", True) is False or raw.get("scale_attn_by_inverse_layer_idx", False):
            base = config.head_dim**0.5 if raw.get("scale_attn_weights", True) is not False else 1.0
            scale = base * (i + 1 if raw.get("scale_attn_by_inverse_layer_idx", False) else 1)
        return Layer(
            norm=Norm("layer", tensors.get(h + "ln_1.weight"), tensors.get(h + "ln_1.bias"), config.eps),
            attention=Attention(
                c_attn[:, :d], c_attn[:, d:2 * d], c_attn[:, 2 * d:], tensors.get(h + "attn.c_proj.weight"),
                c_attn_b[:d], c_attn_b[d:2 * d], c_attn_b[2 * d:], tensors.get(h + "attn.c_proj.bias"),
                config.num_heads, config.num_heads,
            ),
            mlp_norm=Norm("layer", tensors.get(h + "ln_2.weight"), tensors.get(h + "ln_2.bias"), config.eps),
            mlp=DenseMlp(
                tensors.get(h + "mlp.c_fc.weight"), tensors.get(h + "mlp.c_fc.bias"),
                tensors.get(h + "mlp.c_proj.weight"), tensors.get(h + "mlp.c_proj.bias"), act,
            ),
            scale=scale,
            window=None,
        )

    return Model(shown, config.num_layers, config.num_heads, config.context, None, tokenize, embed, layer)


def _llama(config: Config, tensors: TensorFiles, tokenize: Tokenize, shown: str) -> Model:
    p = _prefix(tensors, "embed_tokens.weight", f"{config.model_type} (LLaMA-family)")
    table = tensors.get(p + "embed_tokens.weight")
    act = ACTIVATIONS[config.activation]
    assert config.rope_base is not None

    def optional(name: str) -> Array | None:
        return tensors.get(name) if name in tensors else None

    def embed(ids: list[int]) -> Array:
        return table[ids]  # (n, d_model); positions enter through RoPE

    def layer(i: int) -> Layer:
        h = f"{p}layers.{i}."
        a = h + "self_attn."
        return Layer(
            norm=Norm("rms", tensors.get(h + "input_layernorm.weight"), None, config.eps),
            attention=Attention(
                tensors.get(a + "q_proj.weight").T, tensors.get(a + "k_proj.weight").T,  # nn.Linear is (out, in)
                tensors.get(a + "v_proj.weight").T, tensors.get(a + "o_proj.weight").T,
                optional(a + "q_proj.bias"), optional(a + "k_proj.bias"),
                optional(a + "v_proj.bias"), optional(a + "o_proj.bias"),
                config.num_heads, config.num_kv_heads,
            ),
            mlp_norm=Norm("rms", tensors.get(h + "post_attention_layernorm.weight"), None, config.eps),
            mlp=GatedMlp(
                tensors.get(h + "mlp.gate_proj.weight").T, tensors.get(h + "mlp.up_proj.weight").T,
                tensors.get(h + "mlp.down_proj.weight").T, act,
            ),
            scale=None,
            window=sliding_window(config, i),
        )

    rope = Rope("half", config.rope_base)
    return Model(shown, config.num_layers, config.num_heads, config.context, rope, tokenize, embed, layer)
