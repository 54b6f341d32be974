"""A Hugging Face config.json, read strictly: what each model_type means for the format.

Every feature the scenario format cannot express (longrope, a partial rotary factor outside Phi-3,
another model_type, a chunked attention layer) is an error naming it, never an approximation.
RoPE is read by hf_rope.py, in both config forms.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qkv_tui.base.values import show as _show
from qkv_tui.importers.errors import ImporterError
from qkv_tui.importers.files import read_limited
from qkv_tui.importers.hf_gemma3n_config import GEMMA3N_TYPES, text_config
from qkv_tui.importers.hf_kimi_linear_config import KIMI_TYPES, kimi_config
from qkv_tui.importers.hf_mamba2_config import CONTEXT as MAMBA2_CONTEXT
from qkv_tui.importers.hf_mamba2_config import MAMBA2_TYPES, mamba2_defaults
from qkv_tui.importers.hf_mimo_config import MIMO_TYPES, layer_kind, mimo_defaults, mimo_rope
from qkv_tui.importers.hf_nemotron_h_config import NEMOTRON_H_TYPES, nemotron_h_defaults
from qkv_tui.importers.hf_pending import PENDING_TYPES, pending_feature
from qkv_tui.importers.hf_qwen35_config import LINEAR_TYPES, qwen35_text, with_defaults
from qkv_tui.importers.hf_rope import RopeConfig, read_rope

GPT2_TYPES = ("gpt2",)
LLAMA_TYPES = ("llama", "mistral", "qwen2", "smollm3", "granite", "phi3", "qwen3", "olmo2", "gpt_oss", "gemma2", "gemma3_text",
               "qwen3_5_text", "qwen3_next", "diffllama")
GEMMA_TYPES = ("gemma2", "gemma3_text")
BERT_TYPES = ("bert",)
# latent attention: hf_deepseek.py; with DeepSeek Sparse Attention's indexer (V3.2, GLM-5): hf_deepseek_v32.py
DEEPSEEK_TYPES = ("deepseek_v2", "deepseek_v3", "deepseek_v32", "glm_moe_dsa")
ALL_TYPES = (GPT2_TYPES + LLAMA_TYPES + BERT_TYPES + DEEPSEEK_TYPES + MIMO_TYPES + GEMMA3N_TYPES  # hf_mimo.py, hf_gemma3n.py
             + MAMBA2_TYPES + NEMOTRON_H_TYPES + KIMI_TYPES)  # hf_mamba2_folder.py, hf_nemotron_h.py, hf_kimi_linear.py
CONFIG_LIMIT = 4 * 2**20  # real config.json files are a few kilobytes


@dataclass(frozen=True)
class Config:
    model_type: str
    d_model: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    context: int
    eps: float
    activation: str
    rope_base: float | None  # None for GPT-2 (learned positions)
    raw: dict[str, Any]
    rope: RopeConfig | None = None  # the base again, with partial rotary and scaling (hf_rope.py)


def read_config(path: Path) -> Config:
    raw = read_limited(path, "a config.json", CONFIG_LIMIT)  # refused by its size before a byte is read
    try:
        data = json.loads(raw.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ImporterError(f"{path.name}: not valid JSON ({str(exc)[:120]})") from None
    except RecursionError:  # brackets nested past the interpreter's stack; a real config is a few levels deep
        raise ImporterError(f"{path.name}: not a model's config (its JSON nests deeper than the parser follows)") from None
    except ValueError:  # json refuses an integer of more than 4,300 digits, as int() does
        raise ImporterError(f"{path.name}: holds an integer of more than 4,300 digits; expected a model's config") from None
    if not isinstance(data, dict):
        raise ImporterError(f"{path.name}: expected a JSON object")
    model_type = data.get("model_type")
    if isinstance(model_type, str) and model_type in PENDING_TYPES:
        raise ImporterError(f"{path.name}: {pending_feature(model_type, data)}")
    if model_type in GEMMA3N_TYPES:  # its own stream and layers: hf_gemma3n.py
        g = text_config(path.name, data, model_type)
        full = read_rope(path.name, g.raw, "gemma3_text", "full_attention")  # Gemma3nTextConfig reads RoPE as Gemma 3's
        return Config("gemma3n_text", g.d_model, g.num_layers, g.num_heads, g.num_kv_heads, g.head_dim, g.context, g.eps,
                      g.activation, full.base, g.raw, full)
    if model_type == "gemma3":  # the multimodal config: its language model's config is text_config
        nested = data.get("text_config")
        if not isinstance(nested, dict):
            raise ImporterError(f"{path.name}: model_type 'gemma3' needs a text_config (its language model's config)")
        data = nested | {"model_type": "gemma3_text"}
        model_type = "gemma3_text"
    if model_type in ("qwen3_5", "qwen3_5_text"):  # the multimodal config's language model is its text_config
        data, model_type = qwen35_text(path.name, data, model_type), "qwen3_5_text"
    if model_type == "qwen3_next":
        data = with_defaults(data)
    if model_type in MIMO_TYPES:
        data = mimo_defaults(path.name, data)
    if model_type in MAMBA2_TYPES:  # no attention heads, no RoPE: each layer an [ssd] mixer (hf_mamba2_folder.py)
        m = mamba2_defaults(path.name, data)
        return Config("mamba2", m["hidden_size"], _Reader(path.name, m).int("num_hidden_layers", 64), m["num_heads"],
                      m["num_heads"], m["head_dim"], MAMBA2_CONTEXT, _Reader(path.name, m).number("layer_norm_epsilon", 1e-5),
                      m["hidden_act"], None, m)
    if model_type in NEMOTRON_H_TYPES:  # Mamba-2, attention and MLP blocks, no RoPE (hf_nemotron_h.py)
        m = nemotron_h_defaults(path.name, data)
        return Config("nemotron_h", m["hidden_size"], len(m["layers_block_type"]), m["num_attention_heads"],
                      m["num_key_value_heads"], m["head_dim"], _Reader(path.name, m).int("max_position_embeddings", 4096),
                      m["layer_norm_epsilon"], m["mamba_hidden_act"], None, m)
    if model_type in KIMI_TYPES:  # KDA and latent-attention layers, no RoPE (hf_kimi_linear.py)
        return Config("kimi_linear", *kimi_config(path.name, data))
    if model_type not in ALL_TYPES:
        raise ImporterError(
            f"{path.name}: model_type {_show(model_type)} is not supported; expected one of: {', '.join(ALL_TYPES)}"
        )
    get = _Reader(path.name, data)
    if model_type == "gpt2":
        d_model, heads = get.int("n_embd", 768), get.int("n_head", 12)
        if d_model % heads:
            raise ImporterError(f"{path.name}: n_embd = {d_model} is not a multiple of n_head = {heads}")
        return Config(
            model_type, d_model, get.int("n_layer", 12), heads, heads, d_model // heads,
            get.int("n_positions", get.int("n_ctx", 1024)), get.number("layer_norm_epsilon", 1e-5),
            get.string("activation_function", "gelu_new"), None, data,
        )
    if model_type == "bert":
        return _bert(path.name, data)
    d_model, heads = get.int("hidden_size", 4096), get.int("num_attention_heads", 32)
    kv_heads = get.int("num_key_value_heads", heads)
    if heads % kv_heads:
        raise ImporterError(f"{path.name}: num_key_value_heads = {kv_heads} does not divide num_attention_heads = {heads}")
    head_dim = get.int("head_dim", d_model // heads)
    if head_dim % 2:
        raise ImporterError(f"{path.name}: head_dim = {head_dim} is odd; RoPE needs an even head_dim")
    if model_type in GEMMA_TYPES and data.get("use_bidirectional_attention"):  # EmbeddingGemma's encoder form
        raise ImporterError(f"{path.name}: use_bidirectional_attention = true is not supported; expected Gemma's causal"
                            " decoder (the window and the mask change with it)")
    if data.get("mlp_bias"):
        raise ImporterError(f"{path.name}: mlp_bias = true is not supported (LLaMA-family MLPs without biases only)")
    # Gemma 3's layer types turn with different bases: each layer reads its own (hf_folder.py); this is the full one's
    if model_type in MIMO_TYPES:  # each layer type turns its own way (hf_mimo.py); this is layer 0's
        rope = mimo_rope(path.name, data, layer_kind(data, 0), head_dim)
    else:
        rope = read_rope(path.name, data, model_type, "full_attention" if model_type == "gemma3_text" else None)
    act = get.string("hidden_activation", "gelu_pytorch_tanh") if model_type in GEMMA_TYPES else get.string("hidden_act", "silu")
    return Config(
        model_type, d_model, get.int("num_hidden_layers", 32), heads, kv_heads, head_dim,
        get.int("max_position_embeddings", 2048), get.number("rms_norm_eps", 1e-5 if model_type == "glm_moe_dsa" else 1e-6),
        act, rope.base, data, rope,
    )


def _bert(name: str, data: dict[str, Any]) -> Config:
    get = _Reader(name, data)
    kind = data.get("position_embedding_type", "absolute")
    if kind != "absolute":
        raise ImporterError(f"{name}: position_embedding_type {kind!r} is not supported; expected 'absolute' (learned positions)")
    if data.get("is_decoder"):
        raise ImporterError(f"{name}: is_decoder = true is not supported; BERT is read as the bidirectional encoder")
    d_model, heads = get.int("hidden_size", 768), get.int("num_attention_heads", 12)
    if d_model % heads:
        raise ImporterError(f"{name}: hidden_size = {d_model} is not a multiple of num_attention_heads = {heads}")
    return Config(
        "bert", d_model, get.int("num_hidden_layers", 12), heads, heads, d_model // heads,
        get.int("max_position_embeddings", 512), get.number("layer_norm_eps", 1e-12),
        get.string("hidden_act", "gelu"), None, data,
    )


# What each family's transformers config class (configuration_*.py, transformers 5.24) fills in when a
# config.json leaves the key out: the window of its sliding layers ...
_DEFAULT_WINDOW = {"mistral": 4096, "qwen2": 4096, "qwen3": 4096, "gemma2": 4096, "gemma3_text": 4096, "gpt_oss": 128}
# ... and which families read layer_types at all (Llama, Mistral, Phi-3, Granite, OLMo 2 ignore the key:
# Mistral and Phi-3 slide on every layer when sliding_window is set, the others never)
_TYPED = ("qwen2", "qwen3", "smollm3", "gpt_oss", "gemma2", "gemma3_text", *LINEAR_TYPES)
_NEVER_SLIDE = ("gpt2", "bert", "llama", "granite", "olmo2", "diffllama", *DEEPSEEK_TYPES)
_KINDS = ("full_attention", "sliding_attention")


def layer_type(config: Config, layer: int) -> str:
    """The layer's attention as transformers' config gives it: "full_attention", "sliding_attention" or
    "linear_attention" (Qwen3.5, Qwen3-Next), from layer_types or, where the file has none, the default
    its config class computes."""
    data, family = config.raw, config.model_type
    if family in MIMO_TYPES:
        return layer_kind(data, layer)
    if family not in _TYPED:
        return "sliding_attention" if family not in _NEVER_SLIDE and _configured_window(config) is not None \
            else "full_attention"
    types = data.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != config.num_layers:
            raise ImporterError(f"config.json: layer_types must list one type per layer ({config.num_layers})")
        kind = types[layer]
        allowed = ("full_attention", "linear_attention") if family in LINEAR_TYPES else _KINDS
        if kind not in allowed:
            raise ImporterError(f"config.json: layer_types[{layer}] = {_show(kind)} is not supported; expected"
                                f" {' or '.join(allowed)}")
        return str(kind)
    get = _Reader("config.json", data)
    if family in ("qwen2", "qwen3"):  # sliding from layer max_window_layers on, and only with use_sliding_window
        slides = _configured_window(config) is not None and layer >= get.int("max_window_layers", 28)
        return "sliding_attention" if slides else "full_attention"
    if family == "smollm3":  # the NoPE layers slide, with use_sliding_window and a window
        slides = _configured_window(config) is not None and not rotary(config, layer)
        return "sliding_attention" if slides else "full_attention"
    if family in LINEAR_TYPES:  # every full_attention_interval-th layer is full, the others Gated DeltaNet
        return "linear_attention" if (layer + 1) % get.int("full_attention_interval", 4) else "full_attention"
    # Gemma 2 and gpt-oss alternate, sliding first; Gemma 3 keeps every sliding_window_pattern-th layer full
    pattern = get.int("sliding_window_pattern", 6) if family == "gemma3_text" else 2
    return "sliding_attention" if (layer + 1) % pattern else "full_attention"


def sliding_window(config: Config, layer: int) -> int | None:
    """The window of the layer's causal sliding-window attention, or None for plain causal attention."""
    if config.model_type in _NEVER_SLIDE or layer_type(config, layer) != "sliding_attention":
        return None
    window = _configured_window(config)  # a sliding layer of a config whose sliding_window is null is full, as there
    return None if window is None else _window(window)


