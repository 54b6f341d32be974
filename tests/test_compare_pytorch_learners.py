"""Learners' implementations written in PyTorch (float32, nn.Linear weights, masked_fill, F.softmax), saved
with torch.save as .pt: --compare agrees with the correct ones and names the mistake of each buggy one,
for a multi-head module (X and weights) and for a batched scaled_dot_product_attention (Q, K, V as
batch × heads × tokens × d_k)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from qkv_tui.edges.cli import main

torch = pytest.importorskip("torch")


def mha(x, wq, wk, wv, wo, heads: int, bug: str | None, fill: float = float("-inf")):  # type: ignore[no-untyped-def]
    n, d_model = x.shape
    d_k = d_model // heads
    lin = (lambda t, w: t @ w) if bug == "weight_transposed" else (lambda t, w: t @ w.T)
    q, k, v = lin(x, wq), lin(x, wk), lin(x, wv)
    if bug == "k_v_swapped":
        k, v = v, k
    if bug == "head_order":
        q, k, v = (t.view(n, d_k, heads).permute(2, 0, 1) for t in (q, k, v))
    else:
        q, k, v = (t.view(n, heads, d_k).transpose(0, 1) for t in (q, k, v))
    scores = q @ k.transpose(-2, -1)
    scaled = scores if bug == "no_scale" else scores / math.sqrt(d_k)
    ones = torch.ones(n, n, dtype=torch.bool)
    mask = torch.tril(ones, diagonal=1) if bug == "causal_off_by_one" else torch.tril(ones)
    dim = -2 if bug == "softmax_axis" else -1
    if bug == "mask_fill_zero":
        attn = torch.softmax(scaled.masked_fill(~mask, 0.0), dim=dim)
    elif bug == "softmax_overflow":
        e = torch.exp(scaled.masked_fill(~mask, float("-inf")))
        attn = e / e.sum(dim=-1, keepdim=True)
    else:
        attn = torch.softmax(scaled.masked_fill(~mask, fill), dim=dim)
    out = attn @ v
    merged = (out.permute(1, 2, 0) if bug == "head_order" else out.transpose(0, 1)).reshape(n, d_model)
    return {"scores": scores, "scaled": scaled, "attn": attn, "out": merged @ wo.T}


CASES = [None, "fill_min", "no_scale", "softmax_axis", "mask_fill_zero", "causal_off_by_one", "weight_transposed",
         "head_order", "k_v_swapped", "softmax_overflow"]


@pytest.mark.parametrize("bug", CASES)
def test_a_pytorch_module_is_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str], bug: str | None) -> None:
    gen = torch.Generator().manual_seed(5)
    n, d_model, heads = 5, 8, 2
    size = 40.0 if bug == "softmax_overflow" else 1.0  # past float32's exp range only for the overflow case
    x = torch.randn(n, d_model, generator=gen) * size
    ws = [torch.randn(d_model, d_model, generator=gen) / math.sqrt(d_model) for _ in range(4)]
    fill = torch.finfo(torch.float32).min if bug == "fill_min" else float("-inf")
    results = mha(x, *ws, heads, None if bug == "fill_min" else bug, fill)
    path = tmp_path / "mine.pt"
    torch.save({"X": x, "W_Q": ws[0], "W_K": ws[1], "W_V": ws[2], "W_O": ws[3], "num_heads": heads,
                "mask": torch.tril(torch.ones(n, n, dtype=torch.bool)), **results}, path)
    capsys.readouterr()
    status = main(["--tensors", str(path), "--layout", "torch", "--compare", str(path), "--export", "json"])
    report = json.loads(capsys.readouterr().out)["compare"]
    if bug in (None, "fill_min"):
        assert (status, report["agree"]) == (0, True), report
    else:
        assert (status, report["diagnosis"]) == (1, [bug]), report


@pytest.mark.parametrize("bug", [None, "no_scale", "softmax_axis", "scale_d_k", "k_not_transposed", "k_v_swapped"])
def test_a_batched_sdpa_is_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str], bug: str | None) -> None:
    gen = torch.Generator().manual_seed(9)
    b, h, n, d = 3, 2, 4, 4
    Q, K, V = (torch.randn(b, h, n, d, generator=gen) for _ in range(3))
    k, v = (V, K) if bug == "k_v_swapped" else (K, V)
    scores = Q @ k if bug == "k_not_transposed" else Q @ k.transpose(-2, -1)
    scaled = {"no_scale": scores, "scale_d_k": scores / d}.get(bug or "", scores / math.sqrt(d))
    mask = torch.tril(torch.ones(n, n, dtype=torch.bool))
    attn = torch.softmax(scaled.masked_fill(~mask, float("-inf")), dim=-2 if bug == "softmax_axis" else -1)
    path = tmp_path / "sdpa.pt"
    torch.save({"Q": Q, "K": K, "V": V, "mask": mask[None, None], "scores": scores, "attn": attn,
                "output": attn @ v}, path)
    capsys.readouterr()
    status = main(["--tensors", str(path), "--compare", str(path), "--export", "json", "--batch", "2"])
    report = json.loads(capsys.readouterr().out)["compare"]
    if bug is None:
        assert (status, report["agree"]) == (0, True), report
    else:
        assert (status, report["diagnosis"]) == (1, [bug]), report
