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
        "gguf", "huggingface_hub",
        # NumPy's annotations module, which NumPy itself does not load (the core's array types are spelled without it)
        "numpy.typing")

# A family's stages and kernels load with the first scenario that has it (teach/stages/__init__.py FAMILIES), and
# each side view's module the first time it is opened (display/side_views.py): I love AI uses none of them.
DEFERRED = ("qkv_tui.teach.stages.mla_compress", "qkv_tui.teach.stages.mla_expand", "qkv_tui.teach.stages.mla_rotate",
            "qkv_tui.teach.stages.mla_absorb", "qkv_tui.teach.stages.mla_parts", "qkv_tui.teach.stages.mla_grads",
            "qkv_tui.teach.stages.mla_sheet", "qkv_tui.teach.stages.linear", "qkv_tui.teach.stages.deltanet",
            "qkv_tui.teach.stages.deltanet_io", "qkv_tui.kernels.mla", "qkv_tui.kernels.mla_backward",
            "qkv_tui.kernels.mla_rope",
            "qkv_tui.kernels.linear", "qkv_tui.kernels.linear_backward", "qkv_tui.kernels.deltanet",
            "qkv_tui.kernels.deltanet_backward", "qkv_tui.kernels.deltanet_parts", "qkv_tui.edges.worksheet",
            "qkv_tui.edges.serve", "qkv_tui.display.decode_view", "qkv_tui.display.tiled_view",
            "qkv_tui.display.tiled_back_view", "qkv_tui.display.train_view", "qkv_tui.display.heads_view",
            "qkv_tui.display.heads_grid", "qkv_tui.display.state_view", "qkv_tui.display.mla_cache",
            "qkv_tui.teach.decode", "qkv_tui.teach.paged", "qkv_tui.teach.tiled", "qkv_tui.teach.tiled_backward",
            "qkv_tui.teach.train_walk", "qkv_tui.core.training", "qkv_tui.core.model_layers",
            "qkv_tui.core.gradients", "qkv_tui.core.cost", "qkv_tui.teach.cost", "qkv_tui.display.cost_view",
            # the quiz, editing, differential attention's kernel and the backward kernels: loaded when first used
            "qkv_tui.teach.quiz", "qkv_tui.core.cell_edit", "qkv_tui.core.variants.deltanet_edit",
            "qkv_tui.kernels.differential", "qkv_tui.kernels.attention_backward", "qkv_tui.kernels.norm_backward",
            "qkv_tui.kernels.cross_entropy", "qkv_tui.core.diagnose", "qkv_tui.edges.compare", "qkv_tui.edges.tensors",
            # Mamba-2's and the sparse indexer's kernels: loaded with the first [ssd] or [indexer] parsed or run
            "qkv_tui.kernels.ssd", "qkv_tui.kernels.indexer",
            # a value norm's kernel: loaded with the first [v_norm] run (tests/test_command_start_imports.py)
            "qkv_tui.kernels.v_norm",
            # the keys in the heads' own tables: a sink's, a soft-cap's and a gate's head-pass builders and kernels,
            # loaded with the first scenario whose heads have them (core/head_parts.py, teach/stages/loaded.py)
            "qkv_tui.core.sink_part", "qkv_tui.core.softcap_part", "qkv_tui.core.gate_part", "qkv_tui.kernels.sinks",
            "qkv_tui.kernels.softcap", "qkv_tui.kernels.gate",
            # the modules that read [differential], [indexer], [ssd], [mla], [linear]: registered from small modules of their own
            # (core/variants/*_table.py), loaded with the first file that has the table
            "qkv_tui.core.variants.differential", "qkv_tui.core.variants.indexer", "qkv_tui.core.variants.ssd",
            "qkv_tui.core.variants.mla", "qkv_tui.core.variants.linear",
            # Kimi's gates per key channel: read by [deltanet]'s parser where a table is written the KDA way
            "qkv_tui.core.variants.kda_gates")


