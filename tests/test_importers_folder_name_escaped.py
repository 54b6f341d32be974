"""A model folder whose name holds a newline, a tab or an escape: the title and the description show it escaped.

``--model PATH`` makes the title from the path and the description's first sentence from the source; a
raw newline split the Markdown export's heading in two, and an escape made the loader refuse the
description the importer itself wrote ("description contains an escape character").
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .model_fixtures import build_llama


@pytest.mark.parametrize("name, shown", [("a\nb", "a\\nb"), ("tab\tc", "tab\\tc"), ("esc\x1b[31mred", "esc\\x1b[31mred"),
                                         ("bell\x07\r", "bell\\x07\\r")])
def test_the_title_and_description_show_control_characters_escaped(cli: Callable[..., Any], tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch, name: str, shown: str) -> None:
    build_llama(tmp_path / name)
    monkeypatch.chdir(tmp_path)
    check = cli("--model", name, "--text", "Alice was", "--check")
    assert check.code == 0 and check.err == "", check.err
    markdown = cli("--model", name, "--text", "Alice was", "--export", "markdown")
    assert markdown.code == 0, markdown.err
    lines = markdown.out.splitlines()
    assert lines[0] == f"# {shown} · layer 0"
    assert lines[1] == "" and lines[2].startswith(f"{shown}, layer 0, every head (0-based), on 'Alice was'")
    doc = json.loads(cli("--model", name, "--text", "Alice was", "--export", "json").out)
    assert doc["title"] == f"{shown} · layer 0"
