"""The tiles view (t) counts every page out of the same total: its forward, the fused kernel's two pages and,
with [backward], the tiled backward are one walk, so "op k/N" never changes its N on the way."""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable
from typing import Any

import pytest

from qkv_tui import compute, load_scenario
from qkv_tui.core.engine import Computation
from qkv_tui.display import tiled_view
from qkv_tui.display.modes import Modes


class _Kept:
    """What the app's session gives a side view: the computation and a store of what was built for it."""

    def __init__(self, comp: Computation) -> None:
        self.comp = comp
        self._store: dict[Hashable, Any] = {}

    def kept(self, key: Hashable, build: Callable[[], Any]) -> Any:
        if key not in self._store:
            self._store[key] = build()
        return self._store[key]


@pytest.mark.parametrize("name", ["i_love_ai", "learn_to_look", "gqa"])
def test_every_page_of_the_tiles_view_counts_out_of_one_total(name: str) -> None:
    sources = _Kept(compute(load_scenario(name)))
    steps = tiled_view.VIEW.steps(sources, Modes(), 0)
    totals = set()
    for step in range(steps):
        label = tiled_view._frame(sources, Modes(), step, 0).explanation.stage_label
        found = re.match(r"op (\d+)/(\d+)", label)
        assert found is not None, label
        assert int(found.group(1)) == step + 1, label
        totals.add(int(found.group(2)))
    assert totals == {steps}
