"""The config file ($XDG_CONFIG_HOME/qkv-tui/config.toml): whatever is there, the app and --serve start.

A FIFO, a device or a folder in its place is refused without being opened; a file that cannot be
read, is too large or is not valid TOML is skipped. Each is one warning line on stderr, and the app
starts with its default theme. Writing it (--save-theme) never blocks and never half-writes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from qkv_tui.base import files as safe_files
from qkv_tui.edges import cli, config
from qkv_tui.ui.app import QKVApp

WAIT = 20.0  # seconds a call may take before it counts as hung (a busy machine reads a file in milliseconds)


def finishes(call: Callable[[], object], fifo: Path | None = None) -> object:
    """``call()``'s result, run in a thread: if it is still running after WAIT seconds, open ``fifo``
    for writing (a blocked reader then sees end of file and returns) and fail."""
    result: list[object] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            result.append(call())
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(WAIT)
    if worker.is_alive():
        if fifo is not None:
            os.close(os.open(fifo, os.O_RDWR | os.O_NONBLOCK))  # a writer comes and goes: the open returns
            worker.join(WAIT)
        pytest.fail(f"still running after {WAIT:g} s: it blocked")
    if errors:
        raise errors[0]
    return result[0] if result else None


@pytest.fixture
def where(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The config file's path, under a fresh XDG_CONFIG_HOME (its folder made)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    path = tmp_path / "qkv-tui" / "config.toml"
    path.parent.mkdir()
    return path


@pytest.fixture
def start(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str | None]]:
    """Run the command line up to the app's start: its exit status, its stderr, the theme the app got."""
    seen: list[str | None] = []

    class Recorder(QKVApp):
        def run(self, *args: object, **kwargs: object) -> None:  # type: ignore[override]
            seen.append(self.live.theme)

    monkeypatch.setattr("qkv_tui.ui.app.QKVApp", Recorder)
    monkeypatch.setattr(cli, "terminal_problem", lambda: None, raising=False)  # pytest's streams are not a terminal

    def run(*args: str) -> tuple[int, str, str | None]:
        seen.clear()
        code = finishes(lambda: cli.main(list(args)))
        assert isinstance(code, int)
        err = capsys.readouterr().err
        return code, err, seen[0] if seen else None

    return run


def one_warning(err: str, path: Path) -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"warning: {path}: "), err
    assert lines[0].endswith("; starting with the default theme"), err
    return lines[0][len(f"warning: {path}: "):-len("; starting with the default theme")]


def test_a_fifo_is_refused_without_opening_it(where: Path, start) -> None:
    os.mkfifo(where)
    code, err, theme = start("i_love_ai")
    assert code == 0 and theme == "dark"
    assert one_warning(err, where) == "is a named pipe (FIFO), not a regular file"


