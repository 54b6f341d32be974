"""An .npz member's header declares its shape before its data: a header claiming 100000×100000 over a few
bytes (a damaged or hostile file) made np.load allocate 74.5 GiB and die with a MemoryError traceback,
exit 1. The declared size is checked first: one error line, exit 2; honest files, compressed too, read."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

from qkv_tui.edges.cli import main


def member(shape: tuple[int, ...], data: bytes) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f8", "fortran_order": False, "shape": shape})
    buf.write(data)
    return buf.getvalue()


def with_x(tmp_path: Path, x: bytes) -> Path:
    path = tmp_path / "mine.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("X.npy", x)
        for name in ("W_Q", "W_K", "W_V"):
            buf = io.BytesIO()
            np.save(buf, np.eye(4))
            archive.writestr(f"{name}.npy", buf.getvalue())
    return path


def one_error(capsys: pytest.CaptureFixture[str], path: Path) -> str:
    capsys.readouterr()
    assert main(["--tensors", str(path), "--layout", "torch", "--export", "json"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert captured.out == "" and len(lines) == 1 and lines[0].startswith("error: ") and "mine.npz: X" in lines[0], captured.err
    return lines[0]


def test_a_header_past_the_limit_is_refused_unread(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = one_error(capsys, with_x(tmp_path, member((100_000, 100_000), b"\0" * 64)))
    assert "100000×100000" in line and "at most 2 GiB" in line


def test_a_header_larger_than_its_data_is_damage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = one_error(capsys, with_x(tmp_path, member((1000, 1000), b"\0" * 64)))
    assert "8,000,000 bytes" in line and "holds 64" in line


def test_a_compressed_file_still_reads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(0)
    path = tmp_path / "mine.npz"
    np.savez_compressed(path, Q=rng.normal(size=(5, 3)), K=rng.normal(size=(5, 3)), V=rng.normal(size=(5, 3)))
    assert main(["--tensors", str(path), "--check"]) == 0
