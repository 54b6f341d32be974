"""Qwen3.5's config.json (model_type "qwen3_5" with a text_config, or "qwen3_5_text"), with transformers' defaults;
Qwen3-Next's ("qwen3_next") has the same ones.

Qwen3_5TextConfig fills in what a file may leave out, and the importer must read the same model:
partial_rotary_factor 0.25 (a quarter of each head's dimensions turn), and layer_types from
full_attention_interval (default 4: layers 3, 7, 11, … are full attention, the others linear; hf_config.layer_type).
"""

from __future__ import annotations

from typing import Any

from qkv_tui.importers.errors import ImporterError

LINEAR_TYPES = ("qwen3_5_text", "qwen3_next")  # the types whose layer_types may say "linear_attention"


def qwen35_text(name: str, data: dict[str, Any], model_type: str) -> dict[str, Any]:
    """The language model's config, with the defaults transformers gives it, as model_type "qwen3_5_text"."""
    if model_type == "qwen3_5":
        nested = data.get("text_config")
        if not isinstance(nested, dict):
            raise ImporterError(f"{name}: model_type 'qwen3_5' needs a text_config (its language model's config)")
        data = nested
    return with_defaults(dict(data) | {"model_type": "qwen3_5_text"})


def with_defaults(text: dict[str, Any]) -> dict[str, Any]:
    """Qwen3.5's and Qwen3-Next's shared default: a quarter of each head turns. Their layer types, every
    full_attention_interval-th layer full where layer_types is absent, are hf_config.layer_type's, computed
    one layer at a time (a list of every layer was built here before the weights bounded the count)."""
    params = text.get("rope_parameters")
    if isinstance(params, dict) and "partial_rotary_factor" not in params:
        text["rope_parameters"] = params | {"partial_rotary_factor": text.get("partial_rotary_factor", 0.25)}
    elif not isinstance(params, dict):
        text.setdefault("partial_rotary_factor", 0.25)
    return text
