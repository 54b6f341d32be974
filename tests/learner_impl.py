"""A learner's multi-head attention, written the way course solutions write it (CS336's conventions: weights
as nn.Linear stores them, out × in; a boolean mask, True = attend), with each known mistake as a learner
makes it. Written independently of qkv_tui/core/diagnose.py: the tests hold that module's diagnosis
against numbers this file computes, so the two must not share code.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Case:
    X: np.ndarray  # (n, d_model)
    W_Q: np.ndarray  # (H·d_k, d_model), nn.Linear's layout
    W_K: np.ndarray
    W_V: np.ndarray
    W_O: np.ndarray | None  # (d_model, H·d_v)
    heads: int
    causal: bool = True
    rope_theta: float | None = None
    dtype: type = np.float64
    fill: float = -np.inf  # what masked scores become: -inf, or -1e9 as many solutions write
    bugs: frozenset[str] = field(default_factory=frozenset)


def make_case(seed: int, n: int = 4, d_model: int = 8, heads: int = 2, W_O: bool = True, scale: float = 1.0,
              **kw: object) -> Case:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d_model)) * scale
    Ws = [rng.normal(size=(d_model, d_model)) / np.sqrt(d_model) for _ in range(4)]
    return Case(X, Ws[0], Ws[1], Ws[2], Ws[3] if W_O else None, heads, **kw)  # type: ignore[arg-type]


def _rope(x: np.ndarray, theta: float, half: bool) -> np.ndarray:
    """x: (heads, n, d). Interleaved (CS336, GPT-J): pairs (2i, 2i+1); half (Llama's rotate_half): (i, i + d/2)."""
    _, n, d = x.shape
    freqs = theta ** (-np.arange(0, d, 2) / d)  # (d/2,)
    ang = np.arange(n)[:, None] * freqs[None, :]  # (n, d/2)
    cos, sin = np.cos(ang), np.sin(ang)
    if half:
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x1 * cos - x2 * sin
    out[..., 1::2] = x1 * sin + x2 * cos
    return out


def run(case: Case) -> dict[str, np.ndarray]:
    """scores, scaled, attn (heads, n, n) and out (n, d_model): what a learner would save."""
    b = case.bugs
    t = case.dtype
    X = case.X.astype(t)
    n, d_model = X.shape
    H = case.heads

    def linear(x: np.ndarray, w: np.ndarray, name: str) -> np.ndarray:
        w = w.astype(t)
        return x @ w if f"transposed_{name}" in b else x @ w.T

    q, k, v = linear(X, case.W_Q, "W_Q"), linear(X, case.W_K, "W_K"), linear(X, case.W_V, "W_V")
    if "k_v_swapped" in b:
        k, v = v, k
    d_k = q.shape[-1] // H

    def heads_of(x: np.ndarray) -> np.ndarray:  # (n, H·d) -> (H, n, d)
        if "head_order" in b:  # einops "n (d h) -> h n d"
            return x.reshape(n, d_k, H).transpose(2, 0, 1)
        return x.reshape(n, H, d_k).transpose(1, 0, 2)

    q, k, v = heads_of(q), heads_of(k), heads_of(v)
    if case.rope_theta is not None:
        q = _rope(q, case.rope_theta, "rope_layout" in b)
        k = _rope(k, case.rope_theta, "rope_layout" in b)
    scores = np.matmul(q, k) if "k_not_transposed" in b else np.einsum("hqd,hkd->hqk", q, k)
    if "no_scale" in b:
        scaled = scores
    elif "scale_d_model" in b:
        scaled = scores / float(np.sqrt(d_model))  # a Python float keeps float32 float32
    elif "scale_d_k" in b:
        scaled = scores / float(d_k)
    else:
        scaled = scores / float(np.sqrt(d_k))
    mask = np.ones((n, n), dtype=bool)
    if case.causal:
        mask = ~np.triu(np.ones((n, n), dtype=bool), k=2 if "causal_off_by_one" in b else 1)
    axis = -2 if "softmax_axis" in b else -1

    def softmax(x: np.ndarray) -> np.ndarray:
        shift = 0 if "softmax_overflow" in b else np.max(x, axis=axis, keepdims=True)
        e = np.exp(x - shift)
        return e / np.sum(e, axis=axis, keepdims=True)

    with np.errstate(over="ignore", invalid="ignore"):
        if "mask_after_softmax" in b:
            attn = softmax(scaled) * mask
        elif "mask_fill_zero" in b:
            attn = softmax(np.where(mask, scaled, t(0)))
        else:
            attn = softmax(np.where(mask, scaled, t(case.fill)))
    out_h = attn @ v  # (H, n, d)
    # "h n d -> n (d h)" with the mistake, "h n d -> n (h d)" without
    merged = out_h.transpose((1, 2, 0) if "head_order" in b else (1, 0, 2)).reshape(n, -1)
    out = merged if case.W_O is None else linear(merged, case.W_O, "W_O")
    return {"scores": scores, "scaled": scaled, "attn": attn, "out": out}


def save(case: Case, path: str, with_mask: bool = True, **extra: np.ndarray) -> None:
    """The inputs and the learner's results in one .npz, as the docs page asks learners to save them."""
    arrays = {"X": case.X.astype(case.dtype), "W_Q": case.W_Q.astype(case.dtype), "W_K": case.W_K.astype(case.dtype),
              "W_V": case.W_V.astype(case.dtype), "num_heads": np.array(case.heads), **run(case), **extra}
    if case.W_O is not None:
        arrays["W_O"] = case.W_O.astype(case.dtype)
    n = case.X.shape[0]
    if with_mask and case.causal:
        arrays["mask"] = np.tril(np.ones((n, n), dtype=bool))
    if case.rope_theta is not None:
        arrays["rope_theta"] = np.array(case.rope_theta)
    np.savez(path, **arrays)
