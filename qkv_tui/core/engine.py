"""Every matrix of softmax(Q Kᵀ / scale + bias) V for a scenario, in plain NumPy.

Follows docs/scenario-format.md, "What is computed", line by line: X is normalised first where the
scenario has a [norm]; per head Q = X W_Q + b_Q, K = X_kv W_K + b_K, V = X_kv W_V + b_V;
[qk_norm] normalises each query and key vector; RoPE rotates Q and K by position;
scores = Q Kᵀ, scaled = scores / scale; the softmax's input is scaled + ALiBi bias with -inf where
the mask forbids; weights = stable row softmax (with an attention sink joining each row's sum),
output = weights V; then concat, W_O + b_O.
Query heads that share a K/V head (grouped-query attention) share its K and V arrays.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

import numpy as np

from qkv_tui.base.values import escaped
from qkv_tui.core.scenario import BoolMatrix, Head, Matrix, Scenario, ScenarioError
from qkv_tui.core.variants import Norm, QKNorm, Rope, Vector
from qkv_tui.kernels.attention import Forward, QKNormHead, Turn, head_forward, project
from qkv_tui.kernels.attention import frozen as _frozen
from qkv_tui.kernels.norm import Normed, normalise
from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.rope import angles_at
from qkv_tui.kernels.rope import rotate as rotate_kernel
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


@dataclass(frozen=True, eq=False)
class NormResult:
    """X normalised row by row, with the per-token statistics the trace shows."""

    X_norm: Matrix  # (n, d_model)
    mean: Matrix  # (n,) mean of the row (layer), or 0 (rms)
    spread: Matrix  # (n,) mean of squares (rms) or population variance (layer)
    root: Matrix  # (n,) √(spread + eps), what each centred cell is divided by


@dataclass(frozen=True, eq=False)
class Computation:
    """The whole computation of a scenario (the JSON export is its plain-data form)."""

    scenario: Scenario
    heads: tuple[HeadResult, ...]
    concat: Matrix  # (n, sum d_v)
    W_O: Matrix | None  # (sum d_v, d_out)
    output: Matrix  # (n, d_out) = concat W_O + b_O, or concat
    hand_decimals: int | None = None  # set when every intermediate was rounded (handcalc), else exact
    norm: NormResult | None = None  # set when the scenario has a [norm]
    b_O: Vector | None = None  # (d_out,)

    @property
    def allow(self) -> BoolMatrix:
        return self.scenario.allow

    @property
    def X_in(self) -> Matrix:
        """What the Query projection reads: X, normalised where the scenario says so."""
        return self.scenario.X if self.norm is None else self.norm.X_norm

    @property
    def X_kv_in(self) -> Matrix:
        """What the Key and Value projections read: the context as given, or X_in."""
        return self.scenario.X_kv if self.scenario.is_cross else self.X_in


def normalize(norm: Norm, X: Matrix, policy: Policy = EXACT) -> NormResult:
    """RMSNorm x / √(mean(x²) + eps) · γ, or LayerNorm (x − mean) / √(var + eps) · γ + β (kernels/norm.py)."""
    done = normalise(policy, norm.kind, X, norm.gamma[None, :], None if norm.beta is None else norm.beta[None, :],
                     norm.eps)
    return NormResult(*(_frozen(a) for a in (done.X_norm, done.mean, done.spread, done.root)))


def rotate(M: Matrix, rope: Rope, positions: tuple[int, ...]) -> Matrix:
    """RoPE: each pair (a, b) of a row at position p turns by p·θ_i (docs/scenario-format.md, `[rope]`)."""
    t = turn_of(rope, positions, M.shape[1])
    assert t is not None
    return rotate_kernel(M, t.cos, t.sin, t.pairs)


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


def compute_head(
    head: Head,
    X: Matrix,
    X_kv: Matrix,
    allow: BoolMatrix,
    scale: float | None,
    *,
    rope: Rope | None = None,
    positions: tuple[int, ...] | None = None,
    slope: float | None = None,
    kv_head: int = 0,
    shared: HeadResult | None = None,
    qk_norm: QKNormHead | None = None,
    linear: LinearSpec | None = None,
    deltanet: tuple[Matrix, Matrix] | None = None,
    around: AroundSpec | None = None,
) -> HeadResult:
    """One head (kernels/attention.py). ``X`` is what the Query projection reads (already normalised); ``shared``
    is an earlier query head reading the same K/V head, whose K and V this one reuses."""
    bias = None
    if slope is not None:
        assert positions is not None
        bias = _frozen(alibi_bias(slope, positions))  # (n, n)
    f = head_forward(X, X_kv, head.W_Q, head.W_K, head.W_V, head.b_Q, head.b_K, head.b_V, allow,
                     math.sqrt(head.d_k) if scale is None else scale, turn=turn_of(rope, positions, head.d_k),
                     bias=bias, sink=head.sink, shared=shared, qk_norm=qk_norm, softcap=head.softcap, W_G=head.W_G,
                     linear=linear, deltanet=deltanet, around=around)
    # linear attention divides by no scale at all (its 1.0 is no √d_k)
    return result_of(head, f, scale is None and linear is None, slope, kv_head)


def result_of(head: Head, f: Forward, scale_is_default: bool, slope: float | None, kv_head: int) -> HeadResult:
    """The engine's record of a head's forward pass."""
    a, soft = f.attended, f.attended.softmax
    return HeadResult(
        name=head.name, d_k=head.d_k, d_v=head.d_v, scale=a.divisor, scale_is_default=scale_is_default,
        W_Q=head.W_Q, W_K=head.W_K, W_V=head.W_V, Q=f.Q, K=f.K, V=f.V, scores=a.scores, scaled=a.scaled,
        masked=a.masked, row_max=soft.row_max, exps=soft.exps, row_sum=soft.row_sum, weights=soft.weights,
        output=a.output, kv_head=kv_head, b_Q=head.b_Q, b_K=head.b_K, b_V=head.b_V, Q_rot=f.Q_rot, K_rot=f.K_rot,
        bias=a.bias, slope=slope, sink=head.sink, sink_exp=soft.sink_exp, Q_normed=f.Q_normed, K_normed=f.K_normed,
        capped=a.capped, softcap=head.softcap, **gate_fields(head.W_G, f), linear=f.linear,
        deltanet=f.deltanet, around=f.around,
    )


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


class GateFields(TypedDict):
    W_G: Matrix | None
    gate_logit: Matrix | None
    gate: Matrix | None
    gated_output: Matrix | None


def gate_fields(W_G: Matrix | None, f: Forward) -> GateFields:
    """The output gate's HeadResult fields from a forward pass (all None without a gate)."""
    g = f.gated
    return GateFields(W_G=W_G, gate_logit=None if g is None else g.logit, gate=None if g is None else g.gate,
                      gated_output=None if g is None else g.gated)


