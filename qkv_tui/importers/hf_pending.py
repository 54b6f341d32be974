"""The 2026 model types whose attention the scenario format cannot express yet: one line naming what is missing.

Each type lists the features its config can turn on, in the order they are checked; the first one
the config turns on is named. A type whose every layer needs a feature names it
whatever the config says. When a feature lands in the format, its type moves out
of here into hf_config.py and hf_folder.py (docs/scenario-format.md lists what the format computes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Feature = tuple[Callable[[dict[str, Any]], bool], str]

QK_NORM = "QK-norm (an RMSNorm of every query and key head, q_norm and k_norm)"
SOFTCAP = "soft-capping of the attention scores (attn_logit_softcapping)"


def _partial(data: dict[str, Any]) -> bool:
    factor = data.get("partial_rotary_factor")
    params = data.get("rope_parameters")
    if factor is None and isinstance(params, dict):
        factor = params.get("partial_rotary_factor")
    return factor is not None and factor != 1


def _text(data: dict[str, Any]) -> dict[str, Any]:
    nested = data.get("text_config")
    return nested if isinstance(nested, dict) else data


def _always(data: dict[str, Any]) -> bool:
    return True


FEATURES: dict[str, list[Feature]] = {
    "qwen3_5": [(_always, QK_NORM), (lambda d: _partial(_text(d)), "partial rotary (partial_rotary_factor)")],
}
PENDING_TYPES = tuple(FEATURES)


def pending_feature(model_type: str, data: dict[str, Any]) -> str:
    """The one-line reason ``model_type`` cannot be read yet (the first feature its config turns on)."""
    for turned_on, feature in FEATURES[model_type]:
        if turned_on(data):
            return f"model_type {model_type!r} needs {feature}, which the scenario format does not compute yet"
    raise AssertionError("every pending type ends in a feature that is always on")