def test_a_fifo_put_there_after_the_check_does_not_block(where: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    os.mkfifo(where)
    regular = os.stat(Path(__file__))
    real_stat = os.stat
    monkeypatch.setattr(config, "os", SimpleNamespace(**{**vars(os), "stat": lambda p: regular if p == where else real_stat(p)}))
    with pytest.raises(config.ConfigError, match="is a named pipe"):
        finishes(lambda: config.read_config(where), where)


def test_a_directory(where: Path, start) -> None:
    where.mkdir()
    code, err, theme = start("i_love_ai")
    assert (code, theme) == (0, "dark")
    assert one_warning(err, where) == "is a directory, not a regular file"


def test_a_device_through_a_link(where: Path, start) -> None:
    where.symlink_to("/dev/null")  # not /dev/zero: a version that read it would fill the memory
    code, err, theme = start("i_love_ai")
    assert (code, theme) == (0, "dark")
    assert one_warning(err, where) == "is a character device, not a regular file"


def test_an_unreadable_file(where: Path, start, monkeypatch: pytest.MonkeyPatch) -> None:
    where.write_text('theme = "light"\n')

    def refuse(path: object, flags: int, *rest: object) -> int:  # tests may run as root, whom permissions do not stop
        if Path(str(path)) != where:  # the scenario is read through the same reader
            return os.open(path, flags, *rest)  # type: ignore[arg-type]
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(safe_files, "os", SimpleNamespace(**{**vars(os), "open": refuse}))  # the reader's own open
    code, err, theme = start("i_love_ai")
    assert (code, theme) == (0, "dark")
    assert one_warning(err, where) == "cannot open: Permission denied"


def test_a_huge_file_is_not_read(where: Path, start) -> None:
    size = 8 * 1024 * 1024  # a log file put there by mistake, say (an old version read it all into memory)
    with open(where, "wb") as f:
        f.truncate(size)  # sparse: costs no disk
    code, err, theme = start("i_love_ai")
    assert (code, theme) == (0, "dark")
    assert one_warning(err, where) == f"is {size:,} bytes; a config file is at most {config.MAX_BYTES:,}"


@pytest.mark.parametrize(("content", "says"), [
    (b'theme = "light\n', "is not valid TOML (Illegal character '\\n' (at line 1, column 15))"),
    (b"theme = \xff\n", "is not UTF-8 text"),
    (b"x = " + b"[" * 5000, "is not valid TOML (RecursionError)"),
    (b'theme = "neon"\n', 'theme = \'neon\': expected "dark" or "light"'),
    (b"theme = 3\n", 'theme = a int: expected "dark" or "light"'),
], ids=["syntax", "not_utf8", "deep", "unknown_theme", "not_a_string"])
def test_invalid_content(where: Path, start, content: bytes, says: str) -> None:
    where.write_bytes(content)
    code, err, theme = start("i_love_ai")
    assert (code, theme) == (0, "dark")
    assert one_warning(err, where) == says


def test_a_good_file_and_none_are_silent(where: Path, start) -> None:
    assert start("i_love_ai") == (0, "", "dark")
    where.write_text('# mine\ntheme = "light"\n')
    assert start("i_love_ai") == (0, "", "light")


def test_a_theme_flag_does_not_read_the_file(where: Path, start) -> None:
    os.mkfifo(where)
    assert start("--theme", "light", "i_love_ai") == (0, "", "light")


def test_serve_reads_it_once_and_tells_every_tab(where: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from qkv_tui.edges.serve import server as serve

    os.mkfifo(where)
    seen: list[tuple[str, list[str] | None]] = []
    monkeypatch.setattr(serve, "serve", lambda spec, title, host, port, options, **_: seen.append((spec, options)) or 0)
    assert finishes(lambda: cli.main(["--serve", "i_love_ai"])) == 0
    assert seen == [("i_love_ai", ["--theme", "dark"])]  # the tabs' apps never open the FIFO
    assert capsys.readouterr().err.startswith(f"warning: {where}: is a named pipe")


def test_serve_starts_with_a_fifo_config_in_a_real_process(where: Path) -> None:
    """The reported hang itself: --serve with a FIFO as the config file. It gets as far as the port
    (one already taken, so it stops there): the warning, then the port's error, and no wait."""
    import socket

    os.mkfifo(where)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        run = subprocess.run([sys.executable, "-m", "qkv_tui", "--serve", "--port", str(port), "i_love_ai"],
                             capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                             env={**os.environ, "XDG_CONFIG_HOME": str(where.parent.parent)})
    lines = run.stderr.splitlines()
    assert run.returncode == 2 and run.stdout == "", run
    assert len(lines) == 2 and lines[0].startswith(f"warning: {where}: is a named pipe"), run.stderr
    assert lines[1].startswith(f"error: cannot serve on 127.0.0.1:{port}: "), run.stderr


# --- writing it -----------------------------------------------------------------------------------


def test_save_theme_refuses_a_fifo_without_blocking(where: Path) -> None:
    os.mkfifo(where)
    with pytest.raises(OSError, match="is a named pipe"):
        finishes(lambda: config.save_theme("light"), where)
    assert where.is_fifo()  # left as it was


def test_save_theme_through_the_command_line_refuses_a_fifo(where: Path, start) -> None:
    os.mkfifo(where)
    code, err, theme = start("--theme", "light", "--save-theme", "i_love_ai")
    assert code == 2 and theme is None
    assert err == (f"error: {where}: cannot save the theme: it is a named pipe (FIFO), not a regular file;"
                   " remove it and try again\n")


def test_save_theme_keeps_a_link_and_the_mode(where: Path, tmp_path: Path) -> None:
    dotfiles = tmp_path / "dotfiles.toml"
    dotfiles.write_text('theme = "dark"\n')
    dotfiles.chmod(0o600)
    where.symlink_to(dotfiles)
    assert config.save_theme("light") == where
    assert where.is_symlink() and config.saved_theme() == "light"
    assert oct(dotfiles.stat().st_mode & 0o777) == oct(0o600)
    assert [p.name for p in where.parent.iterdir()] == ["config.toml"]  # no temporary file left behind
