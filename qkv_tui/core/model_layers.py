"""Every layer of a model scenario, each as the scenario of all its heads (the heads view's [ and ]).

The scenario file's own [model] table is read again (the loaded Scenario keeps only what it expanded to),
so its source, text, title and description stay the file's; the layer changes and the heads become every
head. Each layer's input is computed once (importers/layer_walk.py), each layer's scenario once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from qkv_tui.core.engine import Computation, compute
from qkv_tui.core.scenario import Scenario, ScenarioError, resolve, scenario_from_data
from qkv_tui.core.tomlfile import ReadError, decode, parse_toml, read_bytes, stat_path


class ModelLayers:
    def __init__(self, doc: dict[str, Any], path: Path, scenario: Scenario) -> None:
        from qkv_tui.importers import ImporterError
        from qkv_tui.importers.layer_walk import LayerWalk  # the model loads only when the view walks it

        self.source, self.title = scenario.source, scenario.title
        try:
            self.walk = LayerWalk(doc, path.parent)
        except ImporterError as exc:
            raise ScenarioError(self.source, str(exc)) from None
        self.first = scenario.input.chosen_layer
        self._scenarios: dict[int, Scenario] = {}
        self._computations: dict[int, Computation] = {}

    @property
    def layers(self) -> int:
        return self.walk.layers

    def scenario(self, layer: int) -> Scenario:
        """Every head of ``layer``, validated like the file; raises ScenarioError."""
        from qkv_tui.importers import ImporterError

        if layer not in self._scenarios:
            try:
                data = self.walk.data(layer)
            except ImporterError as exc:
                raise ScenarioError(self.source, str(exc)) from None
            self._scenarios[layer] = scenario_from_data(data, self.source, default_title=self.title)
        return self._scenarios[layer]


    def computation(self, layer: int) -> Computation:
        """Every head of ``layer``, computed once; raises ScenarioError."""
        if layer not in self._computations:
            self._computations[layer] = compute(self.scenario(layer))
        return self._computations[layer]


# the walks of the files opened lately, so a layer opened from the heads view (a new computation, a new
# presenter) keeps the inputs already computed: (path, mtime, size) -> its walk
_OPENED: dict[tuple[str, int, int], ModelLayers] = {}
KEEP = 2


def model_layers(scenario: Scenario) -> ModelLayers | None:
    """The layers of the model a scenario's file names in its [model] table; None for any other scenario
    (hand-made numbers, a frozen export, or --model's options, which have no file to read again)."""
    path = resolve(scenario.source)
    status = stat_path(path)
    if status is None or not path.is_file():
        return None
    try:
        doc = parse_toml(decode(read_bytes(path, status)))
    except ReadError:
        return None
    if not isinstance(doc.get("model"), dict):
        return None
    key = (str(path.resolve()), status.st_mtime_ns, status.st_size)
    if key not in _OPENED:
        while len(_OPENED) >= KEEP:
            del _OPENED[next(iter(_OPENED))]
        _OPENED[key] = ModelLayers(doc, path, scenario)
    return _OPENED[key]
