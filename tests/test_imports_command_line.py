"""What the command ``qkv-tui SCENARIO`` loads on the way to its first screen: its parser offers every option
(exports, the cost view's dtype, --tensors and --compare) without loading the modules behind them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from tests.test_imports import DEFERRED, LAZY

I_LOVE_AI = str(Path(__file__).resolve().parent.parent / "scenarios" / "i_love_ai.toml")

# behind an option: the cost counting (--dtype, --export cost), the comparison and the tensor reader
# (--tensors, --compare), the exporters, serving (the command takes a start --serve's app starter prepared only
# where the starter loaded edges/serve/prepared.py); with LAZY and DEFERRED less the command line's own modules
BEHIND_OPTIONS = ("qkv_tui.core.cost", "qkv_tui.teach.cost", "qkv_tui.core.diagnose", "qkv_tui.edges.compare",
                  "qkv_tui.edges.tensors", "qkv_tui.edges.export_json", "qkv_tui.edges.export_markdown",
                  "qkv_tui.edges.worksheet", "qkv_tui.edges.serve")
UNWANTED = (*BEHIND_OPTIONS, *(name for name in (*DEFERRED, *LAZY) if not name.startswith("qkv_tui.edges")))


def command_modules(*argv: str) -> list[str]:
    """The modules loaded once ``qkv-tui ARGV`` has drawn its first screen: the command line's own main, its
    app run headless (the test's standard streams are no terminal) and left at its first frame."""
    code = (
        "import sys, json\n"
        "from qkv_tui.edges import cli\n"
        "cli.terminal_problem = lambda: None\n"
        "from textual.app import App\n"
        "run = App.run\n"
        "async def leave(pilot):\n"
        "    await pilot.pause()\n"
        "    pilot.app.exit()\n"
        "App.run = lambda self, *a, **k: run(self, headless=True, size=(120, 40), auto_pilot=leave)\n"
        f"assert cli.main({list(argv)!r}) == 0\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def unwanted_in(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == name or m.startswith(name + ".") for name in UNWANTED)]


def test_the_commands_first_screen_loads_nothing_behind_an_option() -> None:
    """Start-up is measured as this command (benchmarks/bench.py --startup-only): a module behind an option,
    imported at the top of the command line again, would slow every start, and this says which."""
    modules = command_modules(I_LOVE_AI)
    assert "qkv_tui.ui.app" in modules, "the app was not run"
    assert unwanted_in(modules) == []


def test_the_modules_behind_the_options_load_when_given(tmp_path: Path) -> None:
    """The check above can fail: --dtype loads the cost counting, and --tensors the comparison and the reader."""
    assert {"qkv_tui.core.cost", "qkv_tui.teach.cost"} <= set(unwanted_in(command_modules(I_LOVE_AI, "--dtype", "fp16")))
    rng = np.random.default_rng(0)
    arrays = tmp_path / "mine.npz"
    np.savez(arrays, X=rng.standard_normal((3, 4)), W_Q=rng.standard_normal((4, 2)), W_K=rng.standard_normal((4, 2)),
             W_V=rng.standard_normal((4, 2)))
    loaded = set(unwanted_in(command_modules("--tensors", str(arrays), "--layout", "math")))
    assert {"qkv_tui.edges.compare", "qkv_tui.edges.tensors", "qkv_tui.core.diagnose"} <= loaded
