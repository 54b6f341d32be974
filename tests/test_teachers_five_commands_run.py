"""docs/teachers.md's "A lecture and a worksheet in five commands", run as written: the notes and the
worksheet commands make their files, the lecture's and the server's lines parse as the app's, and the
server's address is said to be this computer's only (it binds 127.0.0.1: a student's laptop opening
http://127.0.0.1:8000/ reaches the laptop itself), with the ways a class really reaches it."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from qkv_tui.edges.cli import main

PAGE = Path(__file__).resolve().parent.parent / "docs" / "teachers.md"


def commands() -> list[list[str]]:
    text = PAGE.read_text(encoding="utf-8")
    section = text.split("## A lecture and a worksheet in five commands", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, flags=re.S)
    assert block is not None
    lines = [shlex.split(line, comments=True) for line in block.group(1).splitlines()]
    assert len(lines) == 5
    return lines


def test_the_notes_and_the_worksheet_are_made_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("typst")
    monkeypatch.chdir(tmp_path)
    install, notes, _lecture, sheet, _serve = commands()
    assert install[:2] == ["pip", "install"]
    assert notes[0] == "qkv-tui" and notes[-2] == ">"
    assert main(notes[1:-2]) == 0
    Path(notes[-1]).write_text(capsys.readouterr().out)
    assert "Softmax" in Path(notes[-1]).read_text()
    assert sheet[0] == "qkv-tui"
    assert main(sheet[1:]) == 0
    assert (tmp_path / "sheet.pdf").read_bytes().startswith(b"%PDF")
    assert (tmp_path / "sheet-key.pdf").read_bytes().startswith(b"%PDF")


def test_the_lecture_and_the_server_lines_are_the_apps(capsys: pytest.CaptureFixture[str]) -> None:
    _install, _notes, lecture, _sheet, serve = commands()
    scenario = next(word for word in lecture[1:] if not word.startswith("-") and word not in ("light", "dark"))
    assert main(["--check", scenario]) == 0
    assert serve[:2] == ["qkv-tui", "--serve"] and "--host" not in serve


def test_the_servers_address_is_said_to_be_this_computers_only() -> None:
    text = PAGE.read_text(encoding="utf-8")
    step = re.search(r"\n5\. (.*?)\n\n", text, flags=re.S)
    assert step is not None
    said = " ".join(step.group(1).split())
    assert "http://127.0.0.1:8000/" in said
    assert "only this computer" in said
    assert "deploy.md" in said and "--host" in said
