"""The words beside the JSON and in the app's notice give the two numbers at the app's decimals (more only
where those round alike), not Python's full repr, which wrapped the notice at 80 columns; the JSON keeps
every digit."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from qkv_tui.edges.cli import main
from qkv_tui.edges.compare import shown


def test_numbers_are_shown_at_three_decimals() -> None:
    assert shown(0.07828846573829651, 1.0) == ("0.078", "1.000")


def test_more_decimals_only_where_three_round_alike() -> None:
    assert shown(0.12341, 0.12349) == ("0.1234", "0.1235")
    assert shown(0.5, 0.5 + 1e-15) == ("0.5", repr(0.5 + 1e-15))


def test_nan_and_infinities_are_words() -> None:
    assert shown(float("nan"), -0.2) == ("nan", "-0.200")
    assert shown(float("-inf"), 0.0) == ("-inf", "0.000")


def test_the_decimals_follow_the_apps_setting() -> None:
    assert shown(0.07828846573829651, 1.0, 5) == ("0.07829", "1.00000")


def test_the_export_line_is_short_and_the_json_exact(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(3)
    Q, K, V = (rng.normal(size=(4, 3)) for _ in range(3))
    s = Q @ K.T / np.sqrt(3)
    w = np.exp(s - s.max(-1, keepdims=True))
    w = w / w.sum(-1, keepdims=True)
    w[0, 0] += 0.0123456789  # one cell off
    path = tmp_path / "mine.npz"
    np.savez(path, Q=Q, K=K, V=V, attn=w)
    capsys.readouterr()
    assert main(["--tensors", str(path), "--compare", str(path), "--export", "json"]) == 1
    captured = capsys.readouterr()
    first = json.loads(captured.out)["compare"]["first"]
    assert first["yours"] == w[0, 0]
    line = captured.err.splitlines()[0]
    assert line == f"differs: Softmax [t0,t0]: yours {w[0, 0]:.3f}, correct {first['correct']:.3f}"
