"""``--export toml``'s first line names the file it came from; a newline, an escape or any control character
in that name is escaped, so the comment stays one line and the export still reads back as the same scenario."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.edges.export_json import to_json
from qkv_tui.edges.export_toml import to_toml

SEED = (Path(__file__).resolve().parent.parent / "scenarios" / "i_love_ai.toml").read_text(encoding="utf-8")


def _numbers(text: str, source: str) -> object:
    return json.loads(to_json(compute(parse_scenario(text, source))))


def _assert_round_trips(exported: str, source: str) -> None:
    first, rest = exported.split("\n", 1)
    assert first.startswith("# Exported by qkv-tui --export toml from ")
    assert rest.startswith("title = ")  # the comment ended where the line did
    tomllib.loads(exported)  # a control character left in a comment is a TOML error
    assert _numbers(exported, "again.toml") == _numbers(SEED, source)


@settings(max_examples=60, deadline=None)
@given(st.text(min_size=1, max_size=40))
def test_any_source_name_keeps_the_first_line_one_comment(source: str) -> None:
    _assert_round_trips(to_toml(parse_scenario(SEED, source)), source)


@pytest.mark.parametrize("name", ["two\nlines.toml", "esc\x1b[31mred.toml", "tab\tcr\r.toml", "sep\u2028.toml",
                                  "del\x7f.toml"])
def test_a_file_named_with_control_characters_exports_one_comment_line(tmp_path: Path, cli, name: str) -> None:
    path = tmp_path / name
    path.write_text(SEED, encoding="utf-8")
    run = cli("--export", "toml", str(path))
    assert run.code == 0, run.err
    _assert_round_trips(run.out, str(path))
    assert run.out.count("\n") == to_toml(parse_scenario(SEED, "plain.toml")).count("\n")


@pytest.mark.skipif(os.name != "posix", reason="a name that is not UTF-8 needs a POSIX file system")
def test_a_file_name_that_is_not_utf8_exports_one_comment_line(tmp_path: Path, cli) -> None:
    path = Path(os.fsdecode(os.fsencode(str(tmp_path)) + b"/bad\xff\n.toml"))
    path.write_text(SEED, encoding="utf-8")
    run = cli("--export", "toml", str(path))
    assert run.code == 0, run.err
    _assert_round_trips(run.out, str(path))