def _configured_window(config: Config) -> object:
    """sliding_window as the config class holds it: the file's value (null included), else the class's default;
    Qwen2, Qwen3 and SmolLM3 drop it unless use_sliding_window is true."""
    data, family = config.raw, config.model_type
    if family in ("qwen2", "qwen3", "smollm3") and not data.get("use_sliding_window", False):
        return None
    return data["sliding_window"] if "sliding_window" in data else _DEFAULT_WINDOW.get(family)


def rotary(config: Config, layer: int) -> bool:
    """Whether the layer applies RoPE: SmolLM3 leaves it out of every no_rope_layer_interval-th layer (NoPE)."""
    if config.rope_base is None:
        return False
    if config.model_type != "smollm3":
        return True
    flags = config.raw.get("no_rope_layers")
    if flags is None:  # transformers' own default: NoPE at layers interval − 1, 2·interval − 1, …
        interval = _Reader("config.json", config.raw).int("no_rope_layer_interval", 4)
        return (layer + 1) % interval != 0
    if not isinstance(flags, list) or len(flags) != config.num_layers or any(f not in (0, 1) for f in flags):
        raise ImporterError(
            f"config.json: no_rope_layers must list 1 (RoPE) or 0 (no RoPE) for each of the {config.num_layers} layers"
        )
    return bool(flags[layer])


def _window(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ImporterError(f"config.json: sliding_window = {value!r}; expected a whole number >= 1")
    return value


class _Reader:
    def __init__(self, name: str, data: dict[str, Any]) -> None:
        self.name, self.data = name, data

    def int(self, key: str, default: int) -> int:
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ImporterError(f"{self.name}: {key} = {value!r}; expected a whole number >= 1")
        return value

    def number(self, key: str, default: float) -> float:
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ImporterError(f"{self.name}: {key} = {value!r}; expected a number > 0")
        return float(value)

    def string(self, key: str, default: str) -> str:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            raise ImporterError(f"{self.name}: {key} = {value!r}; expected a string")
        return value
