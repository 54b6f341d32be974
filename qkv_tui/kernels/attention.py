"""One head's forward pass, softmax(Q Kᵀ / scale + bias) V, keeping every intermediate (docs/scenario-format.md,
"What is computed"): project, QK-norm, rotate, score, scale, add the bias, mask, softmax, mix."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from qkv_tui.kernels.gate import Gated, gate
from qkv_tui.kernels.norm import Normed, normalise
from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.rope import rotate
from qkv_tui.kernels.softmax import SoftmaxRows, masked_logits, soft_cap, softmax_rows
from qkv_tui.kernels.stats import Matrix

if TYPE_CHECKING:  # [linear]'s and [deltanet]'s kernels load with a scenario that has them
    from qkv_tui.kernels.deltanet import DeltaForward
    from qkv_tui.kernels.deltanet_parts import Around, AroundSpec
    from qkv_tui.kernels.linear import LinearForward, LinearSpec


@dataclass(frozen=True)
class Turn:
    """RoPE's turn for every row: the cos and sin of p·θᵢ (rows, d_k/2) and the pairs they turn."""

    cos: Matrix
    sin: Matrix
    pairs: Sequence[tuple[int, int]]


class SharedKV(Protocol):
    """A K/V head already computed for an earlier query head: its Keys (as projected, normalised, turned) and Values."""

    @property
    def K(self) -> Matrix: ...

    @property
    def V(self) -> Matrix: ...

    @property
    def K_rot(self) -> Matrix | None: ...

    @property
    def K_normed(self) -> Normed | None: ...


@dataclass(frozen=True, eq=False)
class QKNormHead:
    """QK-norm for one head: the gains of its Q and of its K/V head's K, and, where the norm runs over every
    head's columns together, each row's statistics over the whole projection (None: over the head's d_k)."""

    gamma_q: Matrix  # (d_k,)
    gamma_k: Matrix  # (d_k,)
    eps: float
    q_rows: Normed | None = None  # (n,) statistics of each token's whole query projection
    k_rows: Normed | None = None  # (m,) statistics of each token's whole key projection


@dataclass(frozen=True, eq=False)
class Attended:
    """Everything from the scores on, for Queries and Keys as they are scored; every array read-only."""

    divisor: float  # what the scores were divided by
    scores: Matrix  # (n, m) Q_used K_usedᵀ
    scaled: Matrix  # (n, m) scores / divisor
    bias: Matrix | None  # (n, m) the ALiBi bias as kept
    masked: Matrix  # (n, m) scaled (capped) + bias, −∞ where the mask forbids
    softmax: SoftmaxRows
    output: Matrix  # (n, d_v) weights V
    capped: Matrix | None = None  # (n, m) softcap·tanh(scaled / softcap); None without a soft-cap


@dataclass(frozen=True, eq=False)
class Forward:
    """One head: the projections, their turned forms, and what was attended."""

    Q: Matrix  # (n, d_k)
    K: Matrix  # (m, d_k)
    V: Matrix  # (m, d_v)
    Q_rot: Matrix | None  # (n, d_k); None without rope
    K_rot: Matrix | None  # (m, d_k)
    attended: Attended
    Q_normed: Normed | None = None  # (n, d_k) Q after QK-norm, with each row's mean square and root; None without
    K_normed: Normed | None = None  # (m, d_k)
    gated: Gated | None = None  # the output gate's sigmoid and gated output; None without a gate
    linear: LinearForward | None = None  # [linear]'s two forms; None with the softmax
    deltanet: DeltaForward | None = None  # [deltanet]'s gated delta rule; None with the softmax
    around: Around | None = None  # [deltanet]'s short convolution and gated output norm; None without


def frozen(array: Matrix) -> Matrix:
    array.setflags(write=False)
    return array


def project(X: Matrix, W: Matrix, b: Matrix | None, policy: Policy = EXACT) -> Matrix:
    """X W + b: (rows, width)."""
    out = policy.matmul(X, W)  # (rows, width)
    return policy.table(out if b is None else out + b[None, :])


def attend(Q: Matrix, K: Matrix, V: Matrix, allow: np.ndarray, scale: float, bias: Matrix | None = None,
           sink: float | None = None, policy: Policy = EXACT, softcap: float | None = None) -> Attended:
    """softmax(Q Kᵀ / scale + bias) V for Queries (n, d_k) and Keys (m, d_k) as scored, Values (m, d_v);
    with ``softcap`` the scaled scores are soft-capped before the bias and the mask."""
    divisor = policy.divisor(scale)
    scores = policy.table(policy.matmul(Q, K.T))  # (n, m)
    scaled = policy.worked(scores / divisor)  # (n, m)
    capped = None if softcap is None else frozen(soft_cap(scaled, softcap, policy))  # (n, m)
    kept_bias = None if bias is None else policy.worked(bias)  # (n, m)
    masked = masked_logits(scaled if capped is None else capped, allow, kept_bias, policy)  # (n, m)
    soft = softmax_rows(masked, sink, policy)
    output = policy.table(policy.matmul(soft.weights, V))  # (n, d_v)
    for a in (scores, scaled, masked, soft.row_max, soft.exps, soft.row_sum, soft.weights, output):
        frozen(a)
    if soft.sink_exp is not None:
        frozen(soft.sink_exp)
    if kept_bias is not None and kept_bias is not bias:  # the caller's own array is the caller's to freeze
        frozen(kept_bias)
    return Attended(divisor, scores, scaled, kept_bias, masked, soft, output, capped)


