"""The default install carries everything a model source needs: ``pip install .`` then any built-in, or --model, works."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _project() -> dict:  # type: ignore[type-arg]
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]  # type: ignore[no-any-return]


def _name(requirement: str) -> str:
    """The distribution name of a requirement string, normalised as pip compares them."""
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def _third_party_imports(folder: Path) -> set[str]:
    found = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
            found |= {n.split(".")[0] for n in names}
    return {m for m in found if m not in sys.stdlib_module_names and m != "qkv_tui"}


def test_every_package_the_importers_import_is_an_ordinary_dependency() -> None:
    imported = {_name(m) for m in _third_party_imports(ROOT / "qkv_tui" / "importers")}  # huggingface_hub -> huggingface-hub
    assert {"glassllm", "tokenizers", "numpy", "gguf", "huggingface-hub"} <= imported  # the scan sees the lazy imports inside functions
    dependencies = {_name(r) for r in _project()["dependencies"]}
    assert imported <= dependencies, f"imported but only optional: {sorted(imported - dependencies)}"


def test_the_models_extra_is_only_a_compatible_alias() -> None:
    extras = _project()["optional-dependencies"]
    assert extras.get("models", []) == []  # pip install 'qkv-tui[models]' from older instructions still works
    assert not any(_name(r) == "qkv-tui" for r in extras["test"])
