"""A hostile or careless file: a sequence too long to compute with every cell's arithmetic is one error
line and exit 2 (it was a multi-gigabyte computation, killed for memory), and a --compare file with no
results says so before the computation, not after it."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from qkv_tui.edges.cli import main
from qkv_tui.edges.tensors import MAX_CELLS


def one_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert captured.out == "" and len(lines) == 1 and lines[0].startswith("error: "), captured.err
    return lines[0]


def test_too_many_cells_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = np.zeros((200_000, 1), dtype=np.float32)  # 40 billion cells from a 2 MB file
    path = tmp_path / "long.npz"
    np.savez(path, Q=a, K=a, V=a, out=a)
    line = one_error(capsys, ["--tensors", str(path), "--compare", str(path), "--export", "json"])
    assert "200,000 queries × 200,000 keys" in line and f"{MAX_CELLS:,}" in line


def test_heads_count_towards_the_cells(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    n = 2048
    a = np.zeros((1, 32, n, 2), dtype=np.float32)  # 32 × 2048² = 2**27 cells
    path = tmp_path / "layer.npz"
    np.savez(path, Q=a, K=a, V=a)
    assert "32 head(s)" in one_error(capsys, ["--tensors", str(path), "--export", "json"])


def test_no_results_is_said_before_computing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(0)
    Q, K, V = (rng.normal(size=(3000, 4)) for _ in range(3))  # seconds to compute with its trace
    path = tmp_path / "inputs.npz"
    np.savez(path, Q=Q, K=K, V=V)
    start = time.monotonic()
    line = one_error(capsys, ["--tensors", str(path), "--compare", str(path), "--export", "json"])
    assert "no results to compare" in line
    assert time.monotonic() - start < 3
