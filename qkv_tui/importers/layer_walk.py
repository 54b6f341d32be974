"""A model scenario's layers, walked one at a time (the heads view's [ and ]): the model opened once, and
each layer's input (the residual stream entering it) computed once, from the nearest layer below already
computed, never from the embeddings again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from qkv_tui.importers.expand import expand_model, open_source
from qkv_tui.importers.stack import Array, Model, residual_stream


class LayerWalk:
    def __init__(self, doc: dict[str, Any], base: Path | None) -> None:
        self.doc, self.base = doc, base
        table = doc["model"]
        self.model = open_source(str(table["source"]), base)
        self.inputs: dict[int, Array] = {}  # layer -> (n, d_model) the stream entering it
        self.blocks_run = 0  # whole blocks computed so far (tests/test_heads_view.py counts them)

    @property
    def layers(self) -> int:
        return self.model.num_layers

    def data(self, layer: int) -> dict[str, Any]:
        """The plain scenario data of every head of ``layer`` (the file's title, description and text)."""
        table = {key: value for key, value in self.doc["model"].items() if key != "heads"}
        doc = {**self.doc, "model": {**table, "layer": layer}}
        return expand_model(doc, self.base, opened=self.model, layer_input=self._input)

    def _input(self, model: Model, ids: list[int], layer: int) -> Array:
        if model.stream is not None:  # a model that walks its own stream (Gemma 3n) gives X for any layer
            return model.stream(ids, layer)
        if 0 not in self.inputs:
            self.inputs[0] = model.embed(ids)
        start = max(i for i in self.inputs if i <= layer)
        x = self.inputs[start]
        for i in range(start, layer):
            x = residual_stream(x, [model.layer(i)], model.rope)
            self.blocks_run += 1
            self.inputs[i + 1] = x
        return x
