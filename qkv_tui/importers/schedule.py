"""A model's layer schedule: what attention each layer runs, spelt as ``[input] schedule`` entries.

The spelling is the scenario format's (core/layer_schedule.py parses and shows it):
"full", "sliding 4096", "full no-rope", "sliding 4096 no-rope", "linear", "sliding 512 kv-from 18".
"""

from __future__ import annotations

from qkv_tui.importers.hf_config import Config, rotary, sliding_window
from qkv_tui.importers.hf_qwen35 import schedule as qwen35_schedule
from qkv_tui.importers.hf_qwen35_config import LINEAR_TYPES


def entry(window: int | None, rope: bool, kv_from: int | None = None) -> str:
    """One layer: full or sliding attention, "no-rope" where the model rotates other layers but not this one, and
    "kv-from L" where it reuses layer L's K and V (Gemma 3n)."""
    kind = "full" if window is None else f"sliding {window}"
    kind = kind if rope else f"{kind} no-rope"
    return kind if kv_from is None else f"{kind} kv-from {kv_from}"


def hf_schedule(config: Config) -> tuple[str, ...]:
    has_rope = config.rope_base is not None
    if config.model_type in LINEAR_TYPES:  # Qwen3.5: its linear-attention (Gated DeltaNet) layers are "linear"
        return qwen35_schedule(config)
    return tuple(entry(sliding_window(config, i), rotary(config, i) or not has_rope) for i in range(config.num_layers))
