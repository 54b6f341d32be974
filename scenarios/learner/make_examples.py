"""Writes the example files of docs/my-attention-is-wrong.md: one learner's multi-head causal self-attention,
saved the way the page asks (inputs and results in one .npz), correct and with one known mistake each.

    python scenarios/learner/make_examples.py     # from the repository root; the same bytes every run on one machine

CS336's conventions: weights as nn.Linear stores them (out × in, applied as x @ W.T), a boolean mask where
True means attend, heads split as "... (h d) -> ... h d". Each file is checked with
    qkv-tui --tensors FILE --layout torch --compare FILE --export json
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
N, D_MODEL, HEADS = 4, 8, 2
D_K = D_MODEL // HEADS


def attention(X: np.ndarray, W: dict[str, np.ndarray], mistake: str | None) -> dict[str, np.ndarray]:
    """The learner's forward pass, in float32 as PyTorch would run it, with ``mistake`` made where it is made."""
    q, k, v = (X @ W[name].T for name in ("W_Q", "W_K", "W_V"))
    if mistake == "k_v_swapped":
        k, v = v, k

    def split(x: np.ndarray) -> np.ndarray:  # (n, h·d) -> (h, n, d)
        if mistake == "head_order":
            return x.reshape(N, D_K, HEADS).transpose(2, 0, 1)  # "n (d h) -> h n d": the wrong order
        return x.reshape(N, HEADS, D_K).transpose(1, 0, 2)

    q, k, v = split(q), split(k), split(v)
    scores = q @ k.transpose(0, 2, 1)
    scaled = scores if mistake == "no_scale" else scores / np.float32(np.sqrt(D_K))
    mask = np.tril(np.ones((N, N), dtype=bool))
    axis = -2 if mistake == "softmax_axis" else -1

    def softmax(x: np.ndarray) -> np.ndarray:
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)

    masked = scaled if mistake == "mask_after_softmax" else np.where(mask, scaled, np.float32(-np.inf))
    attn = softmax(masked) * mask if mistake == "mask_after_softmax" else softmax(masked)
    out_heads = attn @ v
    merged = (out_heads.transpose(1, 2, 0) if mistake == "head_order" else out_heads.transpose(1, 0, 2)).reshape(N, -1)
    return {"scores": scores, "scaled": scaled, "attn": attn, "out": merged @ W["W_O"].T}


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """numpy.savez's format with a fixed timestamp: the same arrays give the same bytes."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for name, array in arrays.items():
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, np.ascontiguousarray(array), allow_pickle=False)
            archive.writestr(zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0)), buffer.getvalue())


def main(folder: Path = HERE) -> None:
    rng = np.random.default_rng(2026)
    X = rng.normal(size=(N, D_MODEL)).astype(np.float32)
    W = {name: (rng.normal(size=(D_MODEL, D_MODEL)) / np.sqrt(D_MODEL)).astype(np.float32)
         for name in ("W_Q", "W_K", "W_V", "W_O")}
    inputs = {"X": X, **W, "mask": np.tril(np.ones((N, N), dtype=bool)), "num_heads": np.array(HEADS)}
    for mistake in (None, "no_scale", "softmax_axis", "mask_after_softmax", "head_order", "k_v_swapped"):
        write_npz(folder / f"{mistake or 'correct'}.npz", {**inputs, **attention(X, W, mistake)})


if __name__ == "__main__":
    main()
