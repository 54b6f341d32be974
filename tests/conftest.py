"""Shared helpers: the shipped scenarios, and running the command line in-process."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings

from qkv_tui.edges.cli import main

# The suite gates every landing: the same generated examples on every run, so a red run means a
# change broke something, never that a new random draw found an old bug. To hunt for new cases,
# run with QKV_HYPOTHESIS=explore (random draws; what fails is printed to be kept as a test).
settings.register_profile("fixed", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, database=None, print_blob=True)
settings.load_profile(os.environ.get("QKV_HYPOTHESIS", "fixed"))

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted((ROOT / "scenarios").glob("*.toml"))
# hand-made scenarios; those with a [model] table (a real model's head, d_model 128) have their own tests
SCENARIOS = [p for p in SHIPPED if "\n[model]" not in p.read_text(encoding="utf-8")]
MODEL_SCENARIOS = [p for p in SHIPPED if p not in SCENARIOS]
# those whose heads run a softmax: [linear] and [deltanet] keep a state instead, with no KV cache and no tiles
SOFTMAX_SCENARIOS = [p for p in SCENARIOS if not re.search(r"^\[(linear|deltanet)\]", p.read_text(encoding="utf-8"), re.M)]
BASE = '''
tokens = ["I", "love", "AI"]
X = [[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]]
'''
HEAD = '''
[[heads]]
W_Q = [[1, 0, 1], [0, 1, 0], [1, 0, 0], [0, 1, 1]]
W_K = [[0, 0, 1], [1, 1, 0], [0, 1, 0], [1, 0, 1]]
W_V = [[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0]]
'''


@dataclass(frozen=True)
class Notice:
    """A notification the app gave, as the tests read it."""

    message: str
    severity: str


@pytest.fixture(autouse=True)
def _recorded_notices(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every app's notifications, kept for notices(app): Textual keeps its own only privately."""
    from textual.app import App

    notify, clear = App.notify, App.clear_notifications

    def recorded(self: App[object], message: str, **kwargs: object) -> None:
        vars(self).setdefault("test_notices", []).append(Notice(str(message), str(kwargs.get("severity", "information"))))
        notify(self, message, **kwargs)  # type: ignore[arg-type]

    def cleared(self: App[object]) -> None:
        vars(self)["test_notices"] = []
        clear(self)

    monkeypatch.setattr(App, "notify", recorded)
    monkeypatch.setattr(App, "clear_notifications", cleared)


def notices(app: object) -> list[Notice]:
    """The notifications the app gave since it last cleared them, oldest first."""
    return list(vars(app).get("test_notices", []))


@dataclass
class Run:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., Run]:
    def run(*args: str) -> Run:
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse's --help / --version
            code = int(exc.code or 0)
        captured = capsys.readouterr()
        return Run(code, captured.out, captured.err)

    return run


@pytest.fixture
def write(tmp_path: Path) -> Callable[[str | bytes], Path]:
    def make(content: str | bytes, name: str = "case.toml") -> Path:
        path = tmp_path / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        return path

    return make
