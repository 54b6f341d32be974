"""One runner for the tables of (scenario text, expected one-line error) that every variant's tests keep."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .conftest import Run


def assert_one_error_line(cli: Callable[..., Run], write: Callable[[str | bytes], Path], text: str | bytes,
                          expected: str, *args: str) -> str:
    """Runs `--check` (or args) on text: exit code 2, nothing on stdout, one line on stderr naming the
    file and holding expected word for word, no traceback. Returns that line for further assertions."""
    path = write(text)
    run = cli(*(args or ("--check",)), str(path))
    assert run.code == 2, run.out
    assert run.out == ""
    assert "Traceback" not in run.err
    lines = run.err.splitlines()
    assert len(lines) == 1, run.err
    assert lines[0].startswith(f"error: {path}: ")
    assert expected in lines[0], lines[0]
    return lines[0]
