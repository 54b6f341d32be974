"""The package's layers import one way only: base <- kernels <- importers <- core <- teach <- display <- ui <- edges.

The kernels (the forward pass in NumPy, under a numeric policy) sit just above the base: the importers
run a real model's earlier layers with them, and the core, teach and edges layers compute with them.
The importers (real models -> plain scenario data) sit below the core: the loader calls them, they
never call the loader. The base (how a value is named in a one-line message) serves both.

Read from the source with ast, so the check covers lazy imports inside functions too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "qkv_tui"
RANK = {"base": 0, "kernels": 1, "importers": 2, "core": 3, "teach": 4, "display": 5, "ui": 6, "edges": 7}


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "qkv_tui" and parts[1] in RANK else None


def imports_of(path: Path) -> list[str]:
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import; use qkv_tui.<layer>.<module>"
            found.append(node.module or "")
        elif isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
    return found


LAYER_FILES = sorted(p for layer in RANK if (PACKAGE / layer).is_dir() for p in (PACKAGE / layer).rglob("*.py"))


@pytest.mark.parametrize("path", LAYER_FILES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_run_downward(path: Path) -> None:
    own = path.relative_to(PACKAGE).parts[0]
    for module in imports_of(path):
        if module == "qkv_tui":
            assert own == "edges", f"{path}: only the edges import the package root"
            continue
        target = layer_of(module)
        if target is None:
            continue
        assert RANK[target] <= RANK[own], f"{path.relative_to(PACKAGE)} ({own}) imports {module} ({target}): upward"


@pytest.mark.parametrize("layer", ["base", "kernels", "importers", "core", "teach", "display"])
def test_layers_below_the_ui_never_name_textual_or_rich(layer: str) -> None:
    for path in (PACKAGE / layer).rglob("*.py"):
        for module in imports_of(path):
            assert module.split(".")[0] not in ("textual", "rich"), f"{path}: imports {module}"


def test_the_check_can_fail(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from qkv_tui.ui.app import QKVApp\n")
    assert layer_of(imports_of(bad)[0]) == "ui"
    assert RANK["ui"] > RANK["core"]


def test_every_module_sits_in_a_layer() -> None:
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    # the package root holds only the public entry points
    assert loose == ["__init__.py", "__main__.py", "app.py", "cli.py"]
