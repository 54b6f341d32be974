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

# Qwen3.5's full-attention layers read the residual stream its linear-attention layers wrote before them (a
# gated delta rule with a causal convolution, which stack.py does not run), and gate their attention's output
LINEAR = ("the linear-attention layers (Gated DeltaNet, layer_types 'linear_attention') that run before each"
          " full-attention layer, and its gated attention output")


FEATURES: dict[str, list[Feature]] = {
    "qwen3_5": [(lambda d: True, LINEAR)],
}
PENDING_TYPES = tuple(FEATURES)


def pending_feature(model_type: str, data: dict[str, Any]) -> str:
    """The one-line reason ``model_type`` cannot be read yet (the first feature its config turns on)."""
    for turned_on, feature in FEATURES[model_type]:
        if turned_on(data):
            return f"model_type {model_type!r} needs {feature}, which qkv-tui does not compute yet"
    raise AssertionError("every pending type ends in a feature that is always on")
