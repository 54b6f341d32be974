"""The core never loads Textual or Rich: proved in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys


def test_core_imports_no_ui() -> None:
    code = (
        "import sys, json, pkgutil, importlib, qkv_tui\n"
        "core = [m.name for m in pkgutil.walk_packages(qkv_tui.__path__, 'qkv_tui.')"
        " if m.name.split('.')[1] in ('base', 'kernels', 'importers', 'core', 'teach', 'screen', 'edges')]\n"
        "assert len(core) >= 15, core\n"
        "for name in core: importlib.import_module(name)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == []


def test_app_module_does_load_textual() -> None:
    """The check above can fail: importing the app does pull Textual in."""
    code = "import sys, qkv_tui.ui.app; print('textual' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True"


# What the first screen does not show loads when first used: saving (tomlkit), the prompts and
# overlays, screenshots' SVG rewriting, the exports, serving and the model importers.
LAZY = ("tomlkit", "qkv_tui.ui.edit_prompt", "qkv_tui.ui.widgets.heatmap", "qkv_tui.ui.widgets.screens",
        "qkv_tui.ui.widgets.modal", "qkv_tui.ui.screenshot", "qkv_tui.display.heatmap", "qkv_tui.teach.whatif",
        "qkv_tui.edges", "qkv_tui.importers", "textual_serve", "aiohttp", "glassllm", "tokenizers", "safetensors",
        "gguf", "huggingface_hub")


def test_the_first_screen_loads_only_what_it_shows() -> None:
    """Start-up is measured against a bare Textual app (benchmarks/bench.py --startup-only): a module
    imported at the top again would slow every start, and this says which."""
    code = (
        "import sys, json\n"
        "from qkv_tui.app import QKVApp\n"
        "drawn = []\n"
        "async def leave(pilot):\n"
        "    await pilot.pause()\n"
        "    drawn.append(str(pilot.app.query_one('#focus-0').render_line(0).text))\n"
        "    pilot.app.exit()\n"
        "QKVApp('i_love_ai').run(headless=True, size=(120, 40), auto_pilot=leave)\n"
        "print(json.dumps({'drawn': drawn, 'modules': sorted(sys.modules)}))\n"
    )
    out = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert out["drawn"] and out["drawn"][0].strip(), "the first screen was not drawn"
    loaded = [m for m in out["modules"] if any(m == name or m.startswith(name + ".") for name in LAZY)]
    assert loaded == []


def test_the_lazy_modules_do_load_when_used() -> None:
    """The check above can fail: opening help, the map, the edit prompt and saving pull them in."""
    code = (
        "import sys\n"
        "from qkv_tui.app import QKVApp\n"
        "from qkv_tui.core.cell_edit import save_text\n"
        "async def use(pilot):\n"
        "    for key in ('question_mark', 'escape', 'm', 'escape', 'e', 'escape'):\n"
        "        await pilot.press(key)\n"
        "        await pilot.pause()\n"
        "    save_text('X = [[1]]\\n', pilot.app.scenario, [])\n"
        "    pilot.app.exit()\n"
        "QKVApp('i_love_ai').run(headless=True, size=(120, 40), auto_pilot=use)\n"
        "print(' '.join(m for m in ('tomlkit', 'qkv_tui.ui.edit_prompt', 'qkv_tui.ui.widgets.heatmap',"
        " 'qkv_tui.ui.widgets.screens') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["tomlkit", "qkv_tui.ui.edit_prompt", "qkv_tui.ui.widgets.heatmap", "qkv_tui.ui.widgets.screens"]