# --- the one overflow rule ---------------------------------------------------------------------
#
# Every command (--check, each --export, the app, its edits and reloads) gets its numbers from
# norm_of, iter_heads and combine below, so this is the one place that decides what float64 can
# compute: a matrix with an infinite or undefined entry is refused with a line that names it, the
# row where it first happens and what to change. What it lets through is finite everywhere (masked
# cells are −∞ by design, and only there), so every export and every arithmetic line can show it.

class ComputeError(ScenarioError):
    """The rule's refusal, with what went past float64 (``fact``: the matrix and its row) apart from what to
    change (``hint``): a caller that knows more of where the numbers came from (a training step) names the
    input to change in the hint's place."""

    def __init__(self, source: str, fact: str, hint: str) -> None:
        super().__init__(source, f"{fact}; {hint}")
        self.fact, self.hint = escaped(fact), escaped(hint)


_NORM_HINTS = {
    "mean": "expected values whose sum stays within float64 (about ±1.8e308)",
    "mean square": "expected values below about 1.3e154 in size, whose squares float64 can hold",
    "variance": "expected values closer together (their distances from the mean square past float64)",
    "root": "expected a smaller eps (the mean square plus eps is past float64)",
    "X_norm": "expected a smaller gamma or beta",
}
_HEAD_HINTS = {
    "Q": "expected smaller X, W_Q or b_Q", "K": "expected smaller X, W_K or b_K",
    "V": "expected smaller X, W_V or b_V", "Q_rot": "expected smaller Q", "K_rot": "expected smaller K",
    "Q_norm": "expected a smaller gamma_q in [qk_norm], or Q whose squares float64 can hold",
    "K_norm": "expected a smaller gamma_k in [qk_norm], or K whose squares float64 can hold",
    "scores": "expected smaller Q and K, so that every product stays finite",
    "scaled": "expected a larger scale or smaller scores",
    "capped": "expected a larger scale or smaller scores (the soft-cap reads scores / scale)",
    "bias": "expected a smaller ALiBi slope (the bias is slope·(j − i))",
    "masked": "expected a smaller ALiBi slope or smaller scaled scores (the softmax reads their sum)",
    "weights": "expected smaller scores",
    "output": "expected smaller V",
}


