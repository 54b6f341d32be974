"""The one forward driver: every head of a scenario under a numeric policy (kernels/policy.py).

The engine runs it exactly (core/engine.py iter_heads, which adds the overflow checks), the by-hand page
runs it under ByHand (teach/handcalc.py compute_hand). The rules that hold across heads live here once:
query heads that read the same K/V head share its K and V, QK-norm over every head takes each token's
statistics over the whole projection, [deltanet]'s gates are worked for all heads at once, and [mla]'s
heads expand one shared latent. ``result_of`` is the one place a head's record is assembled.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from qkv_tui.core.scenario import Head, Matrix, Scenario
from qkv_tui.core.variants import QKNorm, Rope, Vector
from qkv_tui.kernels.attention import Attended, Forward, QKNormHead, Turn, head_forward, project
from qkv_tui.kernels.attention import frozen as _frozen
from qkv_tui.kernels.norm import Normed, normalise
from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.rope import angles_at
from qkv_tui.kernels.sharing import same_kv_weights
from qkv_tui.kernels.softmax import alibi_bias

if TYPE_CHECKING:  # [linear]'s, [deltanet]'s and [mla]'s kernels load with a scenario that has them
    from qkv_tui.kernels.deltanet import DeltaForward
    from qkv_tui.kernels.deltanet_parts import Around, AroundSpec
    from qkv_tui.kernels.linear import LinearForward, LinearSpec
    from qkv_tui.kernels.mla import MlaHead

@dataclass(frozen=True, eq=False)
class HeadResult:
    """One head's computation; every array is read-only."""

    name: str
    d_k: int
    d_v: int
    scale: float  # the divisor used
    scale_is_default: bool  # True when scale = sqrt(d_k) (shown as √d_k)
    W_Q: Matrix  # (d_model, d_k)
    W_K: Matrix  # (d_in, d_k)
    W_V: Matrix  # (d_in, d_v)
    Q: Matrix  # (n, d_k) X W_Q + b_Q, before any rotation
    K: Matrix  # (m, d_k)
    V: Matrix  # (m, d_v)
    scores: Matrix  # (n, m) Q_rot K_rotᵀ (Q Kᵀ without rope)
    scaled: Matrix  # (n, m) scores / scale, without the bias
    masked: Matrix  # (n, m) scaled + bias, -inf where the mask forbids: the softmax's input
    row_max: Matrix  # (n,) subtracted before exp: the row's max, or the sink where it is larger
    exps: Matrix  # (n, m) e^(masked - row_max); exactly 0 where masked
    row_sum: Matrix  # (n,) Σ exps, plus the sink's exponential where there is one
    weights: Matrix  # (n, m), rows sum to 1 (less than 1 with a sink)
    output: Matrix  # (n, d_v)
    kv_head: int = 0  # the K/V head whose K and V this head reads
    b_Q: Vector | None = None  # (d_k,)
    b_K: Vector | None = None  # (d_k,)
    b_V: Vector | None = None  # (d_v,)
    Q_rot: Matrix | None = None  # (n, d_k) Q rotated by position; None without rope
    K_rot: Matrix | None = None  # (m, d_k)
    bias: Matrix | None = None  # (n, m) ALiBi slope·(pos_j − pos_i); None without alibi
    slope: float | None = None  # the ALiBi slope of this head
    sink: float | None = None  # the sink's logit; None without a sink
    sink_exp: Matrix | None = None  # (n,) e^(sink − row_max), the part of each row sum the sink takes
    capped: Matrix | None = None  # (n, m) softcap·tanh(scaled / softcap), without the bias; None without a soft-cap
    softcap: float | None = None  # the cap c of this head
    Q_normed: Normed | None = None  # (n, d_k) Q after QK-norm, each row's mean square and root; None without
    K_normed: Normed | None = None  # (m, d_k)

    @property
    def Q_norm(self) -> Matrix | None:
        return None if self.Q_normed is None else self.Q_normed.X_norm

    @property
    def K_norm(self) -> Matrix | None:
        return None if self.K_normed is None else self.K_normed.X_norm

    @property
    def Q_turned(self) -> Matrix:
        """The Queries RoPE turns: normalised where the scenario has QK-norm."""
        return self.Q if self.Q_normed is None else self.Q_normed.X_norm

    @property
    def K_turned(self) -> Matrix:
        return self.K if self.K_normed is None else self.K_normed.X_norm
    W_G: Matrix | None = None  # (d_model, d_v) the output gate's weights; None without a gate
    gate_logit: Matrix | None = None  # (n, d_v) X̂·W_G, what the sigmoid reads
    gate: Matrix | None = None  # (n, d_v) σ(X̂·W_G)
    gated_output: Matrix | None = None  # (n, d_v) output ⊙ gate: what Concat joins
    linear: LinearForward | None = None  # [linear]: φ(Q), φ(K), the state S and z, both forms; None with the softmax
    deltanet: DeltaForward | None = None  # [deltanet]: q̂, k̂, g, β, the state S token by token; None with the softmax
    around: Around | None = None  # [deltanet]'s short convolution and gated output norm; None without
    mla: MlaHead | None = None  # [mla]: the latent's parts this head reads and the absorbed form; None without

    @property
    def joined(self) -> Matrix:
        """What Concat joins: the gated output where the head has a gate, else the output."""
        if self.around is not None and self.around.out_norm is not None:  # [deltanet]'s gated output norm
            return self.around.out_norm.out
        return self.output if self.gated_output is None else self.gated_output

    @property
    def Q_used(self) -> Matrix:
        """The Queries that are scored: normalised and rotated where the scenario says so."""
        return self.Q_turned if self.Q_rot is None else self.Q_rot

    @property
    def K_used(self) -> Matrix:
        return self.K_turned if self.K_rot is None else self.K_rot


