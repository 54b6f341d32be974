"""``--output`` (and ``--key separate``'s file beside it) that exists and is not a regular file: one error
line, exit 2, before anything is written. A FIFO with no reader would block the write for ever."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # a process of its own with a timeout: the old code blocks for ever opening the FIFO
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "qkv_tui", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_an_output_that_is_not_a_regular_file_is_one_error_line(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "sheet.md"
    if kind == "fifo":
        os.mkfifo(target)
        words = "a named pipe (FIFO)"
    else:
        target.mkdir()
        words = "a directory"
    run = _run("--export", "worksheet", "i_love_ai", "-o", str(target), cwd=tmp_path)
    assert (run.returncode, run.stdout) == (2, ""), run
    assert run.stderr == (f"error: {target}: --output is {words}, not a regular file; expected a new file or a"
                          " regular file to replace (leave out --output to write to standard output)\n")


def test_the_separate_key_beside_it_is_refused_too_and_nothing_is_written(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "sheet-key.md")
    run = _run("--export", "worksheet", "i_love_ai", "-o", "sheet.md", "--key", "separate", cwd=tmp_path)
    assert (run.returncode, run.stdout) == (2, ""), run
    assert run.stderr.startswith("error: sheet-key.md: --key separate's file is a named pipe (FIFO), not a regular file")
    assert run.stderr.count("\n") == 1
    assert not (tmp_path / "sheet.md").exists()


def test_a_regular_file_or_a_new_one_is_still_written(tmp_path: Path, cli) -> None:
    old = tmp_path / "old.md"
    old.write_text("before", encoding="utf-8")
    for target in (old, tmp_path / "new.md"):
        run = cli("--export", "worksheet", "i_love_ai", "-o", str(target))
        assert run.code == 0 and run.err == "", run
        assert target.read_text(encoding="utf-8").startswith("#")
