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
