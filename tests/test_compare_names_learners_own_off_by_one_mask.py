"""A learner who builds the causal mask inside their own function saves that mask as an input (the page
says to). With tril(ones, diagonal=1) taken as given, their numbers were the right answer to their own
mask and the check said "agree", exit 0, to the very mistake it exists to name (causal_off_by_one)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from qkv_tui.edges.cli import main


def student_file(tmp_path: Path, diagonal: int) -> Path:
    """CS336's multihead self-attention as a student writes it, mask built inside, with `diagonal`."""
    torch.manual_seed(0)
    S, D, H = 6, 16, 4
    dk = D // H
    x = torch.randn(S, D)
    q, k, v, o = (torch.nn.Linear(D, D, bias=False) for _ in range(4))
    mask = torch.tril(torch.ones(S, S, dtype=torch.bool), diagonal=diagonal)
    with torch.no_grad():
        Q, K, V = (p(x).view(S, H, dk).transpose(0, 1) for p in (q, k, v))
        scaled = Q @ K.transpose(-2, -1) / math.sqrt(dk)
        attn = torch.softmax(scaled.masked_fill(~mask, float("-inf")), dim=-1)
        out = o((attn @ V).transpose(0, 1).reshape(S, D))
    path = tmp_path / "mine.npz"
    np.savez(path, X=x.numpy(), W_Q=q.weight.detach().numpy(), W_K=k.weight.detach().numpy(),
             W_V=v.weight.detach().numpy(), W_O=o.weight.detach().numpy(), num_heads=H, mask=mask.numpy(),
             scaled=scaled.numpy(), attn=attn.numpy(), out=out.numpy())
    return path


def report(tmp_path: Path, capsys: pytest.CaptureFixture[str], diagonal: int) -> tuple[int, dict[str, Any], str]:
    path = student_file(tmp_path, diagonal)
    capsys.readouterr()
    status = main(["--tensors", str(path), "--layout", "torch", "--compare", str(path), "--export", "json"])
    captured = capsys.readouterr()
    return status, json.loads(captured.out)["compare"], captured.err


def test_an_off_by_one_mask_of_their_own_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, compare, err = report(tmp_path, capsys, diagonal=1)
    assert status == 1
    assert compare["agree"] is False
    assert compare["diagnosis"] == ["causal_off_by_one"]
    assert compare["first"]["stage"] == "Softmax"
    assert "tril(ones, diagonal=1)" in compare["note"] and "tril(ones, diagonal=1)" in err


def test_the_right_causal_mask_still_agrees(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, compare, err = report(tmp_path, capsys, diagonal=0)
    assert status == 0 and compare["agree"] is True and "note" not in compare
    assert "tril" not in err


def test_without_compare_the_reading_is_said_on_standard_error(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    path = student_file(tmp_path, diagonal=1)
    capsys.readouterr()
    assert main(["--tensors", str(path), "--layout", "torch", "--check"]) == 0
    err = capsys.readouterr().err
    assert err.startswith("warning: your mask is tril(ones, diagonal=1)") and len(err.splitlines()) == 1