def turn_of(rope: Rope | None, positions: tuple[int, ...] | None, d_k: int, policy: Policy = EXACT) -> Turn | None:
    """RoPE's cos and sin for every token's position, for heads of width d_k; None without rope."""
    if rope is None:
        return None
    assert positions is not None
    a = angles_at(rope.inv_freq(d_k), positions)  # (n, r/2): r = d_k unless partial
    factor = rope.attention_factor  # YaRN's: it multiplies cos and sin (so the scores carry it squared)
    if factor == 1.0:
        return Turn(np.cos(a), np.sin(a), rope.pairs(d_k))
    # by hand cos, sin and the factor are each written down rounded, then their products
    f = policy.worked(np.array(factor))
    cos, sin = policy.worked(np.cos(a)) * f, policy.worked(np.sin(a)) * f  # (n, r/2)
    return Turn(policy.worked(cos), policy.worked(sin), rope.pairs(d_k))


def qk_norms(sc: Scenario, X: Matrix, X_kv: Matrix, policy: Policy = EXACT) -> list[QKNormHead | None]:
    """Each head's QK-norm ([qk_norm]); over every head, each token's statistics are those of its whole
    projection, the heads' columns side by side (under the same policy as the heads' own)."""
    qk = sc.qk_norm
    if qk is None:
        return [None] * len(sc.heads)
    q_rows = k_rows = None
    if qk.over == "all":
        kv_heads = sorted({sc.kv_head(h): h for h in range(len(sc.heads))}.items())  # K/V head -> a query head reading it
        Q_all = np.concatenate([project(X, h.W_Q, h.b_Q, policy) for h in sc.heads], axis=1)  # (n, H·d_k)
        K_all = np.concatenate([project(X_kv, sc.heads[h].W_K, sc.heads[h].b_K, policy) for _, h in kv_heads], axis=1)
        q_rows = _row_stats(Q_all, qk, qk.gamma_q, policy)
        k_rows = _row_stats(K_all, qk, qk.gamma_k, policy)
    out: list[QKNormHead | None] = []
    for h, head in enumerate(sc.heads):
        gamma_q, gamma_k = qk.gammas(h, sc.kv_head(h), head.d_k)
        out.append(QKNormHead(gamma_q, gamma_k, qk.eps, q_rows, k_rows))
    return out


def _row_stats(M: Matrix, qk: QKNorm, gamma: Vector, policy: Policy) -> Normed:
    with np.errstate(over="ignore", invalid="ignore"):
        return normalise(policy, "rms", M, gamma[None, :], None, qk.eps)


