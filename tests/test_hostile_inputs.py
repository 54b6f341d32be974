"""What a fuzzer throws at the loader: each class of input gets one clean error line and
exit 2 (docs/reference.md, "The command line"), or a correct result; never a traceback, a hang or a huge read."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qkv_tui.core import tomlfile
from qkv_tui.core.scenario import ScenarioError, load_scenario, parse_scenario

from .conftest import BASE, HEAD, SCENARIOS

GOOD = BASE + HEAD


def one_error_line(run, source: str) -> str:  # type: ignore[no-untyped-def]
    assert run.code == 2, (run.out, run.err)
    assert run.out == ""
    assert "Traceback" not in run.err
    lines = run.err.splitlines()
    assert len(lines) == 1 and run.err.endswith("\n"), run.err
    assert lines[0].startswith(f"error: {source}: "), lines[0]
    return lines[0][len(f"error: {source}: "):]


# --- the TOML reader's own limits -----------------------------------------------------


@pytest.mark.parametrize("opener,closer", [("[", "]"), ("{a = ", "}")], ids=["arrays", "inline_tables"])
def test_nesting_deep_enough_to_exhaust_the_stack(opener: str, closer: str, cli, write) -> None:
    path = write('tokens = ["I"]\nX = ' + opener * 800 + "1" + closer * 800 + "\n")
    message = one_error_line(cli("--check", str(path)), str(path))
    assert message.startswith("line 2, column ")
    assert "nested more than 64 levels deep; a scenario needs at most 3" in message


def test_nesting_the_reader_survives_is_a_shape_error(cli, write) -> None:
    path = write('tokens = ["I"]\nX = ' + "[" * 100 + "1" + "]" * 100 + "\n" + HEAD)
    message = one_error_line(cli("--check", str(path)), str(path))
    assert message == 'X row 1 ("I"), column 1 is a list; X must be 2-D (rows of numbers)'


def test_integer_longer_than_python_converts(cli, write) -> None:
    path = write(BASE.replace("[1, 0, 1, 0]", "[1, " + "7" * 5000 + ", 1, 0]") + HEAD)
    message = one_error_line(cli("--check", str(path)), str(path))
    assert message == ("line 3, column 10: an integer of 5,000 digits; numbers must fit a float64"
                       " (at most 309 digits, about 1.8e308)")


@pytest.mark.parametrize("where", ["X", "scale", "title", "mask", "allow", "num_heads"])
def test_huge_hex_integers_are_named_not_printed(where: str, cli, write) -> None:
    huge = "0x" + "f" * 20000  # int() of base 16 has no digit limit, str() of it has
    text = {
        "X": BASE.replace("[1, 0, 1, 0]", f"[1, {huge}, 1, 0]") + HEAD,
        "scale": BASE + f"scale = {huge}\n" + HEAD,
        "title": f"title = {huge}\n" + GOOD,
        "mask": BASE + f"mask = {huge}\n" + HEAD,
        "allow": BASE + f'[mask]\nkind = "custom"\nallow = [[1, 1, 1], [1, {huge}, 1], [1, 1, 1]]\n' + HEAD,
        "num_heads": BASE + f"[attention]\nnum_heads = {huge}\n" + HEAD.split("\n", 2)[2],
    }[where]
    path = write(text)
    message = one_error_line(cli("--check", str(path)), str(path))
    assert "an integer of about 24,083 digits" in message
    assert len(message) < 300


# --- paths and what they name ---------------------------------------------------------


def test_name_too_long(cli) -> None:
    name = "x" * 5000 + ".toml"
    message = one_error_line(cli("--check", name), name)
    assert message == "cannot open: File name too long"


def test_link_loop(cli, tmp_path: Path) -> None:
    loop = tmp_path / "loop.toml"
    loop.symlink_to(loop)
    message = one_error_line(cli("--check", str(loop)), str(loop))
    assert message == "cannot open: Too many levels of symbolic links"


def test_unsearchable_folder(cli, monkeypatch) -> None:
    # Tests may run as root, whom permissions do not stop: make the check itself refuse.
    def refuse(path: object, **_: object) -> os.stat_result:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(tomlfile, "os", SimpleNamespace(**{**vars(os), "stat": refuse}))
    message = one_error_line(cli("--check", "locked/case.toml"), "locked/case.toml")
    assert message == "cannot open: Permission denied (a folder on the path, or the file, is not readable by you)"


def test_nul_in_path_through_the_api() -> None:
    with pytest.raises(ScenarioError, match="the path contains a NUL character"):
        load_scenario("bad\0name.toml")


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "/dev/full", "/dev/null"])
def test_devices_are_refused_before_reading(device: str, cli) -> None:
    if not os.path.exists(device):
        pytest.skip(f"{device} is not on this system")
    message = one_error_line(cli("--check", device), device)
    assert message == "is a character device, not a regular file; expected a .toml scenario file"


def test_fifo_without_writer_does_not_block(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.toml"
    os.mkfifo(fifo)
    # A real process with a generous timeout: if the open blocked, this would fail, not hang.
    proc = subprocess.run([sys.executable, "-m", "qkv_tui", "--check", str(fifo)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f"error: {fifo}: is a named pipe (FIFO), not a regular file; expected a .toml scenario file\n"


def test_fifo_swapped_in_after_the_check_is_refused_without_blocking(tmp_path: Path) -> None:
    regular = tmp_path / "ok.toml"
    regular.write_text(GOOD)
    fifo = tmp_path / "pipe.toml"
    os.mkfifo(fifo)
    with pytest.raises(tomlfile.ReadError, match="is a named pipe"):
        tomlfile.read_bytes(fifo, os.stat(regular))


def test_file_over_the_limit_is_refused_unread(cli, tmp_path: Path) -> None:
    big = tmp_path / "big.toml"
    with open(big, "wb") as f:
        f.truncate(tomlfile.MAX_BYTES + 1)  # sparse: costs no disk
    message = one_error_line(cli("--check", str(big)), str(big))
    assert message == "is 67.1 MB; scenario files are limited to 64 MiB"


def test_file_that_grows_past_the_limit_is_read_only_to_the_limit(tmp_path: Path, monkeypatch) -> None:
    tiny = tmp_path / "tiny.toml"
    tiny.write_text("x = 1\n")
    status = os.stat(tiny)  # what the stat saw, before the file grew
    path = tmp_path / "grows.toml"
    path.write_text(GOOD)
    monkeypatch.setattr(tomlfile, "MAX_BYTES", 100)
    with pytest.raises(tomlfile.ReadError, match="is more than 64 MiB"):
        tomlfile.read_bytes(path, status)


def test_directory(cli, tmp_path: Path) -> None:
    assert one_error_line(cli("--export", "json", str(tmp_path)), str(tmp_path)) == (
        "is a directory; expected a .toml scenario file")


def test_control_characters_in_the_path_stay_on_one_line(cli, tmp_path: Path) -> None:
    path = tmp_path / "two\nlines\x1b.toml"
    path.write_text("tokens = 3\n")
    run = cli("--check", str(path))
    shown = str(path).replace("\n", "\\n").replace("\x1b", "\\x1b")
    assert one_error_line(run, shown).startswith("tokens must be")
    path.write_text(GOOD)
    run = cli("--check", str(path))
    assert run.code == 0 and run.out.count("\n") == 1 and run.out.startswith(f"ok: {shown}: ")


def test_undecodable_bytes_in_the_path(tmp_path: Path) -> None:
    name = os.fsencode(tmp_path) + b"/caf\xe9.toml"
    with open(name, "wb") as f:
        f.write(b"tokens = 3\n")
    proc = subprocess.run([sys.executable, "-m", "qkv_tui", "--check", name], capture_output=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == b""
    assert proc.stderr.count(b"\n") == 1 and b"caf\\udce9.toml: tokens must be" in proc.stderr


# --- one arithmetic policy ---------------------------------------------------------------


def test_a_numpy_warning_in_an_export_is_one_error_line(cli, monkeypatch) -> None:
    import qkv_tui.edges.export_markdown as md

    def overflowing(comp: object) -> str:
        return str(np.float64(1e308) * 10)  # a RuntimeWarning under NumPy's default policy

    monkeypatch.setattr(md, "to_markdown", overflowing)
    message = one_error_line(cli("--export", "markdown", "i_love_ai"), "i_love_ai")
    assert message.startswith("the numbers are too large or too small to compute with float64 (overflow")


def test_extreme_scenario_exports_cleanly_or_fails_cleanly(cli, write) -> None:
    # Scores of about -1e100: every exponential underflows; the export must not warn or crash.
    path = write(
        'tokens = ["a", "b"]\nX = [[-2.6e49, 4.0e49], [9.7e49, 5.8e49]]\nmask = "causal"\n[[heads]]\n'
        "W_Q = [[-2.8e49, -6.2e49], [9.9e49, -3.1e49]]\nW_K = [[-9.0e49, 4.7e49], [-3.5e49, 6.1e49]]\n"
        "W_V = [[-9.7e49, 4.4e49], [6.2e48, -9.3e48]]\n"
    )
    for mode in (("--export", "markdown"), ("--export", "json"), ("--check",)):
        run = cli(*mode, str(path))
        if run.code == 0:
            assert run.err == "" and run.out
        else:
            one_error_line(run, str(path))


def test_what_check_accepts_every_export_can_print(cli, write) -> None:
    """Found by a reviewer: --check said ok, but Markdown and the worksheet stopped at a difference
    beyond float64 (−1e308 − 1e308): its e^ is simply 0, as the app already showed."""
    path = write('tokens = ["a", "b"]\nX = [[1e154], [-1e154]]\nscale = 1\n[[heads]]\nW_Q = [[1]]\nW_K = [[1]]\nW_V = [[1]]\n')
    for mode in (("--check",), ("--export", "markdown"), ("--export", "json"), ("--export", "worksheet")):
        run = cli(*mode, str(path))
        assert run.code == 0 and run.err == "" and run.out, (mode, run.err)
    markdown = cli("--export", "markdown", str(path)).out
    assert "e^(-1.000e+308 − 1.000e+308) / 1.000 = e^−∞ / 1.000 = 0 / 1.000 = 0.000" in markdown


# --- mutated scenario files -------------------------------------------------------------

SOURCES = [p.read_bytes() for p in SCENARIOS]


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(SOURCES)))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "truncate", "duplicate", "insert", "delete"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "truncate":
            del data[at:]
        elif kind == "duplicate":
            end = draw(st.integers(at, min(len(data), at + 200)))
            data[at:at] = data[at:end]
        elif kind == "insert":
            data[at:at] = draw(st.sampled_from([b"[", b"]", b'"', b"'''", b"\n", b"=", b",", b"{", b"#", b"\x00",
                                                b"1e999", b"nan", b"-", b"0x" + b"f" * 400, b"\x1b", b"\\u000a"]))
        elif kind == "delete" and data:
            del data[at: at + draw(st.integers(1, 40))]
    return bytes(data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=mutated(), mode=st.sampled_from([("--check",), ("--export", "json"), ("--export", "markdown")]))
def test_mutated_files_load_or_fail_cleanly(data: bytes, mode: tuple[str, ...], cli, write) -> None:
    path = write(data)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning that escapes the CLI's policy fails the test
        run = cli(*mode, str(path))
    if run.code == 0:
        assert run.out and "Traceback" not in run.err
        assert all(line.startswith("warning: ") for line in run.err.splitlines())
    else:
        one_error_line(run, str(path))


def test_a_mutated_file_in_a_real_process(write) -> None:
    path = write(SOURCES[0][: len(SOURCES[0]) // 2])
    proc = subprocess.run([sys.executable, "-m", "qkv_tui", "--export", "json", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith(f"error: {path}: line ") and proc.stderr.count("\n") == 1


def test_parse_scenario_reports_as_the_cli_does() -> None:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario('tokens = ["I"]\nX = ' + "[" * 900, "deep.toml")
    assert str(caught.value).startswith("deep.toml: line 2, column ")


@pytest.mark.skipif(not (hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("setpriv")),
                    reason="needs root and setpriv, to run the check as a user the folder shuts out")
def test_unsearchable_folder_for_real(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    (locked / "inner").mkdir(parents=True)
    target = locked / "inner" / "a.toml"
    target.write_text(GOOD)
    locked.chmod(0o700)
    tmp_path.chmod(0o755)
    proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           sys.executable, "-m", "qkv_tui", "--check", str(target)],
                          capture_output=True, text=True, timeout=120, cwd="/",
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    if "No module named" in proc.stderr or proc.returncode not in (0, 2):
        pytest.skip(f"the unprivileged user cannot run this Python: {proc.stderr[-200:]}")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (f"error: {target}: cannot open: Permission denied"
                           " (a folder on the path, or the file, is not readable by you)\n")
