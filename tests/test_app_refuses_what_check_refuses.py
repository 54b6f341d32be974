"""The app (``qkv-tui FILE``, no --export) refuses a file --check refuses, with --check's one line and exit 2, as
every export does: a [backward] file whose gradients pass float64 used to open and show ∞ in its backward
stages. Under --serve the server refuses it before serving, and a tab's app (whose scenario the app starter
prepares, edges/serve/prepared.py) refuses it too rather than opening the starter's computation."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qkv_tui.edges.serve import prepared as serve_prepared

from .fuzz_paths import one_error_line, run
from .strategies_backward import backward_scenarios
from .test_exports_accept_what_check_accepts import _modern, _one_edge

SEED = (Path(__file__).resolve().parent.parent / "scenarios").joinpath
# learn_to_look with one embedding at 1e200: the forward holds (softmax takes the scores' differences), the
# loss and its gradients pass float64
OVERFLOWING = re.sub(r"(?m)^  \[1, 0, 1\],( +# I: its own Value)", r"  [1e200, 0, 1],\1",
                     SEED("learn_to_look.toml").read_text(encoding="utf-8"))


class StartedError(Exception):
    """The app or the server was started: the file got past loading."""


@contextmanager
def _no_screen() -> Iterator[None]:
    """Past loading the app or the server raises StartedError; the terminal check passes, as at a terminal."""
    def started(*_: object, **__: object) -> None:
        raise StartedError

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("qkv_tui.edges.cli.terminal_problem", lambda: None)
        mp.setattr("qkv_tui.ui.app.QKVApp.run", started)
        mp.setattr("qkv_tui.edges.serve.server.serve", started)
        yield


@pytest.fixture
def no_screen() -> Iterator[None]:
    with _no_screen():
        yield


def _opened(*args: str) -> tuple[int, str, str] | None:
    """The command line's (code, out, err), or None where it started the app or the server."""
    try:
        return run(*args)
    except StartedError:
        return None


def test_the_overflowing_file_is_refused_by_check(tmp_path: Path) -> None:
    path = tmp_path / "loss.toml"
    path.write_text(OVERFLOWING, encoding="utf-8")
    assert "[1e200, 0, 1]" in OVERFLOWING
    assert "too large or too small to compute with float64" in one_error_line(*run("--check", str(path)), path)


@pytest.mark.parametrize("mode", [[], ["--serve"], ["--stage", "1"]], ids=["app", "serve", "app-at-a-place"])
def test_the_app_and_the_server_refuse_it_with_checks_line(tmp_path: Path, no_screen: None, mode: list[str]) -> None:
    path = tmp_path / "loss.toml"
    path.write_text(OVERFLOWING, encoding="utf-8")
    line = one_error_line(*run("--check", str(path)), path)
    result = _opened(str(path), *mode)
    assert result is not None, "opened a file --check refuses"
    assert one_error_line(*result, path) == line


def test_a_served_tab_refuses_it_too(tmp_path: Path, no_screen: None) -> None:
    path = tmp_path / "loss.toml"
    path.write_text(OVERFLOWING, encoding="utf-8")
    line = one_error_line(*run("--check", str(path)), path)
    prepared = serve_prepared.prepare(str(path))
    assert prepared is None, "the app starter prepared a file --check refuses"
    serve_prepared.keep(prepared)
    result = _opened(str(path), "--theme", "dark")  # a tab's command line (serve.py passes the theme)
    assert result is not None and one_error_line(*result, path) == line


def test_a_served_tab_still_takes_a_good_file_prepared(tmp_path: Path, no_screen: None) -> None:
    path = tmp_path / "look.toml"
    path.write_text(SEED("learn_to_look.toml").read_text(encoding="utf-8"), encoding="utf-8")
    prepared = serve_prepared.prepare(str(path))
    assert prepared is not None
    serve_prepared.keep(prepared)
    assert _opened(str(path), "--theme", "dark") is None  # the app started, from the prepared computation
    assert serve_prepared.take(str(path)) is None  # taken


FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))


@FUZZ
@given(st.one_of(st.sampled_from(["mla", "linear", "deltanet"]).flatmap(backward_scenarios),
                 _modern()).flatmap(_one_edge))
def test_the_app_opens_what_check_accepts_and_refuses_what_it_refuses(text: str) -> None:
    with tempfile.TemporaryDirectory() as folder, _no_screen():
        path = Path(folder) / "edge.toml"
        path.write_text(text, encoding="utf-8")
        code, out, err = run("--check", str(path))
        result = _opened(str(path))
        if code == 0:
            assert result is None, result  # opened
            return
        line = one_error_line(code, out, err, path)
        assert result is not None, f"opened a file --check refuses: {line}"
        assert one_error_line(*result, path) == line
