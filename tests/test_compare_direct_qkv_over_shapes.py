"""Q, K and V given directly (a scaled_dot_product_attention exercise), over random batch sizes, head counts
and lengths, cross-attention (fewer or more keys than queries) included: a correct learner agrees; one with a
mistake is either indistinguishable there or named. And weights with a leading head axis (heads, out, in)."""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv_tui.edges.cli import main

MISTAKES = ["none", "no_scale", "scale_d_k", "softmax_axis", "k_v_swapped", "k_not_transposed",
            "mask_after_softmax", "mask_fill_zero", "causal_off_by_one"]


def _sdpa(Q: np.ndarray, K: np.ndarray, V: np.ndarray, mask: np.ndarray | None, bug: str) -> dict[str, np.ndarray]:
    """A learner's batched SDPA over (..., tokens, d), written with einsum and an explicit loop-free softmax."""
    d = Q.shape[-1]
    if bug == "k_v_swapped":
        K, V = V, K
    s = np.matmul(Q, K) if bug == "k_not_transposed" else np.einsum("...qd,...kd->...qk", Q, K)
    t = s if bug == "no_scale" else s / (d if bug == "scale_d_k" else np.sqrt(d))
    if mask is not None and bug == "causal_off_by_one":
        mask = np.triu(np.ones(mask.shape, dtype=bool), 2) == 0
    axis = -2 if bug == "softmax_axis" else -1
    fill = 0.0 if bug == "mask_fill_zero" else -np.inf
    x = t if mask is None or bug == "mask_after_softmax" else np.where(mask, t, fill)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    a = e / e.sum(axis=axis, keepdims=True)
    if bug == "mask_after_softmax" and mask is not None:
        a = a * mask
    return {"scores": s, "attn": a, "output": a @ V}


def _run(argv: list[str]) -> tuple[int, dict]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        status = main(argv)
    return status, json.loads(out.getvalue())["compare"]


@settings(max_examples=40, deadline=None)
@given(batch=st.integers(1, 3), heads=st.integers(1, 3), n=st.integers(1, 5), m=st.integers(1, 5),
       d=st.sampled_from([1, 2, 3, 4]), causal=st.booleans(), seed=st.integers(0, 2**16),
       bug=st.sampled_from(MISTAKES), pick=st.integers(0, 2))
def test_sdpa_learners_are_checked(batch: int, heads: int, n: int, m: int, d: int, causal: bool, seed: int,
                                   bug: str, pick: int) -> None:
    pick = min(pick, batch - 1)
    if causal:
        m = n
    rng = np.random.default_rng(seed)
    Q, K, V = rng.normal(size=(batch, heads, n, d)), rng.normal(size=(batch, heads, m, d)), rng.normal(
        size=(batch, heads, m, d))
    mask = np.tril(np.ones((n, m), dtype=bool)) if causal and n > 1 else None
    try:
        wrong = _sdpa(Q, K, V, mask, bug)
    except ValueError:  # K not transposed where d ≠ m
        return
    right = _sdpa(Q, K, V, mask, "none")
    arrays = {"Q": Q, "K": K, "V": V, **wrong}
    if mask is not None:
        arrays["mask"] = mask
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "sdpa.npz"
        np.savez(path, **arrays)
        status, report = _run(["--tensors", str(path), "--compare", str(path), "--export", "json",
                               "--batch", str(pick)])
    differs = any(not np.allclose(wrong[k][pick], right[k][pick], rtol=1e-4, atol=1e-6) for k in wrong)
    if differs:
        assert status == 1
        assert bug in report["diagnosis"], (bug, report)
    else:
        assert status == 0 and report["agree"], report


def test_weights_with_a_head_axis(tmp_path: Path) -> None:
    """(heads, d_k, d_model) per role, as nn.Linear per head: the same numbers as one wide weight."""
    rng = np.random.default_rng(4)
    n, d_model, heads, d_k = 3, 5, 2, 2
    X = rng.normal(size=(n, d_model))
    W = {name: rng.normal(size=(heads, d_k, d_model)) for name in ("W_Q", "W_K", "W_V")}
    q, k, v = (np.einsum("nd,hkd->hnk", X, W[name]) for name in ("W_Q", "W_K", "W_V"))
    s = q @ k.transpose(0, 2, 1)
    e = np.exp(s / np.sqrt(d_k) - (s / np.sqrt(d_k)).max(-1, keepdims=True))
    a = e / e.sum(-1, keepdims=True)
    np.savez(tmp_path / "h.npz", X=X, **W, attn=a, out=(a @ v).transpose(1, 0, 2).reshape(n, -1))
    status, report = _run(["--tensors", str(tmp_path / "h.npz"), "--compare", str(tmp_path / "h.npz"),
                           "--export", "json"])
    assert (status, report["agree"]) == (0, True), report
    e = np.exp(s - s.max(-1, keepdims=True))
    a = e / e.sum(-1, keepdims=True)
    np.savez(tmp_path / "h.npz", X=X, **W, attn=a)
    status, report = _run(["--tensors", str(tmp_path / "h.npz"), "--compare", str(tmp_path / "h.npz"),
                           "--export", "json"])
    assert (status, report["diagnosis"]) == (1, ["no_scale"])
