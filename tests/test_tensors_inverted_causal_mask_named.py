"""A causal mask in the other convention (True = masked out, torch.triu(ones, diagonal=1), as
nn.Transformer's masks and many tutorials have it) read as True = attend leaves the last query no key.
The error line said only "mask row 5 lets query 5 attend no key"; it names the convention and the fix."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from qkv_tui.edges.cli import main


def test_an_inverted_causal_mask_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(0)
    n = 6
    path = tmp_path / "mine.npz"
    np.savez(path, Q=rng.normal(size=(n, 4)), K=rng.normal(size=(n, 4)), V=rng.normal(size=(n, 4)),
             mask=np.triu(np.ones((n, n), dtype=bool), 1))
    capsys.readouterr()
    assert main(["--tensors", str(path), "--export", "json"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert captured.out == "" and len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert "True = masked out" in lines[0] and "~mask" in lines[0]


def test_a_mask_that_is_not_the_inverse_still_names_its_row(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(0)
    n = 4
    mask = np.tril(np.ones((n, n), dtype=bool))
    mask[2] = False
    path = tmp_path / "mine.npz"
    np.savez(path, Q=rng.normal(size=(n, 4)), K=rng.normal(size=(n, 4)), V=rng.normal(size=(n, 4)), mask=mask)
    capsys.readouterr()
    assert main(["--tensors", str(path), "--export", "json"]) == 2
    assert "mask row 2 lets query 2 attend no key" in capsys.readouterr().err