def linear_spec(sc: Scenario) -> LinearSpec | None:
    if sc.linear is None:
        return None
    from qkv_tui.kernels.linear import LinearSpec

    return LinearSpec(sc.linear.feature, sc.linear.normalize)


def deltanet_gates(sc: Scenario, X_in: Matrix, policy: Policy = EXACT) -> tuple[Matrix, Matrix] | None:
    """[deltanet]'s g and β, (n, num_heads) each: as given, or computed from W_a, A_log, dt_bias and W_b."""
    dn = sc.deltanet
    if dn is None:
        return None
    g, beta = dn.g, dn.beta
    if g is None or beta is None:
        W_a = dn.W_a if dn.W_a is not None else np.zeros((X_in.shape[1], len(sc.heads)))
        # with g given, the g worked from zeros is discarded: only β is read from these
        A_log = dn.A_log if dn.A_log is not None else np.zeros(len(sc.heads))
        dt_bias = dn.dt_bias if dn.dt_bias is not None else np.zeros(len(sc.heads))
        from qkv_tui.kernels.deltanet import gates

        made_g, made_beta = gates(X_in, W_a, dn.W_b, A_log, dt_bias, policy)
        g = made_g if g is None else g
        beta = made_beta if beta is None else beta
    return g, beta


def around_spec(sc: Scenario, h: int) -> AroundSpec | None:
    """Head h's share of [deltanet]'s short convolution and gated output norm; None without either."""
    io = None if sc.deltanet is None else sc.deltanet.io
    if io is None:
        return None
    from qkv_tui.kernels.deltanet_parts import AroundSpec

    q, k, v, z = (None if cut is None else cut[h] for cut in (io.conv_q, io.conv_k, io.conv_v, io.W_Z))
    return AroundSpec(q, k, v, z, io.gamma_o, io.eps_o)


def run_heads(sc: Scenario, X_in: Matrix, policy: Policy = EXACT, *,
              exact: Sequence[HeadResult] | None = None) -> Iterator[HeadResult]:
    """Each head of ``sc`` in turn under ``policy``, from ``X_in`` (what the Query projection reads, normalised
    where the scenario says so). ``exact`` are the exact heads a by-hand run works again: each hand head divides
    by its exact head's divisor, adds its exact ALiBi bias (written down by the policy), and works its own K
    and V; without it, query heads that share a K/V head reuse its K and V (kept until the last head reading it)."""
    X_kv = sc.X_kv if sc.is_cross else X_in
    with np.errstate(over="ignore", invalid="ignore"):
        qk = qk_norms(sc, X_in, X_kv, policy)
    if sc.mla is not None:
        yield from _mla_heads(sc, X_in, policy, exact)
        return
    with np.errstate(over="ignore", invalid="ignore"):
        dn = deltanet_gates(sc, X_in, policy)
    linear = linear_spec(sc)
    kv_done: dict[int, HeadResult] = {}  # K/V head -> the first query head that computed it
    last_reader = {sc.kv_head(h): h for h in range(len(sc.heads))}  # a K/V head -> the last query head reading it
    for h, head in enumerate(sc.heads):
        kv = sc.kv_head(h)
        first = kv_done.get(kv)
        shared = first if first is not None and same_kv_weights(first, head) else None
        slope = sc.alibi.slopes[h] if sc.alibi is not None else None
        scale, bias = _scale_and_bias(sc, h, math.sqrt(head.d_k), exact)
        with np.errstate(over="ignore", invalid="ignore"):
            f = head_forward(X_in, X_kv, head.W_Q, head.W_K, head.W_V, head.b_Q, head.b_K, head.b_V, sc.allow, scale,
                             turn=turn_of(sc.rope, sc.positions, head.d_k, policy), bias=bias, sink=head.sink,
                             shared=shared, qk_norm=qk[h], policy=policy, softcap=head.softcap, W_G=head.W_G,
                             linear=linear, deltanet=None if dn is None else (dn[0][:, h], dn[1][:, h]),
                             around=around_spec(sc, h))
        # linear attention divides by no scale at all (its 1.0 is no √d_k)
        result = result_of(head, f.Q, f.K, f.V, f.attended, scale_is_default=sc.scale is None and linear is None,
                           kv_head=kv, slope=slope, forward=f)
        if exact is None and last_reader[kv] > h:  # kept only while a later query head still reads it
            kv_done.setdefault(kv, result)
        else:
            kv_done.pop(kv, None)
        yield result


