"""ctrl+s when the file on disk is no longer what was loaded: emptied, reshaped, a FIFO, a loop of
links, a folder. Each is one error in the app, the edits kept and the file untouched; never a
crash, and never a blocking open (a FIFO with no writer would freeze the app for good)."""

from __future__ import annotations

import os
import re
import stat
import threading
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from qkv_tui import load_scenario
from qkv_tui.core.cell_edit import EditError, InputCell, apply_edit, save_file, save_text
from qkv_tui.ui.app import QKVApp

from .conftest import ROOT, notices

SIZE = (120, 40)
ORIGINAL = (ROOT / "scenarios" / "i_love_ai.toml").read_text(encoding="utf-8")
VALVE_SECONDS = 20.0  # a read of a few bytes takes milliseconds; after this long, the open blocked


@contextmanager
def valve(fifo: Path) -> Iterator[list[bool]]:
    """If something blocks opening ``fifo`` for more than VALVE_SECONDS, open it for writing and close it
    again (the blocked reader then sees end of file), and note that it had to: the test fails, never hangs."""
    opened: list[bool] = []
    done = threading.Event()

    def release() -> None:
        if not done.wait(VALVE_SECONDS):
            opened.append(True)
            os.close(os.open(fifo, os.O_RDWR | os.O_NONBLOCK))

    thread = threading.Thread(target=release, daemon=True)
    thread.start()
    try:
        yield opened
    finally:
        done.set()
        thread.join()


def scenario_file(tmp_path: Path) -> Path:
    path = tmp_path / "mine.toml"
    path.write_text(ORIGINAL, encoding="utf-8")
    return path


def edited(path: Path) -> tuple[object, list[InputCell]]:
    cell = InputCell("X", None, 1, 0)
    return apply_edit(load_scenario(str(path)), cell, "2.5"), [cell]


# --- the core write --------------------------------------------------------------------------


def test_a_good_save_keeps_the_mode_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    path = scenario_file(tmp_path)
    path.chmod(0o640)
    sc, cells = edited(path)
    assert save_file(path, path, sc, cells) == path
    assert "[2.5, 1, 0, 1],   # love" in path.read_text()
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["mine.toml"]


def test_a_link_stays_a_link(tmp_path: Path) -> None:
    real = scenario_file(tmp_path)
    link = tmp_path / "link.toml"
    link.symlink_to(real)
    sc, cells = edited(link)
    save_file(link, link, sc, cells)
    assert link.is_symlink() and tomllib.loads(real.read_text())["X"][1][0] == 2.5


@pytest.mark.parametrize(("now", "says"), [
    ("", "no longer holds X[love,0]"),
    ('tokens = ["I"]\n', "no longer holds X[love,0]"),
    (ORIGINAL.replace("X = [", 'X = "gone"\nold_X = [', 1), "no longer holds X[love,0]"),
    (ORIGINAL.replace("[0, 1, 0, 1],   # love", "[],   # love"), "no longer holds X[love,0]"),
    (ORIGINAL.replace("[0, 1, 0, 1],   # love", "[0],   # love"), "would not be a valid scenario (X is ragged"),
    ('tokens = "oops', "is not valid TOML any more"),
    (ORIGINAL.replace('tokens = ["I", "love", "AI"]', 'tokens = ["I", "love"]'), "would not be a valid scenario"),
], ids=["emptied", "cut_short", "X_a_string", "row_emptied", "row_too_short", "not_toml", "no_longer_valid"])
def test_a_file_changed_on_disk_is_an_error_and_untouched(tmp_path: Path, now: str, says: str) -> None:
    path = scenario_file(tmp_path)
    sc, cells = edited(path)
    path.write_text(now, encoding="utf-8")
    with pytest.raises(EditError, match=re.escape(says)) as caught:
        save_file(path, path, sc, cells)
    assert "\n" not in str(caught.value)
    assert path.read_text(encoding="utf-8") == now


def test_a_mask_edit_into_an_emptied_file_is_refused(tmp_path: Path) -> None:
    path = scenario_file(tmp_path)
    cell = InputCell("mask", None, 0, 1)
    sc = apply_edit(load_scenario(str(path)), cell, "0")
    assert "kind" in save_text("", sc, [cell])  # the text alone takes the mask ...
    path.write_text("")
    with pytest.raises(EditError, match="would not be a valid scenario"):
        save_file(path, path, sc, [cell])  # ... but the file would be no scenario
    assert path.read_text() == ""


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    path = scenario_file(tmp_path)
    sc, cells = edited(path)
    path.unlink()
    os.mkfifo(path)
    with valve(path) as opened, pytest.raises(EditError, match=r"is a named pipe \(FIFO\), not a regular file"):
        save_file(path, path, sc, cells)
    assert not opened, "the save blocked on the FIFO"
    assert stat.S_ISFIFO(os.stat(path).st_mode)