def first_screen_modules(scenario: str, keys: tuple[str, ...] = ()) -> list[str]:
    """The modules loaded once the app has drawn its first screen of ``scenario`` (and pressed ``keys``)."""
    code = (
        "import sys, json\n"
        "from qkv_tui.app import QKVApp\n"
        "async def use(pilot):\n"
        "    await pilot.pause()\n"
        f"    for key in {keys!r}:\n"
        "        await pilot.press(key)\n"
        "        await pilot.pause()\n"
        "    pilot.app.exit()\n"
        f"QKVApp({scenario!r}).run(headless=True, size=(120, 40), auto_pilot=use)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    return json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def deferred_in(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == name or m.startswith(name + ".") for name in DEFERRED)]


def test_the_first_screen_of_i_love_ai_loads_no_family_or_view_it_does_not_use() -> None:
    """Start-up is measured against a bare Textual app that also imports NumPy (benchmarks/bench.py
    --startup-only): [mla]'s, [linear]'s and [deltanet]'s stages and kernels, the worksheet, serving and the
    side views imported at the top again would slow every start, and this says which."""
    assert deferred_in(first_screen_modules("i_love_ai")) == []


def test_the_deferred_modules_load_where_they_are_used() -> None:
    """The check above can fail: a scenario with the family loads its stages and kernels, and opening the
    side views loads theirs (the cache view of a [deltanet] scenario draws its state)."""
    loaded = set(deferred_in(first_screen_modules("mla")))
    assert {"qkv_tui.teach.stages.mla_compress", "qkv_tui.kernels.mla", "qkv_tui.core.variants.mla"} <= loaded
    assert "qkv_tui.teach.stages.linear" not in loaded and "qkv_tui.kernels.deltanet" not in loaded
    assert {"qkv_tui.teach.stages.linear", "qkv_tui.kernels.linear", "qkv_tui.core.variants.linear"} <= set(
        deferred_in(first_screen_modules("linear")))
    loaded = set(deferred_in(first_screen_modules("deltanet", ("k", "k", "t", "t", "v", "v"))))
    assert {"qkv_tui.teach.stages.deltanet", "qkv_tui.kernels.deltanet", "qkv_tui.display.decode_view",
            "qkv_tui.display.state_view", "qkv_tui.display.tiled_view", "qkv_tui.display.heads_view"} <= loaded
    loaded = set(deferred_in(first_screen_modules("gqa", ("c",))))
    assert {"qkv_tui.core.cost", "qkv_tui.teach.cost", "qkv_tui.display.cost_view"} <= loaded
    loaded = set(deferred_in(first_screen_modules("learn_to_look", ("l",))))
    assert {"qkv_tui.display.train_view", "qkv_tui.teach.train_walk", "qkv_tui.core.gradients",
            "qkv_tui.kernels.attention_backward", "qkv_tui.kernels.norm_backward"} <= loaded
    assert {"qkv_tui.kernels.differential", "qkv_tui.core.variants.differential"} <= set(
        deferred_in(first_screen_modules("differential")))
    assert {"qkv_tui.kernels.ssd", "qkv_tui.core.variants.ssd"} <= set(deferred_in(first_screen_modules("ssd")))
    assert {"qkv_tui.kernels.indexer", "qkv_tui.core.variants.indexer"} <= set(deferred_in(first_screen_modules("dsa")))
    assert "qkv_tui.teach.quiz" in deferred_in(first_screen_modules("i_love_ai", ("p", "right")))
    assert {"qkv_tui.core.sink_part", "qkv_tui.kernels.sinks"} <= set(deferred_in(first_screen_modules("sink")))
    assert {"qkv_tui.core.softcap_part", "qkv_tui.kernels.softcap"} <= set(deferred_in(first_screen_modules("softcap")))
    assert {"qkv_tui.core.gate_part", "qkv_tui.kernels.gate"} <= set(deferred_in(first_screen_modules("gated")))
    assert "qkv_tui.core.variants.kda_gates" in deferred_in(first_screen_modules("kda"))


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
