"""Hugging Face "diffllama" attention weights in the per-head form of ``[differential]`` (contracts §14).

transformers' DiffLlamaAttention keeps H query heads and KV key/value heads of head_dim columns each, and
pairs them across the halves: differential head p scores its first map with query head p and its second with
query head p + H/2; K/V head c's keys are heads c and c + KV/2, and its values the two side by side (the value
head c of width 2·head_dim). The paper's code lays each pair out next to each other instead (heads 2p and 2p + 1,
one 2·head_dim block per differential head and per K/V head). Either way, the per-head form is H/2 heads whose
W_Q, W_K and W_V are 2·head_dim wide, [first map | second map], and KV/2 K/V heads; the sharing rule of
contracts §7 then reads the same K/V head the model reads (query head p uses K/V head ⌊p·KV/H⌋ in both forms).

The concatenated head outputs are already in o_proj's column order (transformers reshapes the H/2 pairs of
2·head_dim back to H·head_dim), so W_O = o_projᵀ as it is. transformers keeps one set of λ vectors per layer;
every differential head gets the same row. Pure NumPy, so it is tested without reading a file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from qkv_tui.kernels.stats import Matrix

PAIRINGS = ("transformers", "paper")
DESCRIPTION = {
    "transformers": "differential heads paired as transformers' DiffLlama pairs them: query head i with head i + H/2",
    "paper": "differential heads paired as the paper's code pairs them: query heads 2i and 2i + 1",
}


@dataclass(frozen=True, eq=False)
class DiffLayout:
    """One layer's attention in the per-head form: num_heads differential heads, num_kv_heads K/V heads."""

    W_Q: tuple[Matrix, ...]  # per differential head, (d_model, 2d)
    W_K: tuple[Matrix, ...]  # per K/V head, (d_model, 2d)
    W_V: tuple[Matrix, ...]  # per K/V head, (d_model, 2d)
    b_Q: tuple[Matrix, ...] | None  # per differential head, (2d,); None without attention_bias
    b_K: tuple[Matrix, ...] | None
    b_V: tuple[Matrix, ...] | None
    lambda_q1: Matrix  # (num_heads, d)
    lambda_k1: Matrix
    lambda_q2: Matrix
    lambda_k2: Matrix
    num_heads: int  # H/2
    num_kv_heads: int  # KV/2
    description: str  # whose pairing it is, for the scenario's description

    @property
    def d(self) -> int:
        return int(self.W_Q[0].shape[1]) // 2


def pair_of(index: int, count: int, pairing: str) -> tuple[int, int]:
    """The two model heads (of ``count``, each head_dim wide) that differential head ``index`` joins, in map order."""
    if pairing == "transformers":
        return index, index + count // 2
    return 2 * index, 2 * index + 1


def _joined(W: Matrix, count: int, head_dim: int, pairing: str) -> tuple[Matrix, ...]:
    """W (d_model, count·head_dim) cut into count/2 blocks of 2·head_dim, each the two heads of a pair side by side."""
    out = []
    for i in range(count // 2):
        a, b = pair_of(i, count, pairing)
        block = np.concatenate([W[:, a * head_dim:(a + 1) * head_dim], W[:, b * head_dim:(b + 1) * head_dim]], axis=1)
        out.append(block)
    return tuple(out)


def _joined_bias(b: Matrix | None, count: int, head_dim: int, pairing: str) -> tuple[Matrix, ...] | None:
    if b is None:
        return None
    return tuple(block[0] for block in _joined(np.asarray(b, dtype=np.float64)[None, :], count, head_dim, pairing))


def diffllama_heads(q_proj: Matrix, k_proj: Matrix, v_proj: Matrix, lambdas: Sequence[Matrix], num_heads: int,
                    num_kv_heads: int, head_dim: int, *, biases: Sequence[Matrix | None] = (None, None, None),
                    pairing: str = "transformers") -> DiffLayout:
    """``q_proj``, ``k_proj``, ``v_proj``: the checkpoint's weights as stored, (out, in); ``lambdas`` its
    lambda_q1, lambda_k1, lambda_q2, lambda_k2 (head_dim each, one set for the layer); ``num_heads`` and
    ``num_kv_heads`` the config's H and KV (both even); ``biases`` the three projections' (out,) or None."""
    if pairing not in PAIRINGS:
        raise ValueError(f"pairing {pairing!r}; expected one of {PAIRINGS}")
    if num_heads % 2 or num_kv_heads % 2 or num_heads % num_kv_heads:
        raise ValueError(f"DiffLlama needs an even num_heads and num_key_value_heads, the second dividing the first;"
                         f" got {num_heads} and {num_kv_heads}")
    W = [np.asarray(w, dtype=np.float64).T for w in (q_proj, k_proj, v_proj)]  # (d_model, out)
    for what, M, count in zip(("q_proj", "k_proj", "v_proj"), W, (num_heads, num_kv_heads, num_kv_heads), strict=True):
        if M.shape[1] != count * head_dim:
            raise ValueError(f"{what} has {M.shape[1]} outputs; expected {count} heads × head_dim {head_dim}")
    heads = num_heads // 2
    rows = [np.repeat(np.asarray(v, dtype=np.float64).reshape(1, head_dim), heads, axis=0) for v in lambdas]
    bq, bk, bv = biases
    return DiffLayout(
        _joined(W[0], num_heads, head_dim, pairing), _joined(W[1], num_kv_heads, head_dim, pairing),
        _joined(W[2], num_kv_heads, head_dim, pairing),
        _joined_bias(bq, num_heads, head_dim, pairing), _joined_bias(bk, num_kv_heads, head_dim, pairing),
        _joined_bias(bv, num_kv_heads, head_dim, pairing),
        rows[0], rows[1], rows[2], rows[3], heads, num_kv_heads // 2, DESCRIPTION[pairing],
    )
