"""Generated [mla], [linear] and [deltanet] scenarios in the app (Pilot): opened, stepped through every stage,
a storm of the keys that switch views and modes, and resized to 40×12 and 200×60; nothing may raise."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from qkv_tui.core.scenario import ScenarioError, parse_scenario
from qkv_tui.ui.app import QKVApp

from .strategies_latent_state import deltanet_scenarios, linear_scenarios, mla_scenarios

TABLES = {"mla": mla_scenarios, "linear": linear_scenarios, "deltanet": deltanet_scenarios}
# the keys a learner presses in this app (ui/app.py's bindings), each more than once on the way
STORM = ["right", "right", "e", "escape", "h", "v", "escape", "l", "t", "right", "escape", "k", "right", "right",
         "escape", "c", "f", "w", "p", "a", "n", "m", "space", "end", "left", "home", "tab", "shift+tab", "g",
         "escape", "u", "plus", "minus", "equals_sign", "right_square_bracket", "left_square_bracket", "pagedown",
         "pageup", "question_mark", "escape", "e", "down", "down", "escape", "h", "h", "k", "v", "v", "l", "l", "escape"]


async def _storm(path: Path) -> None:
    app = QKVApp(str(path))
    async with app.run_test(size=(120, 40)) as pilot:
        for digit in "123456789":  # every stage the scenario has
            await pilot.press(digit, "right", "right")
        for key in STORM:
            await pilot.press(key)
        for size in ((40, 12), (200, 60), (80, 24)):
            await pilot.resize_terminal(*size)
            await pilot.pause()
            await pilot.press("right", "k", "right", "escape", "t", "right", "escape")
        assert app.return_code is None or app.return_code == 0


@pytest.mark.parametrize("table", sorted(TABLES))
def test_generated_scenarios_survive_the_app(table: str) -> None:
    survives_the_app(TABLES[table]())


def survives_the_app(scenarios: Any) -> None:
    """One draw of ``scenarios`` (TOML text) that loads, through the key storm; one that is refused is not for here."""
    @settings(max_examples=1, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(scenarios)
    def check(text: str) -> None:
        try:
            parse_scenario(text, "app.toml")
        except ScenarioError:
            return
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "fuzzed.toml"
            path.write_text(text, encoding="utf-8")
            asyncio.run(_storm(path))

    check()