def first_bad(array: Matrix, where: BoolMatrix | None = None) -> tuple[int, ...] | None:
    """The index of the first entry that is not finite (among ``where``), or None."""
    bad = ~np.isfinite(array)
    if where is not None:
        bad &= where
    if not bad.any():
        return None
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), bad.shape))


def _at(labels: tuple[str, ...], i: int) -> str:
    return f'row {i + 1} ("{labels[i]}")'


def norm_of(scenario: Scenario) -> NormResult | None:
    """The scenario's [norm] applied to X; raises ScenarioError where a statistic or X_norm overflows."""
    if scenario.norm is None:
        return None
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        norm = normalize(scenario.norm, scenario.X)
    spread = "mean square" if scenario.norm.kind == "rms" else "variance"
    for what, array in (("mean", norm.mean), (spread, norm.spread), ("root", norm.root), ("X_norm", norm.X_norm)):
        if (bad := first_bad(array)) is not None:
            raise ComputeError(scenario.source, f"[norm]: the {what} of X {_at(scenario.tokens, bad[0])} overflows float64",
                           _NORM_HINTS[what])
    return norm


def check_head(sc: Scenario, result: HeadResult, h: int) -> None:
    """Refuse head h with a value float64 cannot hold: ScenarioError naming the matrix, row and remedy.
    Matrices are looked at in the order they are computed, so the one named is the first past float64 and
    its hint names the inputs it is made of (a later matrix would blame inputs that did nothing wrong)."""
    if result.mla is not None:
        mla_check(sc, result)
    _check_matrices(sc, result, ("Q", "K", "V", "Q_norm", "K_norm", "Q_rot", "K_rot"))
    linear_check(sc, result, h)  # before the weights: a zero denominator would read as an overflow of them
    _check_matrices(sc, result, ("scores", "scaled", "capped", "bias", "masked", "weights", "output"))
    # the gate's logit X̂·W_G (its sigmoid and the gated output stay finite wherever the logit is)
    if result.gate_logit is not None and (bad := first_bad(result.gate_logit)) is not None:
        raise ComputeError(sc.source, f"{result.name}: values in the gate's X̂·W_G overflow float64 at {_at(sc.tokens, bad[0])}",
                       "expected smaller X or W_G")


