"""What Gemma 2 and Gemma 3 (model_type "gemma2", "gemma3_text", and "gemma3" with a text_config) add to the LLaMA layout.

- every RMSNorm multiplies by (1 + γ), not γ: the checkpoint stores γ − 1, so the scenario's gains are 1 + the
  stored weight (the input, the sandwich and Gemma 3's q_norm/k_norm alike);
- the embeddings are multiplied by √d_model, as transformers does it: the float32 value of √hidden_size, cast
  to the dtype the model runs in (bfloat16 for the released checkpoints);
- sandwich norms: a norm before each sub-layer and another on its output before the residual add
  (post_attention_layernorm, pre_feedforward_layernorm, post_feedforward_layernorm);
- the scores are divided by √query_pre_attn_scalar, not √head_dim (scale, with scale_from saying so), and
  Gemma 2 soft-caps them (attn_logit_softcapping → softcap); final_logit_softcapping caps the vocabulary
  logits, not attention, and is not read;
- Gemma 3's sliding layers turn with their own base (rope_local_base_freq, or rope_parameters per layer type).
"""

from __future__ import annotations

import math

import numpy as np

from qkv_tui.base.values import show as _show
from qkv_tui.importers.errors import ImporterError
from qkv_tui.importers.hf_config import Config, layer_type
from qkv_tui.importers.hf_rope import read_rope
from qkv_tui.importers.stack import Rope

NAMES = {"gemma2": "Gemma 2", "gemma3_text": "Gemma 3"}


def embed_scale(config: Config) -> float:
    """√d_model as the model multiplies by it: float32, then the model's dtype where that is narrower."""
    return in_dtype(float(np.float32(math.sqrt(config.d_model))), config.raw.get("dtype", config.raw.get("torch_dtype")))


def in_dtype(value: float, dtype: object) -> float:
    """A float32 number as a model of ``dtype`` (config.json's "dtype") holds it: float16 and bfloat16 round it."""
    scale = np.float32(value)
    if dtype == "float16":
        return float(np.float16(scale))
    if dtype == "bfloat16":  # the top half of the float32, rounded to nearest even
        bits = int(np.array(scale, dtype=np.float32).view(np.uint32))
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return float(np.array(bits, dtype=np.uint32).view(np.float32))
    return float(scale)


def scale(config: Config) -> tuple[float, str]:
    """What the scores are divided by, and where it comes from (the scenario's scale_from)."""
    value = config.raw.get("query_pre_attn_scalar", 256)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise ImporterError(f"config.json: query_pre_attn_scalar = {value!r}; expected a number > 0")
    return math.sqrt(value), f"√query_pre_attn_scalar = √{_show(value)} ({NAMES[config.model_type]})"


def softcap(config: Config) -> float | None:
    value = config.raw.get("attn_logit_softcapping")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise ImporterError(f"config.json: attn_logit_softcapping = {value!r}; expected a number > 0")
    return float(value)


def layer_rope(config: Config, layer: int) -> Rope | None:
    """Gemma 3's RoPE for the layer, by its layer type (a sliding layer whose window is null still turns with
    the local base, as transformers' rotary_emb[layer_type] does); None (the model's one) for Gemma 2."""
    if config.model_type != "gemma3_text":
        return None
    read = read_rope("config.json", config.raw, config.model_type, layer_type(config, layer))
    return Rope("half", read.base, read.partial, read.scaling_table())


def note(config: Config) -> str:
    return (f"{NAMES[config.model_type]}'s norms multiply by 1 + γ (the checkpoint stores γ − 1; [norm] gamma here is"
            " 1 + the stored weight), and each sub-layer's output is normed again before it is added back. X is the"
            f" residual stream, whose embeddings were multiplied by √d_model = √{config.d_model}"
            f" = {embed_scale(config):.7g} (in the model's dtype).")
