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

FEATURES: dict[str, list[Feature]] = {}  # none pending now: Qwen3.5's full-attention layers are read (hf_qwen35.py)
PENDING_TYPES = tuple(FEATURES)


def pending_feature(model_type: str, data: dict[str, Any]) -> str:
    """The one-line reason ``model_type`` cannot be read yet (the first feature its config turns on)."""
    for turned_on, feature in FEATURES[model_type]:
        if turned_on(data):
            return f"model_type {model_type!r} needs {feature}, which qkv-tui does not compute yet"
    raise AssertionError("every pending type ends in a feature that is always on")