def _check_matrices(sc: Scenario, result: HeadResult, names: tuple[str, ...]) -> None:
    keys = sc.key_tokens
    for name in names:
        array = getattr(result, name)
        if array is None:
            continue
        # masked cells of the softmax's input are −∞ by design; an infinity where the mask allows is an overflow
        bad = first_bad(array, sc.allow if name == "masked" else None)
        if bad is None:
            continue
        where = _at(keys if name in ("K", "V", "K_norm", "K_rot") else sc.tokens, bad[0])
        if name in ("scores", "scaled", "capped", "bias", "masked", "weights"):
            where += f', key "{keys[bad[1]]}"'
        hint = _HEAD_HINTS[name] if result.mla is None else _MLA_HINTS.get(name, _HEAD_HINTS[name])
        if name == "Q" and sc.mla is not None and sc.mla.W_Q is None:  # the query's latent, not a W_Q the file lacks
            hint = "expected smaller W_UQ or c_Q = X̂·W_DQ (smaller X or W_DQ)"
        if name == "scores" and sc.qk_norm is not None:  # the normalised vectors' size is the gains'
            hint = "expected smaller [qk_norm] gains (gamma_q, gamma_k), so that every product stays finite"
        a = 1.0 if sc.rope is None else sc.rope.attention_factor
        if name in ("Q_rot", "K_rot", "scores") and a != 1.0:  # YaRN's a multiplies cos and sin: it, not Q, may be huge
            carried = "multiplies cos and sin" if name != "scores" else "multiplies cos and sin, so the scores carry a²"
            hint = (f"expected a smaller [rope.scaling] attention_factor (a = {a:g} {carried}) or "
                    + hint.removeprefix("expected "))
        raise ComputeError(sc.source, f"{result.name}: values in {name} overflow float64 at {where}", hint)


# [mla]'s heads have no W_Q, W_K or W_V of their own to blame: their Q, K and V come from the latent layer
_MLA_HINTS = {
    "Q": "expected smaller X or W_Q",
    "K": "expected smaller W_UK or c_KV = X̂·W_DKV (the no-position part), or X or W_KR (the rotary part)",
    "V": "expected smaller W_UV or c_KV = X̂·W_DKV (smaller X or W_DKV)",
}


def mla_check(sc: Scenario, result: HeadResult) -> None:
    """The latent layer's own matrices, before the heads' Q, K and V they make: the first that overflows is named."""
    assert result.mla is not None
    shared = result.mla.shared
    parts = (("c_KV = X̂·W_DKV", shared.c_KV_raw, "expected smaller X or W_DKV"),
             ("c_KV after kv_norm", shared.c_KV, "expected a smaller gamma_kv"),
             ("c_Q = X̂·W_DQ", shared.c_Q_raw, "expected smaller X or W_DQ"),
             ("c_Q after q_norm", shared.c_Q, "expected a smaller gamma_q"),
             ("k_R = X̂·W_KR", shared.k_R_raw, "expected smaller X or W_KR"))
    for what, array, hint in parts:
        if array is not None and (bad := first_bad(array)) is not None:
            raise ComputeError(sc.source, f"values in [mla]'s {what} overflow float64 at {_at(sc.tokens, bad[0])}", hint)


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


def deltanet_logit_check(sc: Scenario, X_in: Matrix) -> None:
    """The gates' inputs X̂·W_a + dt_bias and X̂·W_b past float64 are refused: σ and softplus would hide it
    as 1 or ∞, and every page that works them out term by term would meet the overflow."""
    dn = sc.deltanet
    if dn is None:
        return
    for what, W, bias in (("X̂·W_a + dt_bias", dn.W_a, dn.dt_bias), ("X̂·W_b", dn.W_b, None)):
        if W is None:
            continue
        with np.errstate(over="ignore", invalid="ignore"):
            logit = X_in @ W + (0.0 if bias is None else bias[None, :])  # (n, num_heads)
        if (bad := first_bad(logit)) is not None:
            raise ComputeError(sc.source, f"values in [deltanet]'s {what} overflow float64 at {_at(sc.tokens, bad[0])}",
                           f"expected smaller X or {what.split('·')[1].split(' ')[0]}")


