"""Counts a model's config gives that something walks one at a time (layers, heads), bounded by the weights.

A config.json or a GGUF file's metadata is a few numbers anyone can edit; the tensors are what the
model holds. The layer schedule is built layer by layer and the heads view lists every layer, and
"every head" is a list of each head: a layer count of 2^63 ran for ever (10^7 layers took 15.7 s
and 827 MB before anything said no), and a head count of 2^63 overflowed ``range``. So each count
is checked against the tensors before anything walks it, in one line naming the key, its value
and what the weights hold.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from qkv_tui.base.values import show as _show
from qkv_tui.importers.errors import ImporterError

# a layer's tensors sit under layers.N (LLaMA and kin, DeepSeek, Qwen3.5), h.N (GPT-2), layer.N (BERT)
# or blk.N (GGUF); an index of more than nine digits is no layer of a real model and is not counted
_LAYER = re.compile(r"(?:^|\.)(?:layers|layer|h|blk)\.(\d{1,9})\.")


def layers_held(names: Iterable[str]) -> int:
    """How many distinct layer indices the tensor names hold."""
    found = set()
    for name in names:
        match = _LAYER.search(name)
        if match:
            found.add(int(match.group(1)))
    return len(found)


def check_layers(where: str, key: str, value: int, names: Iterable[str]) -> None:
    held = layers_held(names)
    if value > held:
        raise ImporterError(f"{where}: {key} = {_show(value)}, but the weights hold {held} layer{'s' * (held != 1)};"
                            f" expected at most {held} (a missing shard, or a config of another model?)")


def check_heads(where: str, key: str, value: int, d_model: int, numbers: int) -> None:
    """Each head reads the whole d_model-wide stream through at least one column of weights of its own."""
    if d_model <= numbers < value * d_model:  # a d_model past the weights is named by the embedding's shape check
        raise ImporterError(f"{where}: {key} = {_show(value)} heads of width d_model = {d_model} need more weights than"
                            f" the whole checkpoint holds ({numbers:,} numbers); expected the model's own head count")
