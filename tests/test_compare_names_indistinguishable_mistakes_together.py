"""docs/my-attention-is-wrong.md: two mistakes that give the same numbers in the learner's case are both
named. With d_model = 16 and 4 heads, √d_model = 4 = d_k: a division by 4 is scale_d_model and scale_d_k
alike, and no one of them may be picked as if it were known."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from qkv_tui.edges.cli import main


def test_scale_by_sqrt_d_model_equal_to_d_k_names_both(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(7)
    n, d_model, heads = 5, 16, 4
    d_k = d_model // heads
    X = rng.normal(size=(n, d_model))
    W_Q, W_K, W_V = (rng.normal(size=(d_model, d_model)) / 4 for _ in range(3))  # out × in
    Q, K = (np.stack(np.split(X @ W.T, heads, axis=1)) for W in (W_Q, W_K))
    scores = Q @ K.transpose(0, 2, 1)
    path = tmp_path / "mine.npz"
    np.savez(path, X=X, W_Q=W_Q, W_K=W_K, W_V=W_V, num_heads=heads, scores=scores, scaled=scores / np.sqrt(d_model))
    capsys.readouterr()
    status = main(["--tensors", str(path), "--layout", "torch", "--compare", str(path), "--export", "json"])
    compare = json.loads(capsys.readouterr().out)["compare"]
    assert status == 1
    assert compare["first"]["stage"] == "Scale"
    assert sorted(compare["diagnosis"]) == ["scale_d_k", "scale_d_model"]
    assert d_k == np.sqrt(d_model)
