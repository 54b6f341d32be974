"""One head's forward pass, softmax(Q Kᵀ / scale + bias) V, keeping every intermediate (docs/scenario-format.md,
"What is computed"): project, score, scale, mask, softmax, mix, with each variant's part (PartSpec) at its hook:
QK-norm and rotate before the scores, the bias, sink and soft-cap as the softmax's options, the gate after Mix."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Protocol, TypeVar

import numpy as np

from qkv_tui.base.fixed import fixed
from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.softmax import SoftmaxRows, masked_logits, softmax_rows
from qkv_tui.kernels.stats import Matrix

P = TypeVar("P")

@fixed
class Turn:
    """RoPE's turn for every row: the cos and sin of p·θᵢ (rows, d_k/2) and the pairs they turn."""

    cos: Matrix
    sin: Matrix
    pairs: Sequence[tuple[int, int]]


class ScoresStep(Protocol):
    """A part's step on the scaled scores before any term and the mask (the soft-cap's c·tanh(s/c))."""

    def scores_step(self, scaled: Matrix, policy: Policy = ...) -> Matrix: ...


class SharedKV(Protocol):
    """A K/V head already computed for an earlier query head: its Keys and Values as projected, and its parts
    (the normalised and turned Keys a later query head reuses)."""

    @property
    def K(self) -> Matrix: ...

    @property
    def V(self) -> Matrix: ...

    def part(self, kind: type[P]) -> P | None: ...


@fixed
class Attended:
    """Everything from the scores on, for Queries and Keys as they are scored; every array read-only."""

    divisor: float  # what the scores were divided by
    scores: Matrix  # (n, m) Q_used K_usedᵀ
    scaled: Matrix  # (n, m) scores / divisor
    bias: Matrix | None  # (n, m) the ALiBi bias as kept
    masked: Matrix  # (n, m) scaled (stepped) + bias, −∞ where the mask forbids
    softmax: SoftmaxRows
    output: Matrix  # (n, d_v) weights V
    stepped: Matrix | None = None  # (n, m) the scaled scores after a part's step on them (the soft-cap's); None
    # without one


@dataclass(eq=False, repr=False)
class HeadPass:
    """One head's forward pass as it goes: what its parts read and change (the PartSpec hooks)."""

    X: Matrix  # (n, d_model) what the Query projection reads, already normalised
    X_kv: Matrix  # (m, d_in) what the Keys and Values read
    allow: np.ndarray  # (n, m)
    scale: float
    policy: Policy
    shared: SharedKV | None  # an earlier query head reading the same K/V head: its K, V and parts are reused
    Q: Matrix  # (n, d_k) as projected
    K: Matrix  # (m, d_k)
    V: Matrix  # (m, d_v)
    Q_turned: Matrix  # (n, d_k) what RoPE turns: Q as the parts before the rotation left it
    K_turned: Matrix  # (m, d_k)
    Q_used: Matrix  # (n, d_k) the Queries as scored
    K_used: Matrix  # (m, d_k)
    bias: Matrix | None = None  # (n, m) added to the scaled scores
    beside: float | None = None  # a logit beside the map, with no Value, that joins each row's sum (a sink)
    step: ScoresStep | None = None  # a step on the scaled scores before the bias (the soft-cap)
    records: list[object] = field(default_factory=list)  # each part's own record, in the order they ran
    notes: dict[str, object] = field(default_factory=dict)  # what one part keeps between its own hooks
    # K handed over as it enters the scores (another layer's, after that layer's own steps on K, [shared_kv]):
    # a part that acts on Queries and Keys steps Q alone and keeps K as it came
    K_given: bool = False

    def shared_part(self, kind: type[P]) -> P | None:
        return None if self.shared is None else self.shared.part(kind)


class PartSpec:
    """One variant's share of a head's forward pass, at three hook points; a part overrides those it uses.

    Each hook runs for every part, in the parts' order, before the next hook: ``before_score`` turns Q and K
    or sets the softmax's options (QK-norm, then RoPE; ALiBi's bias, a sink, a soft-cap); ``attend`` may
    replace the softmax's map with its own (linear attention, the delta rule; the first that answers wins);
    ``after_mix`` reads what was attended (the output gate, the output norm) and keeps the part's record."""

    keeps_scale: ClassVar[bool] = True  # False for a part whose map divides by no scale (shown as no √d_k)

    def values(self, p: HeadPass) -> None:
        """Replace ``p.V`` (and ``p.K``: another layer's, [shared_kv]) before anything reads them (a value scale);
        a head that reuses an earlier head's V (``p.shared``) finds it as that head's parts left it."""
        return None

    def before_score(self, p: HeadPass) -> None:
        return None

    def attend(self, p: HeadPass) -> Attended | None:
        return None

    def after_mix(self, p: HeadPass, attended: Attended) -> None:
        return None


