"""``--export worksheet -o FIFO`` is refused in one line and never waits for a reader: the worksheet's own writer
(edges/worksheet/export.py) stats its targets and opens them non-blocking, whatever the command line checked
before it. The write runs in a thread, so a regression fails here by its timeout instead of hanging the suite."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import load_scenario
from qkv_tui.edges.worksheet.export import OutputError, key_path, write
from qkv_tui.edges.worksheet.make import build

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
TIMEOUT = 20.0  # seconds: the write takes well under one; a blocked open never returns


def write_in_time(fifo: Path | None, *args: object) -> BaseException | None:
    """What write raised (None when it returned), failing the test if it has not returned in TIMEOUT."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            write(*args)  # type: ignore[arg-type]
            outcome.append(None)
        except BaseException as exc:  # handed to the test thread
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(TIMEOUT)
    if worker.is_alive():
        # unblock the open (a reader on the FIFO), so the daemon thread does not outlive the test
        if fifo is not None:
            reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
            worker.join(TIMEOUT)
            os.close(reader)
        pytest.fail(f"write blocked for {TIMEOUT} s on a named pipe")
    return outcome[0]


@pytest.mark.parametrize("fmt", ["markdown", "html"])
def test_a_fifo_output_is_refused_without_waiting(tmp_path: Path, fmt: str) -> None:
    fifo = tmp_path / "sheet.out"
    os.mkfifo(fifo)
    ws = build(compute(load_scenario("i_love_ai")))
    err = write_in_time(fifo, ws, fmt, False, str(fifo))
    assert isinstance(err, OutputError), err
    assert str(err) == (f"{fifo}: cannot write the worksheet: it is a named pipe (FIFO), not a regular file;"
                        " expected a new file or a regular file to replace")


def test_a_fifo_where_the_key_goes_writes_neither_file(tmp_path: Path) -> None:
    out = tmp_path / "sheet.md"
    os.mkfifo(key_path(out))
    ws = build(compute(load_scenario("i_love_ai")))
    err = write_in_time(key_path(out), ws, "markdown", True, str(out))
    assert isinstance(err, OutputError) and "named pipe" in str(err), err
    assert not out.exists()  # refused before the worksheet itself was written


def test_a_regular_file_and_a_new_one_are_still_written(tmp_path: Path) -> None:
    old = tmp_path / "old.md"
    old.write_text("something long that the worksheet replaces " * 100, encoding="utf-8")
    ws = build(compute(load_scenario("i_love_ai")))
    assert write_in_time(None, ws, "markdown", True, str(old)) is None
    assert old.read_text(encoding="utf-8").startswith("# Worksheet") and key_path(old).exists()
    assert write_in_time(None, ws, "html", False, str(tmp_path / "new.html")) is None
    assert (tmp_path / "new.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_the_command_line_says_so_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from qkv_tui.edges.cli import main

    fifo = tmp_path / "sheet.pdf"
    os.mkfifo(fifo)
    outcome: list[int] = []
    worker = threading.Thread(target=lambda: outcome.append(main(["--export", "worksheet", "-o", str(fifo), "i_love_ai"])),
                              daemon=True)
    worker.start()
    worker.join(TIMEOUT)
    if worker.is_alive():
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        worker.join(TIMEOUT)
        os.close(reader)
        pytest.fail(f"--export worksheet -o FIFO blocked for {TIMEOUT} s")
    err = capsys.readouterr().err
    assert outcome == [2] and err.count("\n") == 1 and err.startswith("error: ") and "not a regular file" in err, err