@pytest.mark.parametrize("kind", ["loop", "folder", "gone", "device"])
def test_what_is_not_a_file_is_an_error(tmp_path: Path, kind: str) -> None:
    path = scenario_file(tmp_path)
    sc, cells = edited(path)
    path.unlink()
    says = {"loop": "Too many levels of symbolic links", "folder": "is a directory",
            "gone": "the file is gone", "device": "is a character device"}[kind]
    if kind == "loop":
        path.symlink_to(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "device":
        path.symlink_to("/dev/zero")  # refused before reading: an old version would have read for ever
    with pytest.raises(EditError, match=says):
        save_file(path, path, sc, cells)


def test_the_target_must_be_a_regular_file(tmp_path: Path) -> None:
    source = scenario_file(tmp_path)
    sc, cells = edited(source)
    target = tmp_path / "copy.toml"
    os.mkfifo(target)
    with valve(target) as opened, pytest.raises(EditError, match="not a regular file"):
        save_file(source, target, sc, cells)
    assert not opened and stat.S_ISFIFO(os.stat(target).st_mode)


# --- through the app -------------------------------------------------------------------------


async def type_edit(pilot, text: str) -> None:  # type: ignore[no-untyped-def]
    await pilot.press("e")
    await pilot.pause()
    pilot.app.screen.query_one("#edit-input").value = text
    await pilot.press("enter")
    await pilot.pause()


def last_error(app: QKVApp) -> str:
    errors = [n.message for n in notices(app) if n.severity == "error"]
    assert errors, [n.message for n in notices(app)]
    return errors[-1]


async def save_after(tmp_path: Path, spoil: Callable[[Path], None], fifo: bool = False) -> tuple[QKVApp, Path, str]:
    """Open a copy, edit X[love,0], spoil the file, press ctrl+s: the app, the file and the error shown."""
    path = scenario_file(tmp_path)
    app = QKVApp(str(path))
    async with app.run_test(size=SIZE) as pilot:
        await type_edit(pilot, "X[love,0] = 2.5")
        spoil(path)
        app.live.poll()  # what the file watch does within a second: its error comes before the save's
        with valve(path) if fifo else _nothing() as opened:
            await pilot.press("ctrl+s")
            await pilot.pause()
        assert not opened, "ctrl+s blocked on the FIFO"
        assert app.return_code is None and app.is_running  # alive
        message = last_error(app)
        assert message.startswith(f"error: {path}: not saved: ") and "\n" not in message
        assert app.live.dirty == [InputCell("X", None, 1, 0)] and app.scenario.X[1, 0] == 2.5  # the edits kept
        await pilot.press("right")  # and it still answers keys
        await pilot.pause()
        assert app.position.index == 1
        if not fifo and not path.is_symlink() and path.is_file():
            path.write_text(ORIGINAL, encoding="utf-8")  # put back, then saved at once (no poll in between)
            app.live.save()
            assert "[2.5, 1, 0, 1],   # love" in path.read_text() and not app.live.dirty
    return app, path, message


@contextmanager
def _nothing() -> Iterator[list[bool]]:
    yield []


async def test_ctrl_s_after_the_file_was_emptied(tmp_path: Path) -> None:
    _, path, message = await save_after(tmp_path, lambda p: p.write_text(""))
    assert "the file is empty" in message  # the change on disk is checked first: why it cannot take the edits
    assert tomllib.loads(path.read_text())["X"][1][0] == 2.5  # put back, the same edits saved


async def test_ctrl_s_after_the_file_became_a_fifo(tmp_path: Path) -> None:
    def to_fifo(path: Path) -> None:
        path.unlink()
        os.mkfifo(path)

    _, path, message = await save_after(tmp_path, to_fifo, fifo=True)
    assert "is a named pipe (FIFO), not a regular file; expected a .toml scenario file" in message
    assert stat.S_ISFIFO(os.stat(path).st_mode)


async def test_ctrl_s_after_the_file_became_a_loop_of_links(tmp_path: Path) -> None:
    def to_loop(path: Path) -> None:
        path.unlink()
        path.symlink_to(path)

    _, path, message = await save_after(tmp_path, to_loop)
    assert "cannot open: Too many levels of symbolic links" in message
    assert path.is_symlink()


async def test_ctrl_s_with_brackets_in_the_path_and_the_reason(tmp_path: Path) -> None:
    folder = tmp_path / "[bold]class [1]"
    folder.mkdir()
    _, _, message = await save_after(folder, lambda p: p.write_text(""))  # markup would eat or refuse the brackets
    assert "[bold]class [1]" in message and "[[heads]]" in message


async def test_a_builtin_copy_is_written_beside_a_fifo_never_into_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "i_love_ai.toml"
    app = QKVApp("i_love_ai")
    async with app.run_test(size=SIZE) as pilot:
        await type_edit(pilot, "X[love,0] = 9")
        os.mkfifo(target)
        with valve(target) as opened:
            await pilot.press("ctrl+s")
            await pilot.pause()
        assert not opened and app.live.dirty and stat.S_ISFIFO(os.stat(target).st_mode)
        assert any("exists already" in n.message for n in notices(app))
