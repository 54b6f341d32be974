"""JSON nested 100,000 deep in a model's files is one error line, not a RecursionError from json.

Python's json follows each bracket with a recursive call, so a file of a few hundred kilobytes of
``[`` exhausts the interpreter's stack: an Ollama manifest and a safetensors header were read that
way; config.json already said so in one line (kept here). tokenizer.json is parsed by the
tokenizers library, whose Rust parser stops at 128 levels by itself; checked too.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .model_fixtures import build_llama, one_error

DEEP = 100_000


def test_an_ollama_manifest_nested_100000_deep(cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    root = tmp_path / "ollama"
    path = root.joinpath("manifests", "registry.ollama.ai", "library", "tiny", "deep")
    path.parent.mkdir(parents=True)
    path.write_text('{"layers": ' + "[" * DEEP + "]" * DEEP + "}")
    monkeypatch.setenv("OLLAMA_MODELS", str(root))
    one_error(cli, tmp_path, "ollama:tiny:deep", "the manifest deep is not Ollama's JSON (expected an object with a list"
              " of layers; it nests deeper than the parser follows)")


def test_a_safetensors_header_nested_100000_deep(cli: Callable[..., Any], tmp_path: Path) -> None:
    build_llama(tmp_path / "m")
    header = ('{"a": ' + "[" * DEEP + "]" * DEEP + "}").encode()
    (tmp_path / "m" / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    one_error(cli, tmp_path, str(tmp_path / "m"), "model.safetensors: not a safetensors file (its JSON header nests deeper")


@pytest.mark.parametrize("name", ["config.json", "tokenizer.json"])
def test_a_config_or_tokenizer_nested_100000_deep(cli: Callable[..., Any], tmp_path: Path, name: str) -> None:
    build_llama(tmp_path / "m")
    data = json.loads((tmp_path / "m" / name).read_text())
    text = json.dumps(data)[:-1] + ', "deep": ' + "[" * DEEP + "]" * DEEP + "}"
    (tmp_path / "m" / name).write_text(text)
    one_error(cli, tmp_path, str(tmp_path / "m"), f"{name}: not ")


def test_a_config_nested_100000_deep_says_so_as_the_others_do(cli: Callable[..., Any], tmp_path: Path) -> None:
    """Not Python's own "maximum recursion depth exceeded while decoding": the words the manifest and the
    safetensors header use."""
    build_llama(tmp_path / "m")
    text = (tmp_path / "m" / "config.json").read_text()[:-1] + ', "deep": ' + "[" * DEEP + "]" * DEEP + "}"
    (tmp_path / "m" / "config.json").write_text(text)
    one_error(cli, tmp_path, str(tmp_path / "m"), "config.json: not a model's config (its JSON nests deeper than the parser follows)")