def _scale_and_bias(sc: Scenario, h: int, default: float, exact: Sequence[HeadResult] | None) -> tuple[float, Matrix | None]:
    """Head h's divisor and ALiBi bias (n, n): the scenario's, or, worked again by hand, its exact head's."""
    if exact is not None:
        return exact[h].scale, exact[h].bias
    bias = None
    if sc.alibi is not None:
        assert sc.positions is not None
        bias = _frozen(alibi_bias(sc.alibi.slopes[h], sc.positions))  # (n, n)
    return default if sc.scale is None else sc.scale, bias


def _mla_heads(sc: Scenario, X_in: Matrix, policy: Policy, exact: Sequence[HeadResult] | None) -> Iterator[HeadResult]:
    """Every head of an [mla] scenario (kernels/mla.py): Q = [q_C | q_R] and K = [k_C | k_R] as scored,
    V = v_C, so the stages from Score on read them as any head's."""
    from qkv_tui.kernels.mla import mla_head, mla_shared

    mla = sc.mla
    assert mla is not None
    w = mla.weights()
    turn = turn_of(mla.rope, sc.positions, mla.d_rope, policy)
    with np.errstate(over="ignore", invalid="ignore"):
        shared = mla_shared(X_in, w, turn, policy)
    for h, head in enumerate(sc.heads):
        slope = sc.alibi.slopes[h] if sc.alibi is not None else None
        scale, bias = _scale_and_bias(sc, h, math.sqrt(mla.d_qk), exact)
        with np.errstate(over="ignore", invalid="ignore"):
            m = mla_head(shared, w, h, sc.allow, scale, turn, bias=bias, softcap=head.softcap, policy=policy)
        yield result_of(head, m.Q, m.K, m.v_C, m.attended, scale_is_default=sc.scale is None, kv_head=h, slope=slope,
                        mla=m)


def mla_results(sc: Scenario, X_in: Matrix, policy: Policy = EXACT) -> list[HeadResult]:
    """Every head of an [mla] scenario, exactly or by hand (the JSON export's latent parts read them)."""
    return list(_mla_heads(sc, X_in, policy, None))


def result_of(head: Head, Q: Matrix, K: Matrix, V: Matrix, a: Attended, *, scale_is_default: bool, kv_head: int,
              slope: float | None, forward: Forward | None = None, mla: MlaHead | None = None) -> HeadResult:
    """The one record of a head's forward pass: what every head has, and the parts its variants add."""
    soft = a.softmax
    common = dict(
        name=head.name, d_k=head.d_k, d_v=head.d_v, scale=a.divisor, scale_is_default=scale_is_default,
        W_Q=head.W_Q, W_K=head.W_K, W_V=head.W_V, Q=Q, K=K, V=V, scores=a.scores, scaled=a.scaled,
        masked=a.masked, row_max=soft.row_max, exps=soft.exps, row_sum=soft.row_sum, weights=soft.weights,
        output=a.output, kv_head=kv_head, bias=a.bias, slope=slope, capped=a.capped, softcap=head.softcap,
    )
    if forward is None:  # [mla]: the latent's heads have no biases, sink or gate of their own
        return HeadResult(**common, mla=mla)  # type: ignore[arg-type]
    f, g = forward, forward.gated
    return HeadResult(
        **common, b_Q=head.b_Q, b_K=head.b_K, b_V=head.b_V, Q_rot=f.Q_rot, K_rot=f.K_rot,  # type: ignore[arg-type]
        sink=head.sink, sink_exp=soft.sink_exp, Q_normed=f.Q_normed, K_normed=f.K_normed,
        W_G=head.W_G, gate_logit=None if g is None else g.logit, gate=None if g is None else g.gate,
        gated_output=None if g is None else g.gated, linear=f.linear, deltanet=f.deltanet, around=f.around,
    )