def head_forward(X: Matrix, X_kv: Matrix, W_Q: Matrix, W_K: Matrix, W_V: Matrix, b_Q: Matrix | None,
                 b_K: Matrix | None, b_V: Matrix | None, allow: np.ndarray, scale: float, *,
                 turn: Turn | None = None, bias: Matrix | None = None, sink: float | None = None,
                 shared: SharedKV | None = None, qk_norm: QKNormHead | None = None,
                 policy: Policy = EXACT, softcap: float | None = None, W_G: Matrix | None = None,
                 linear: LinearSpec | None = None, deltanet: tuple[Matrix, Matrix] | None = None,
                 around: AroundSpec | None = None) -> Forward:
    """One head. ``X`` is what the Query projection reads (already normalised), ``X_kv`` what the Keys and
    Values read; ``shared`` is the forward of an earlier query head reading the same K/V head, whose K, V
    (normalised and turned) this one reuses."""
    Q = frozen(project(X, W_Q, b_Q, policy))  # (n, d_k)
    Q_normed = None if qk_norm is None else qk_normalise(Q, qk_norm.gamma_q, qk_norm.eps, qk_norm.q_rows, policy)
    if shared is None:
        K = frozen(project(X_kv, W_K, b_K, policy))  # (m, d_k)
        V = frozen(project(X_kv, W_V, b_V, policy))  # (m, d_v)
        K_normed = None if qk_norm is None else qk_normalise(K, qk_norm.gamma_k, qk_norm.eps, qk_norm.k_rows, policy)
        K_in = K if K_normed is None else K_normed.X_norm  # (m, d_k) what RoPE turns
        K_rot = None if turn is None else frozen(rotate(K_in, turn.cos, turn.sin, turn.pairs, policy))
    else:
        K, V, K_rot, K_normed = shared.K, shared.V, shared.K_rot, shared.K_normed
    Q_in = Q if Q_normed is None else Q_normed.X_norm  # (n, d_k)
    Q_rot = None if turn is None else frozen(rotate(Q_in, turn.cos, turn.sin, turn.pairs, policy))
    K_used = K_rot if K_rot is not None else K if K_normed is None else K_normed.X_norm
    if linear is not None or deltanet is not None:
        from qkv_tui.kernels.deltanet import deltanet_forward
        from qkv_tui.kernels.deltanet_parts import Around, convolve, norm_out
        from qkv_tui.kernels.linear import linear_forward
    lin = None if linear is None else linear_forward(Q_in if Q_rot is None else Q_rot, K_used, V, allow, linear, policy)
    conv = None if around is None or deltanet is None else convolve(around, Q_in, K_used, V, policy)
    q_dn, k_dn, v_dn = (Q_in if Q_rot is None else Q_rot, K_used, V) if conv is None else (c.out for c in conv)
    delta = None if deltanet is None else deltanet_forward(q_dn, k_dn, v_dn, *deltanet, policy=policy)
    done = None if around is None or delta is None else Around(conv, norm_out(around, X, delta.output, policy))
    if lin is not None:
        attended = as_attended(lin, allow)
    elif delta is not None:
        attended = delta_attended(delta, allow)
    else:
        attended = attend(Q_in if Q_rot is None else Q_rot, K_used, V, allow, scale, bias, sink, policy, softcap)
    # the gate reads X̂ (what the Query projection reads) and scales the head's output, after Mix
    gated = None if W_G is None else gate(X, W_G, attended.output, policy)
    return Forward(Q, K, V, Q_rot, K_rot, attended, Q_normed, K_normed, gated=gated, linear=lin, deltanet=delta,
                   around=done)


def as_attended(lin: LinearForward, allow: np.ndarray) -> Attended:
    """Linear attention's quadratic form in the softmax's places, so that Mix, Concat and the exports read it
    as they read a softmax head: its scores, the masked scores (−∞ where the mask forbids, as every masked
    input is kept), the masked scores again as the row's terms, each row's sum and the divided weights."""
    logits = frozen(np.where(allow, lin.scores, -np.inf))  # (n, n)
    row_max = frozen(np.zeros(len(lin.row_sum)))  # (n,) nothing is subtracted: φ(q)·φ(k) is never exponentiated
    return Attended(1.0, lin.scores, lin.scores, None, logits,
                    SoftmaxRows(row_max, lin.masked, lin.row_sum, lin.weights, None), lin.output)


def delta_attended(dn: DeltaForward, allow: np.ndarray) -> Attended:
    """The gated delta rule in the softmax's places: scores q̂·k̂ᵀ, and as weights those scores times the
    decaying causal mask, which weigh the corrections δ (not V) into the output."""
    from qkv_tui.kernels.deltanet import decay_mask

    scores = frozen(dn.q @ dn.k.T)  # (n, n)
    weighted = scores * decay_mask(dn.g)  # (n, n) 0 above the diagonal
    weights = frozen(np.where(allow, weighted, 0.0))
    logits = frozen(np.where(allow, weighted, -np.inf))
    n = len(dn.g)
    return Attended(1.0, scores, scores, None, logits,
                    SoftmaxRows(frozen(np.zeros(n)), weights, frozen(np.ones(n)), weights, None), dn.output)


def qk_normalise(M: Matrix, gamma: Matrix, eps: float, rows: Normed | None, policy: Policy = EXACT) -> Normed:
    """RMSNorm of each row of Q or K (rows, d_k): over the row itself, or with the statistics of the whole
    projection it was cut from (``rows``)."""
    done = normalise(policy, "rms", M, gamma[None, :], None, eps, rows)
    for a in (done.X_norm, done.spread, done.root):
        frozen(a)
    return done
