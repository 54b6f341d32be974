"""--compare with a backward pass: dO in the --tensors file gives the scenario its [backward]; the learner's
dV, dP, dS, dQ and dK (PyTorch autograd's here: an independent reference) agree with the engine's, a wrong
gradient is found in its stage (dMix, dSoftmax, dScore) after every forward stage, and the app opens there."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import pytest

from qkv_tui.core.engine import compute
from qkv_tui.edges import compare as learner
from qkv_tui.edges.cli import main
from qkv_tui.teach.trace import Trace

torch = pytest.importorskip("torch")


def save_autograd(path: Path, seed: int = 0, **change: np.ndarray) -> dict[str, np.ndarray]:
    gen = torch.Generator().manual_seed(seed)
    n, d, H = 4, 6, 2
    dk = d // H
    x = torch.randn(n, d, generator=gen, dtype=torch.float64)
    ws = [(torch.randn(d, d, generator=gen, dtype=torch.float64) / math.sqrt(d)).requires_grad_() for _ in range(4)]
    q, k, v = ((x @ w.T).view(n, H, dk).transpose(0, 1) for w in ws[:3])
    for t in (q, k, v):
        t.retain_grad()
    scaled = (q @ k.transpose(-2, -1)) / math.sqrt(dk)
    scaled.retain_grad()
    mask = torch.tril(torch.ones(n, n, dtype=torch.bool))
    attn = torch.softmax(scaled.masked_fill(~mask, float("-inf")), dim=-1)
    attn.retain_grad()
    out = (attn @ v).transpose(0, 1).reshape(n, d) @ ws[3].T
    dO = torch.randn(n, d, generator=gen, dtype=torch.float64)
    out.backward(dO)
    arrays = {"X": x.numpy(), "W_Q": ws[0].detach().numpy(), "W_K": ws[1].detach().numpy(),
              "W_V": ws[2].detach().numpy(), "W_O": ws[3].detach().numpy(), "num_heads": np.array(H),
              "mask": mask.numpy(), "dO": dO.numpy(), "attn": attn.detach().numpy(), "out": out.detach().numpy(),
              "dP": attn.grad.numpy(), "dS": scaled.grad.numpy(), "dQ": q.grad.numpy(), "dK": k.grad.numpy(),
              "dV": v.grad.numpy()}
    arrays.update(change)
    np.savez(path, **arrays)
    return arrays


def _report(capsys: pytest.CaptureFixture[str], path: Path) -> tuple[int, dict]:
    capsys.readouterr()
    status = main(["--tensors", str(path), "--layout", "torch", "--compare", str(path), "--export", "json"])
    return status, json.loads(capsys.readouterr().out)["compare"]


def test_autograds_gradients_agree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    save_autograd(tmp_path / "g.npz")
    status, report = _report(capsys, tmp_path / "g.npz")
    assert (status, report["agree"]) == (0, True)
    names = {(s["stage"], s["head"]) for s in report["stages"]}
    assert {("dMix", 0), ("dSoftmax", 0), ("dScore", 0), ("dMix", 1), ("dSoftmax", 1), ("dScore", 1)} <= names


def test_a_wrong_gradient_is_found_in_its_stage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    right = save_autograd(tmp_path / "g.npz")
    wrong = right["dQ"] * math.sqrt(3)  # the backward's 1/√d_k forgotten
    save_autograd(tmp_path / "g.npz", dQ=wrong)
    status, report = _report(capsys, tmp_path / "g.npz")
    assert status == 1
    first = report["first"]
    assert (first["stage"], first["head"], first["array"]) == ("dScore", 0, "dQ")
    assert first["yours"] == pytest.approx(wrong[0, first["row"], first["col"]])
    assert report["diagnosis"] == [] and "forward pass" in report["note"]
    assert all(s["agree"] for s in report["stages"] if not s["stage"].startswith("d"))
    args = argparse.Namespace(tensors=str(tmp_path / "g.npz"), layout="torch", batch=None,
                              compare=str(tmp_path / "g.npz"), rtol=None, atol=None)
    scenario = learner.tensors_loader(args)(args.tensors)
    comp = compute(scenario)
    place, _notice = learner.app_place(args, comp)
    assert place is not None
    seg = Trace(comp).segment_at(place.index)
    assert (seg.stage, seg.target, place.head) == ("dscore", "dQ_s", 0)
    assert place.index - seg.start == first["row"] * seg.cols + first["col"]


def test_gradients_without_dO_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    arrays = save_autograd(tmp_path / "g.npz")
    del arrays["dO"]
    np.savez(tmp_path / "g.npz", **arrays)
    capsys.readouterr()
    assert main(["--tensors", str(tmp_path / "g.npz"), "--layout", "torch", "--compare", str(tmp_path / "g.npz"),
                 "--export", "json"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "dQ given, but there is no backward pass" in err[0]


def test_a_dO_of_the_wrong_shape_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    save_autograd(tmp_path / "g.npz", dO=np.ones((4, 5)))
    capsys.readouterr()
    assert main(["--tensors", str(tmp_path / "g.npz"), "--layout", "torch", "--export", "json"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "dO is 4×5; expected 4 × 6" in err[0]