def _deltanet_hint(sc: Scenario, h: int, what: str) -> str:
    """What to change where a value of the delta rule overflows: the inputs that value is made of, and only
    those. g = −e^A_log·softplus(X̂·W_a + dt_bias) reads neither V nor the state; the state, δ and the output
    read V, β and e^g ≤ 1, with the unit-length q and k (their size cannot grow)."""
    dn = sc.deltanet
    assert dn is not None
    if what in ("g", "e^g"):
        if dn.A_log is None:  # g given: the loader keeps it finite and <= 0, so e^g <= 1
            return "expected a smaller g"
        from qkv_tui.kernels.deltanet import decay_rate

        rate = float(decay_rate(dn.A_log)[h])
        if not math.isfinite(rate):
            return (f"expected a smaller A_log (e^A_log, the decay's rate, is past float64 for A_log ="
                    f" {dn.A_log[h]:g}: g = −e^A_log·softplus(X̂·W_a + dt_bias))")
        return ("expected a smaller A_log, or a smaller X̂·W_a + dt_bias (X, W_a or dt_bias): g = −e^A_log·softplus(X̂·W_a"
                " + dt_bias) is their product")
    given = " or a smaller beta" if dn.beta is not None else ""
    conv = " or smaller conv_v taps" if dn.io is not None and dn.io.conv_v is not None else ""
    return f"expected smaller V (X, W_V or b_V){conv}{given}: the state holds β-weighted Values, its q and k have length 1"


def linear_check(sc: Scenario, result: HeadResult, h: int) -> None:
    """A zero denominator of linear attention is refused naming its row; an overflow in φ or the state naming it."""
    dn = result.deltanet
    if dn is not None:
        # g first: the state reads e^g, so an overflow of g shows in S too, and g's inputs are what to change
        for what, array in (("g", dn.g), ("e^g", dn.decay), ("δ", dn.delta), ("the state S", dn.S),
                            ("the output", dn.output)):
            if (bad := first_bad(array)) is not None:
                raise ComputeError(sc.source, f"{result.name}: values in {what} of [deltanet] overflow float64 at"
                               f" {_at(sc.tokens, bad[0])}", _deltanet_hint(sc, h, what))
    lin = result.linear
    if lin is None:
        return
    for what, array in (("φ(Q)", lin.phi_Q), ("φ(K)", lin.phi_K), ("the state S", lin.S), ("z", lin.z),
                        ("φ(q)ᵀS", lin.numer)):
        if (bad := first_bad(array)) is not None:
            raise ComputeError(sc.source, f"{result.name}: values in {what} of [linear] overflow float64 at"
                           f" {_at(sc.tokens, bad[0])}", "expected smaller Q and K (or V)")
    from qkv_tui.kernels.linear import zero_row

    if lin.spec.normalize and (row := zero_row(lin.denom)) is not None:
        raise ComputeError(sc.source, f"{result.name}: [linear]'s denominator φ(q)ᵀz is 0 at {_at(sc.tokens, row)}"
                       " (every φ(q)·φ(k) of the row is 0), so the row cannot be divided by it",
                       "expected feature = \"elu1\" (never 0) or normalize = false")


def iter_heads(scenario: Scenario, norm: NormResult | None = None) -> Iterator[HeadResult]:
    """Each head's computation in turn, so a caller can hold one head at a time (the
    streaming JSON export); raises ScenarioError on the first head that overflows.
    Query heads that share a K/V head reuse its K and V (kept until the last head)."""
    sc = scenario
    if norm is None:
        norm = norm_of(sc)
    X_in = sc.X if norm is None else norm.X_norm
    X_kv = sc.X_kv if sc.is_cross else X_in
    positions = sc.positions
    with np.errstate(over="ignore", invalid="ignore"):
        qk = qk_norms(sc, X_in, X_kv)
    if sc.mla is not None:
        for h, result in enumerate(mla_results(sc, X_in)):
            check_head(sc, result, h)
            yield result
        return
    kv_done: dict[int, HeadResult] = {}  # K/V head -> the first query head that computed it
    with np.errstate(over="ignore", invalid="ignore"):
        dn = deltanet_gates(sc, X_in)
    deltanet_logit_check(sc, X_in)
    last_reader = {sc.kv_head(h): h for h in range(len(sc.heads))}  # a K/V head -> the last query head reading it
    for h, head in enumerate(sc.heads):
        kv = sc.kv_head(h)
        first = kv_done.get(kv)
        shared = first if first is not None and same_kv_weights(first, head) else None
        slope = sc.alibi.slopes[h] if sc.alibi is not None else None
        with np.errstate(over="ignore", invalid="ignore"):
            result = compute_head(
                head, X_in, X_kv, sc.allow, sc.scale,
                rope=sc.rope, positions=positions, slope=slope, kv_head=kv, shared=shared, qk_norm=qk[h],
                linear=linear_spec(sc), deltanet=None if dn is None else (dn[0][:, h], dn[1][:, h]),
                around=around_spec(sc, h),
            )
        check_head(sc, result, h)
        if last_reader[kv] > h:  # kept only while a later query head still reads it
            kv_done.setdefault(kv, result)
        else:
            kv_done.pop(kv, None)
        yield result


