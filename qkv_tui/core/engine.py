"""Every matrix of softmax(Q Kᵀ / scale + bias) V for a scenario, in plain NumPy.

Follows contracts §1 "Semantics" and §7 line by line: X is normalised first where the
scenario has a [norm]; per head Q = X W_Q + b_Q, K = X_kv W_K + b_K, V = X_kv W_V + b_V;
RoPE rotates Q and K by position; scores = Q Kᵀ, scaled = scores / scale; the softmax's
input is scaled + ALiBi bias with -inf where the mask forbids; weights = stable row softmax
(with an attention sink joining each row's sum), output = weights V; then concat, W_O + b_O.
Query heads that share a K/V head (grouped-query attention) share its K and V arrays.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from qkv_tui.core.modern import Norm, Rope, Vector
from qkv_tui.core.scenario import BoolMatrix, Head, Matrix, Scenario, ScenarioError


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

    @property
    def Q_used(self) -> Matrix:
        """The Queries that are scored: rotated where the scenario has rope."""
        return self.Q if self.Q_rot is None else self.Q_rot

    @property
    def K_used(self) -> Matrix:
        return self.K if self.K_rot is None else self.K_rot


@dataclass(frozen=True, eq=False)
class NormResult:
    """X normalised row by row, with the per-token statistics the trace shows."""

    X_norm: Matrix  # (n, d_model)
    mean: Matrix  # (n,) mean of the row (layer), or 0 (rms)
    spread: Matrix  # (n,) mean of squares (rms) or population variance (layer)
    root: Matrix  # (n,) √(spread + eps), what each centred cell is divided by


@dataclass(frozen=True, eq=False)
class Computation:
    """The whole computation of a scenario (contracts §3 is its plain-data form)."""

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


def _frozen(array: Matrix) -> Matrix:
    array.setflags(write=False)
    return array


def softmax_rows(masked: Matrix, sink: float | None = None) -> tuple[Matrix, Matrix, Matrix, Matrix]:
    """Stable row softmax; returns (row_max, exps, row_sum, weights).

    With a sink, its logit joins every row as an extra column: the max subtracted is the
    larger of the row max and the sink, and e^(sink − max) joins the row sum (it is not
    among ``exps``: the sink's column is dropped after the sum).
    """
    row_max = masked.max(axis=1)  # (n,)
    if sink is not None:
        row_max = np.maximum(row_max, sink)
    # a logit far below its row's max may give a difference beyond float64: −inf, whose e^ is the 0 it
    # stands for (e^(−1e308 − 1e308) underflows anyway), so that overflow is not an error
    with np.errstate(over="ignore"):
        exps = np.exp(masked - row_max[:, None])  # (n, m); e^-inf = 0 exactly
    row_sum = exps.sum(axis=1)  # (n,)
    if sink is not None:
        row_sum = row_sum + np.exp(sink - row_max)
    return row_max, exps, row_sum, exps / row_sum[:, None]


def normalize(norm: Norm, X: Matrix) -> NormResult:
    """RMSNorm x / √(mean(x²) + eps) · γ, or LayerNorm (x − mean) / √(var + eps) · γ + β."""
    if norm.kind == "rms":
        mean = np.zeros(X.shape[0])  # (n,)
        spread = (X * X).mean(axis=1)  # (n,) mean of squares
    else:
        mean = X.mean(axis=1)  # (n,)
        spread = ((X - mean[:, None]) ** 2).mean(axis=1)  # (n,) population variance
    root = np.sqrt(spread + norm.eps)  # (n,)
    X_norm = (X - mean[:, None]) / root[:, None] * norm.gamma[None, :]  # (n, d_model)
    if norm.beta is not None:
        X_norm = X_norm + norm.beta[None, :]
    return NormResult(*(_frozen(a) for a in (X_norm, mean, spread, root)))


def rotate(M: Matrix, rope: Rope, positions: tuple[int, ...]) -> Matrix:
    """RoPE: each pair (a, b) of a row at position p turns by p·θ_i (contracts §7)."""
    d_k = M.shape[1]
    out = M.copy()  # (rows, d_k)
    p = np.asarray(positions, dtype=np.float64)  # (rows,)
    for i, (a, b) in enumerate(rope.pairs(d_k)):
        angle = p * rope.theta(i, d_k)  # (rows,)
        cos, sin = np.cos(angle), np.sin(angle)
        out[:, a] = M[:, a] * cos - M[:, b] * sin
        out[:, b] = M[:, a] * sin + M[:, b] * cos
    return out


def alibi_bias(slope: float, positions: tuple[int, ...]) -> Matrix:
    """slope · (pos_j − pos_i): 0 on the diagonal, more negative the further back the key."""
    p = np.asarray(positions, dtype=np.float64)
    bias: Matrix = slope * (p[None, :] - p[:, None])  # (n, n)
    return bias


def _project(X: Matrix, W: Matrix, b: Vector | None) -> Matrix:
    out = X @ W  # (rows, width)
    return out if b is None else out + b[None, :]


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
    shared: tuple[Matrix, Matrix, Matrix | None] | None = None,
) -> HeadResult:
    """One head. ``X`` is what the Query projection reads (already normalised); ``shared``
    hands over the K, V and rotated K of a K/V head computed for an earlier query head."""
    divisor = math.sqrt(head.d_k) if scale is None else scale
    Q = _project(X, head.W_Q, head.b_Q)  # (n, d_k)
    if shared is None:
        K = _project(X_kv, head.W_K, head.b_K)  # (m, d_k)
        V = _project(X_kv, head.W_V, head.b_V)  # (m, d_v)
        K_rot = None
        if rope is not None:
            assert positions is not None
            K_rot = _frozen(rotate(K, rope, positions))  # (m, d_k)
        for a in (K, V):
            _frozen(a)
    else:
        K, V, K_rot = shared
    Q_rot = None
    if rope is not None:
        assert positions is not None
        Q_rot = _frozen(rotate(Q, rope, positions))  # (n, d_k)
    Q_used = Q if Q_rot is None else Q_rot
    K_used = K if K_rot is None else K_rot
    scores = Q_used @ K_used.T  # (n, m)
    scaled = scores / divisor  # (n, m)
    bias = None
    logits = scaled
    if slope is not None:
        assert positions is not None
        bias = _frozen(alibi_bias(slope, positions))  # (n, n)
        logits = scaled + bias
    masked = np.where(allow, logits, -np.inf)  # (n, m)
    row_max, exps, row_sum, weights = softmax_rows(masked, head.sink)
    sink_exp = None if head.sink is None else _frozen(np.exp(head.sink - row_max))  # (n,)
    output = weights @ V  # (n, d_v)
    for a in (Q, scores, scaled, masked, row_max, exps, row_sum, weights, output):
        _frozen(a)
    return HeadResult(
        name=head.name, d_k=head.d_k, d_v=head.d_v, scale=divisor, scale_is_default=scale is None,
        W_Q=head.W_Q, W_K=head.W_K, W_V=head.W_V, Q=Q, K=K, V=V, scores=scores, scaled=scaled,
        masked=masked, row_max=row_max, exps=exps, row_sum=row_sum, weights=weights, output=output,
        kv_head=kv_head, b_Q=head.b_Q, b_K=head.b_K, b_V=head.b_V, Q_rot=Q_rot, K_rot=K_rot,
        bias=bias, slope=slope, sink=head.sink, sink_exp=sink_exp,
    )


def _same(a: Matrix | None, b: Matrix | None) -> bool:
    """The same projection: one slice shared by the loader, or equal numbers given twice."""
    if a is None or b is None:
        return a is b
    return a is b or (a.shape == b.shape and bool(np.array_equal(a, b)))


def norm_of(scenario: Scenario) -> NormResult | None:
    """The scenario's [norm] applied to X; raises ScenarioError if it overflows."""
    if scenario.norm is None:
        return None
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        norm = normalize(scenario.norm, scenario.X)
    if not np.isfinite(norm.X_norm).all():
        raise ScenarioError(scenario.source, "[norm]: X_norm overflows float64 (values too large); expected smaller X or gamma")
    return norm


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
    kv_done: dict[int, HeadResult] = {}  # K/V head -> the first query head that computed it
    last_reader = {sc.kv_head(h): h for h in range(len(sc.heads))}  # a K/V head -> the last query head reading it
    for h, head in enumerate(sc.heads):
        kv = sc.kv_head(h)
        first = kv_done.get(kv)
        shared = None
        pairs = ((first.W_K, head.W_K), (first.W_V, head.W_V), (first.b_K, head.b_K), (first.b_V, head.b_V)) if first else ()
        if first is not None and all(_same(a, b) for a, b in pairs):
            shared = (first.K, first.V, first.K_rot)
        slope = sc.alibi.slopes[h] if sc.alibi is not None else None
        with np.errstate(over="ignore", invalid="ignore"):
            result = compute_head(
                head, X_in, X_kv, sc.allow, sc.scale,
                rope=sc.rope, positions=positions, slope=slope, kv_head=kv, shared=shared,
            )
        for name in ("Q", "K", "V", "Q_rot", "K_rot", "scores", "scaled", "weights", "output"):
            array = getattr(result, name)
            if array is not None and not np.isfinite(array).all():
                raise ScenarioError(
                    sc.source,
                    f"{result.name}: values in {name} overflow float64 (too large);"
                    " expected numbers small enough that every product stays finite",
                )
        if last_reader[kv] > h:  # kept only while a later query head still reads it
            kv_done.setdefault(kv, result)
        else:
            kv_done.pop(kv, None)
        yield result


def combine(scenario: Scenario, outputs: Sequence[Matrix]) -> tuple[Matrix, Matrix]:
    """(concat, final output) from the heads' outputs; raises ScenarioError on overflow."""
    with np.errstate(over="ignore", invalid="ignore"):
        concat = np.concatenate(outputs, axis=1)  # (n, sum d_v)
        output = concat @ scenario.W_O if scenario.W_O is not None else concat  # (n, d_out)
        if scenario.b_O is not None:
            output = output + scenario.b_O[None, :]
    if not np.isfinite(output).all():
        raise ScenarioError(scenario.source, "the final output overflows float64 (W_O values too large)")
    return _frozen(concat), _frozen(output)


def compute(scenario: Scenario) -> Computation:
    """Every matrix of the scenario; raises ScenarioError if a value overflows."""
    norm = norm_of(scenario)
    heads = tuple(iter_heads(scenario, norm))
    concat, output = combine(scenario, [h.output for h in heads])
    return Computation(scenario, heads, concat, scenario.W_O, output, norm=norm, b_O=scenario.b_O)
