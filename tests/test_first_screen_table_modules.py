"""The modules that read [alibi], [backward], [deltanet] and [shared_kv] load with the first file that has the table:
each is registered from a small module of its own (core/variants/*_table.py), and I love AI's first screen, through
the command as typed, loads none of them (start-up is measured as that command: benchmarks/bench.py --startup-only)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.test_imports_command_line import command_modules

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"

# each table's own modules (what parses it, what it is), by the built-in scenario that has the table
READERS = {
    "alibi": ("qkv_tui.core.variants.alibi",),
    "learn_to_look": ("qkv_tui.core.variants.backward",),
    "deltanet": ("qkv_tui.core.variants.deltanet", "qkv_tui.core.variants.deltanet_io"),
    "shared_kv": ("qkv_tui.core.variants.shared_kv",),
}
ALL_READERS = tuple(m for modules in READERS.values() for m in modules)


def loaded_by_reading(scenario: str) -> list[str]:
    """The table readers loaded once the file is read and computed, without the app."""
    code = (
        "import sys, json\n"
        "from qkv_tui import compute, load_scenario\n"
        f"compute(load_scenario({str(SCENARIOS / (scenario + '.toml'))!r}))\n"
        f"print(json.dumps([m for m in {ALL_READERS!r} if m in sys.modules]))\n"
    )
    return json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def test_i_love_ais_first_screen_loads_no_table_reader() -> None:
    modules = command_modules(str(SCENARIOS / "i_love_ai.toml"))
    assert "qkv_tui.ui.app" in modules, "the app was not run"
    assert [m for m in ALL_READERS if m in modules] == []
    # the small modules that register the tables do load: the registry is whole
    assert {"qkv_tui.core.variants.alibi_table", "qkv_tui.core.variants.backward_table",
            "qkv_tui.core.variants.deltanet_table", "qkv_tui.core.variants.shared_kv_table"} <= set(modules)


def test_a_file_with_the_table_loads_its_reader() -> None:
    """The check above can fail: each table's file loads its reader (a [backward] file's gradients load others too)."""
    for scenario, modules in READERS.items():
        assert set(modules) <= set(loaded_by_reading(scenario)), scenario