def mla_results(sc: Scenario, X_in: Matrix, policy: Policy = EXACT) -> list[HeadResult]:
    """Every head of an [mla] scenario (kernels/mla.py): Q = [q_C | q_R] and K = [k_C | k_R] as scored,
    V = v_C, so the stages from Score on read them as any head's."""
    from qkv_tui.kernels.mla import mla_head, mla_shared

    mla = sc.mla
    assert mla is not None
    w = mla.weights()
    turn = turn_of(mla.rope, sc.positions, mla.d_rope, policy)
    out = []
    with np.errstate(over="ignore", invalid="ignore"):
        shared = mla_shared(X_in, w, turn, policy)
        for h, head in enumerate(sc.heads):
            slope = sc.alibi.slopes[h] if sc.alibi is not None else None
            bias = None
            if slope is not None:
                assert sc.positions is not None
                bias = _frozen(alibi_bias(slope, sc.positions))  # (n, n)
            scale = math.sqrt(mla.d_qk) if sc.scale is None else sc.scale
            m = mla_head(shared, w, h, sc.allow, scale, turn, bias=bias, softcap=head.softcap, policy=policy)
            a, soft = m.attended, m.attended.softmax
            out.append(HeadResult(
                name=head.name, d_k=head.d_k, d_v=head.d_v, scale=a.divisor, scale_is_default=sc.scale is None,
                W_Q=head.W_Q, W_K=head.W_K, W_V=head.W_V, Q=m.Q, K=m.K, V=m.v_C, scores=a.scores, scaled=a.scaled,
                masked=a.masked, row_max=soft.row_max, exps=soft.exps, row_sum=soft.row_sum, weights=soft.weights,
                output=a.output, kv_head=h, bias=a.bias, slope=slope, capped=a.capped, softcap=head.softcap, mla=m,
            ))
    return out


def combine(scenario: Scenario, outputs: Sequence[Matrix]) -> tuple[Matrix, Matrix]:
    """(concat, final output) from the heads' outputs; raises ScenarioError on overflow."""
    with np.errstate(over="ignore", invalid="ignore"):
        concat = np.concatenate(outputs, axis=1)  # (n, sum d_v)
        output = concat @ scenario.W_O if scenario.W_O is not None else concat  # (n, d_out)
        if scenario.b_O is not None:
            output = output + scenario.b_O[None, :]
    if (bad := first_bad(output)) is not None:
        raise ComputeError(scenario.source, f"the final output overflows float64 at {_at(scenario.tokens, bad[0])}",
                       "expected smaller W_O or b_O")
    return _frozen(concat), _frozen(output)


def compute(scenario: Scenario) -> Computation:
    """Every matrix of the scenario; raises ScenarioError if a value overflows."""
    norm = norm_of(scenario)
    heads = tuple(iter_heads(scenario, norm))
    concat, output = combine(scenario, [h.joined for h in heads])
    return Computation(scenario, heads, concat, scenario.W_O, output, norm=norm, b_O=scenario.b_O)
