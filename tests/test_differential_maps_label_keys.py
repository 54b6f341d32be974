"""Differential attention's two maps (scores, scaled and p of each half) label their columns by the key tokens,
as the one-map stages do: the stage spec says which of its matrices have a column per key (key_columns)."""

from __future__ import annotations

from qkv_tui import compute, load_scenario
from qkv_tui.teach.trace import Trace


def test_each_maps_columns_are_the_keys() -> None:
    trace = Trace(compute(load_scenario("differential")))
    keys = list(trace.comp.scenario.key_labels)
    for name in ("scores_1", "scaled_1", "weights_1", "scores_2", "scaled_2", "weights_2", "weights"):
        assert [trace.col_label(name, j) for j in range(len(keys))] == keys, name
