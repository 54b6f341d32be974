"""What ``qkv-tui SCENARIO`` loads on its way to the first frame, typed at a terminal (the command line's own
main, its parser and its options' modules), beside what a part of the first screen loads only where it is used.

Start-up is measured as that command against a bare Textual app (benchmarks/bench.py --startup-only): a module
imported at the top again would slow every start, and these say which."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# the TOML export and every part's faces (the command line wrote a --model table's strings through the export),
# numpy.typing (a module NumPy itself does not load, imported for annotations), a value norm's kernel (only a
# scenario with [v_norm] makes its record)
NOT_AT_START = ("qkv_tui.edges.export_toml", "qkv_tui.edges.faces", "numpy.typing", "qkv_tui.kernels.v_norm")


def command_modules(scenario: str) -> list[str]:
    """The modules loaded once ``qkv-tui SCENARIO`` has drawn its first frame (headless, 120×40), then quit."""
    code = (
        "import sys, json\n"
        "from qkv_tui.edges import cli\n"
        "from textual.app import App\n"
        "cli.terminal_problem = lambda: None\n"
        "run = App.run\n"
        "async def leave(pilot):\n"
        "    await pilot.pause()\n"
        "    pilot.app.exit()\n"
        "App.run = lambda self, *a, **k: run(self, headless=True, size=(120, 40), auto_pilot=leave)\n"
        f"assert cli.main([{scenario!r}]) == 0\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return list(json.loads(out.strip().splitlines()[-1]))


def test_the_command_loads_no_export_nor_annotations_module_for_i_love_ai() -> None:
    loaded = command_modules(str(ROOT / "scenarios" / "i_love_ai.toml"))
    assert "qkv_tui.ui.app" in loaded, "the app was not started"
    assert [m for m in NOT_AT_START if m in loaded] == []


def test_a_value_norm_loads_its_kernel(tmp_path: Path) -> None:
    """The check above can fail: a scenario with [v_norm] loads the kernel, whose record the V pane's title reads
    (tests/test_v_norm.py reads the title)."""
    path = tmp_path / "vn.toml"
    path.write_text('tokens = ["I", "love", "AI"]\nX = [[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]]\n'
                    "[attention]\nnum_heads = 2\nnum_kv_heads = 1\n"
                    "W_Q = [[1, 0, 1, 0], [0, 1, 0, 1], [1, 0, 0, 1], [0, 1, 1, 0]]\n"
                    "W_K = [[0, 0], [1, 1], [0, 1], [1, 0]]\nW_V = [[1, 2], [0, 1], [3, 0], [1, 1]]\n"
                    "[v_norm]\neps = 0.5\n")
    assert "qkv_tui.kernels.v_norm" in command_modules(str(path))