@fixed
class Forward:
    """One head: the projections and what was attended, with each part's record in the order they ran."""

    Q: Matrix  # (n, d_k)
    K: Matrix  # (m, d_k)
    V: Matrix  # (m, d_v)
    attended: Attended
    records: tuple[object, ...] = ()


def frozen(array: Matrix) -> Matrix:
    array.setflags(write=False)
    return array


def project(X: Matrix, W: Matrix, b: Matrix | None, policy: Policy = EXACT) -> Matrix:
    """X W + b: (rows, width)."""
    out = policy.matmul(X, W)  # (rows, width)
    return policy.table(out if b is None else out + b[None, :])


def attend(Q: Matrix, K: Matrix, V: Matrix, allow: np.ndarray, scale: float, bias: Matrix | None = None,
           beside: float | None = None, policy: Policy = EXACT, step: ScoresStep | None = None) -> Attended:
    """softmax(Q Kᵀ / scale + bias) V for Queries (n, d_k) and Keys (m, d_k) as scored, Values (m, d_v);
    with ``step`` the scaled scores are stepped (soft-capped) before the bias and the mask."""
    divisor = policy.divisor(scale)
    scores = policy.table(policy.matmul(Q, K.T))  # (n, m)
    scaled = policy.worked(scores / divisor)  # (n, m)
    stepped = None if step is None else frozen(step.scores_step(scaled, policy))  # (n, m)
    kept_bias = None if bias is None else policy.worked(bias)  # (n, m)
    masked = masked_logits(scaled if stepped is None else stepped, allow, kept_bias, policy)  # (n, m)
    soft = softmax_rows(masked, beside, policy)
    output = policy.table(policy.matmul(soft.weights, V))  # (n, d_v)
    for a in (scores, scaled, masked, soft.row_max, soft.exps, soft.row_sum, soft.weights, output):
        frozen(a)
    if soft.beside_exp is not None:
        frozen(soft.beside_exp)
    if kept_bias is not None and kept_bias is not bias:  # the caller's own array is the caller's to freeze
        frozen(kept_bias)
    return Attended(divisor, scores, scaled, kept_bias, masked, soft, output, stepped)


def head_forward(X: Matrix, X_kv: Matrix, W_Q: Matrix, W_K: Matrix, W_V: Matrix, b_Q: Matrix | None,
                 b_K: Matrix | None, b_V: Matrix | None, allow: np.ndarray, scale: float,
                 parts: Sequence[PartSpec] = (), *, shared: SharedKV | None = None, policy: Policy = EXACT) -> Forward:
    """One head. ``X`` is what the Query projection reads (already normalised), ``X_kv`` what the Keys and
    Values read; ``parts`` are its variants' specs (PartSpec), in order; ``shared`` is the forward of an earlier
    query head reading the same K/V head, whose K and V (and their parts' forms) this one reuses."""
    Q = frozen(project(X, W_Q, b_Q, policy))  # (n, d_k)
    if shared is None:
        K = frozen(project(X_kv, W_K, b_K, policy))  # (m, d_k)
        V = frozen(project(X_kv, W_V, b_V, policy))  # (m, d_v)
    else:
        K, V = shared.K, shared.V
    p = HeadPass(X, X_kv, allow, scale, policy, shared, Q, K, V, Q, K, Q, K)
    for part in parts:
        part.values(p)
    attended = scored(p, parts)
    return Forward(Q, p.K, p.V, attended, tuple(p.records))


def scored(p: HeadPass, parts: Sequence[PartSpec]) -> Attended:
    """From the scores on, with each part at its hooks: the options ``before_score`` sets (or the Queries and
    Keys it turns), the map of the first part that attends in the softmax's place, else the softmax; then each
    part's ``after_mix``, which keeps its record in ``p.records``."""
    for part in parts:
        part.before_score(p)
    attended = next((a for a in (part.attend(p) for part in parts) if a is not None), None)
    if attended is None:
        attended = attend(p.Q_used, p.K_used, p.V, p.allow, p.scale, p.bias, p.beside, p.policy, p.step)
    for part in parts:
        part.after_mix(p, attended)
    return attended
