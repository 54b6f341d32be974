"""One head's forward pass, softmax(Q Kᵀ / scale + bias) V, keeping every intermediate (docs/scenario-format.md,
"What is computed"): project, rotate, score, scale, add the bias, mask, softmax, mix."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from qkv_tui.kernels.gate import Gated, gate
from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.rope import rotate
from qkv_tui.kernels.softmax import SoftmaxRows, masked_logits, softmax_rows
from qkv_tui.kernels.stats import Matrix


@dataclass(frozen=True)
class Turn:
    """RoPE's turn for every row: the cos and sin of p·θᵢ (rows, d_k/2) and the pairs they turn."""

    cos: Matrix
    sin: Matrix
    pairs: Sequence[tuple[int, int]]


@dataclass(frozen=True, eq=False)
class Attended:
    """Everything from the scores on, for Queries and Keys as they are scored; every array read-only."""

    divisor: float  # what the scores were divided by
    scores: Matrix  # (n, m) Q_used K_usedᵀ
    scaled: Matrix  # (n, m) scores / divisor
    bias: Matrix | None  # (n, m) the ALiBi bias as kept
    masked: Matrix  # (n, m) scaled + bias, −∞ where the mask forbids
    softmax: SoftmaxRows
    output: Matrix  # (n, d_v) weights V


@dataclass(frozen=True, eq=False)
class Forward:
    """One head: the projections, their turned forms, and what was attended."""

    Q: Matrix  # (n, d_k)
    K: Matrix  # (m, d_k)
    V: Matrix  # (m, d_v)
    Q_rot: Matrix | None  # (n, d_k); None without rope
    K_rot: Matrix | None  # (m, d_k)
    attended: Attended
    gated: Gated | None = None  # the output gate's sigmoid and gated output; None without a gate


def frozen(array: Matrix) -> Matrix:
    array.setflags(write=False)
    return array


def project(X: Matrix, W: Matrix, b: Matrix | None, policy: Policy = EXACT) -> Matrix:
    """X W + b: (rows, width)."""
    out = policy.matmul(X, W)  # (rows, width)
    return policy.table(out if b is None else out + b[None, :])


def attend(Q: Matrix, K: Matrix, V: Matrix, allow: np.ndarray, scale: float, bias: Matrix | None = None,
           sink: float | None = None, policy: Policy = EXACT) -> Attended:
    """softmax(Q Kᵀ / scale + bias) V for Queries (n, d_k) and Keys (m, d_k) as scored, Values (m, d_v)."""
    divisor = policy.divisor(scale)
    scores = policy.table(policy.matmul(Q, K.T))  # (n, m)
    scaled = policy.worked(scores / divisor)  # (n, m)
    kept_bias = None if bias is None else policy.worked(bias)  # (n, m)
    masked = masked_logits(scaled, allow, kept_bias, policy)  # (n, m)
    soft = softmax_rows(masked, sink, policy)
    output = policy.table(policy.matmul(soft.weights, V))  # (n, d_v)
    for a in (scores, scaled, masked, soft.row_max, soft.exps, soft.row_sum, soft.weights, output):
        frozen(a)
    if soft.sink_exp is not None:
        frozen(soft.sink_exp)
    if kept_bias is not None and kept_bias is not bias:  # the caller's own array is the caller's to freeze
        frozen(kept_bias)
    return Attended(divisor, scores, scaled, kept_bias, masked, soft, output)


def head_forward(X: Matrix, X_kv: Matrix, W_Q: Matrix, W_K: Matrix, W_V: Matrix, b_Q: Matrix | None,
                 b_K: Matrix | None, b_V: Matrix | None, allow: np.ndarray, scale: float, *,
                 turn: Turn | None = None, bias: Matrix | None = None, sink: float | None = None,
                 shared: tuple[Matrix, Matrix, Matrix | None] | None = None, policy: Policy = EXACT,
                 W_G: Matrix | None = None) -> Forward:
    """One head. ``X`` is what the Query projection reads (already normalised), ``X_kv`` what the Keys and
    Values read; ``shared`` hands over the K, V and turned K of a K/V head computed for an earlier query head."""
    Q = frozen(project(X, W_Q, b_Q, policy))  # (n, d_k)
    if shared is None:
        K = frozen(project(X_kv, W_K, b_K, policy))  # (m, d_k)
        V = frozen(project(X_kv, W_V, b_V, policy))  # (m, d_v)
        K_rot = None if turn is None else frozen(rotate(K, turn.cos, turn.sin, turn.pairs, policy))
    else:
        K, V, K_rot = shared
    Q_rot = None if turn is None else frozen(rotate(Q, turn.cos, turn.sin, turn.pairs, policy))
    attended = attend(Q if Q_rot is None else Q_rot, K if K_rot is None else K_rot, V, allow, scale, bias, sink, policy)
    # the gate reads X̂ (what the Query projection reads) and scales the head's output, after Mix
    gated = None if W_G is None else gate(X, W_G, attended.output, policy)
    return Forward(Q, K, V, Q_rot, K_rot, attended, gated)
