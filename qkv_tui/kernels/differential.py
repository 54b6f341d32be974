"""One head of differential attention (Ye et al. 2024, "Differential Transformer"; contracts §14 and
docs/scenario-format.md, [differential]), keeping every number the stages show.

A head's W_Q and W_K are 2d wide and split in two: [Q₁ | Q₂] = X̂·W_Q, [K₁ | K₂] = X̂·W_K; each pair scores its own
map under the one mask, as the head's parts before the scores left Q and K (RoPE's part turns each half on its own,
as a head of width d: core/part_questions.py score_width):

    λ = e^(λ_q1·λ_k1) − e^(λ_q2·λ_k2) + λ_init
    map = softmax(Q₁K₁ᵀ/√d) − λ·softmax(Q₂K₂ᵀ/√d)          rows sum to 1 − λ; cells may be negative
    output = (1 − λ_init)·RMSNorm(map·V)                    V is 2d wide; the norm runs over the 2d columns

Every number is kept as the policy says (kernels/policy.py), as in kernels/attention.py: the softmax and the norm
are the kernels' own (softmax.py, norm.py). A per-logit step that reads no parameter of a
map (the scale, the soft-cap, the ALiBi bias) acts on both maps alike; a sink would have to pick one map, so
the keys module (core/variants/differential.py) refuses it before it gets here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, TypeVar

import numpy as np

from qkv_tui.kernels.attention import HeadPass, PartSpec, ScoresStep, frozen, project
from qkv_tui.kernels.norm import Normed, normalise
from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.softmax import SoftmaxRows, masked_logits, softmax_rows
from qkv_tui.kernels.stats import Matrix

P = TypeVar("P")


@dataclass(frozen=True, eq=False)
class DiffHead:
    """What one head of ``[differential]`` reads besides its projections: its four λ vectors (d each), λ_init,
    and the sub-norm's eps and gains (2d; None: no gain, as DiffLlama's norm has none)."""

    lambda_q1: Matrix  # (d,)
    lambda_k1: Matrix  # (d,)
    lambda_q2: Matrix  # (d,)
    lambda_k2: Matrix  # (d,)
    lambda_init: float
    eps: float = 1e-5
    gamma: Matrix | None = None  # (2d,)


@dataclass(frozen=True, eq=False)
class DiffMap:
    """One of the head's two maps, from its scores to its softmax: as kernels/attention.py's Attended keeps them."""

    scores: Matrix  # (n, m) Q_aK_aᵀ, of the halves as scored
    scaled: Matrix  # (n, m) scores / divisor
    stepped: Matrix | None  # (n, m) the scaled scores after a part's step (the soft-cap's); None without one
    masked: Matrix  # (n, m) the softmax's input: scaled (stepped) + bias, −∞ where the mask forbids
    softmax: SoftmaxRows  # row_max, exps, row_sum and the weights, rows summing to 1

    @property
    def weights(self) -> Matrix:
        return self.softmax.weights


@dataclass(frozen=True, eq=False)
class DiffLambda:
    """λ of one head, each number as kept: the two dot products, their exponentials, λ_init and λ itself."""

    dot_1: float  # λ_q1·λ_k1
    dot_2: float  # λ_q2·λ_k2
    lambda_1: float  # e^(λ_q1·λ_k1)
    lambda_2: float  # e^(λ_q2·λ_k2)
    lambda_init: float
    value: float  # λ₁ − λ₂ + λ_init


@dataclass(frozen=True, eq=False)
class DiffForward:
    """One differential head, everything the stages show; every array read-only. ``K``, ``V`` and the records in
    ``moved`` are what a later query head reading the same K/V head reuses (``part``)."""

    Q: Matrix  # (n, 2d) [Q₁ | Q₂] as projected
    K: Matrix  # (m, 2d) [K₁ | K₂]
    V: Matrix  # (m, 2d)
    # [Q₁ | Q₂] and [K₁ | K₂] as scored where the head's parts before the scores changed them (RoPE's turns each
    # half); None where they were scored as projected (Q and K themselves: on a worksheet, the printed ones)
    Q_used: Matrix | None  # (n, 2d)
    K_used: Matrix | None  # (m, 2d)
    divisor: float  # what both maps' scores were divided by
    bias: Matrix | None  # (n, m) the ALiBi bias as kept, added to both maps
    map_1: DiffMap
    map_2: DiffMap
    lam: DiffLambda
    lam_p2: Matrix  # (n, m) λ·softmax₂, each cell as kept (the Subtract step's second operand)
    weights: Matrix  # (n, m) softmax₁ − λ·softmax₂: the map that multiplies V; exactly 0 where masked
    mixed: Matrix  # (n, 2d) weights·V
    norm: Normed  # the sub-norm of ``mixed``: its mean square (spread), root and normed rows (X_norm)
    factor: float  # 1 − λ_init as kept
    output: Matrix  # (n, 2d) (1 − λ_init)·normed: the head's output, what Concat joins
    head: DiffHead | None = None  # what it read: its λ vectors and sub-norm (the backward reads them again: read_back)
    # the records of the head's parts that changed Q and K before the scores (RoPE's turn of each half), in the order
    # they ran: the backward reads the gradients back through them (their ``scored_back``)
    moved: tuple[Any, ...] = ()
    own_stages: ClassVar[bool] = True  # its two maps replace the one-map stages (teach/stages/differential.py)
    # what the heads view says its map holds: first map − λ·second (core/part_questions.py map_formula)
    map_formula: ClassVar[tuple[tuple[str, bool], ...]] = (("(softmax(Q₁K₁ᵀ/√d) − λ·softmax(Q₂K₂ᵀ/√d))", True),
                                                          ("·V", False))
    # the views that would show one softmax map where this head has two (core/part_questions.py), each in one line
    REFUSED: ClassVar[Mapping[str, str]] = MappingProxyType({
        "tiles": "No tiles for differential attention: the tiles view keeps one running max and one running sum"
                 " per row, and a differential head has two softmax maps, subtracted.",
        "cache": "No KV-cache replay for differential attention yet: the cache view decodes one softmax map per"
                 " head, and a differential head has two, subtracted; the stages show every cell of both.",
    })

    @property
    def refuses(self) -> Mapping[str, str]:
        """REFUSED, and the worksheet where the page has no tables for a step of this head (a part's step on each
        half of Q and K, as its record says it at ``worksheet.blocks``; a soft-cap, an ALiBi bias:
        teach/stages/differential_sheet.py prints the rest)."""
        moved = [r.words["worksheet.blocks"].format(block="half") for r in self.moved
                 if "worksheet.blocks" in getattr(r, "words", {})]
        missing = [*moved, *(what for what, has in (("a soft-cap", self.map_1.stepped is not None),
                                                    ("an ALiBi bias", self.bias is not None)) if has)]
        if not missing:
            return self.REFUSED
        return {**self.REFUSED, "worksheet": f"a worksheet of [differential] with {' or '.join(missing)} is not"
                " written yet (those steps have no printed tables for two maps); use --export markdown for every"
                " step, or leave them out"}

    @property
    def row_total(self) -> float:
        """What every row of the head's map adds up to: 1 − λ (the first map's 1 less λ times the second's)."""
        return 1.0 - self.lam.value

    @property
    def d(self) -> int:
        """The half width: each map's d_k."""
        return int(self.Q.shape[1]) // 2

    @property
    def normed(self) -> Matrix:
        return self.norm.X_norm

    # read backwards by kernels/differential_backward.py read_back (core/gradients.py asks a record's ``backward``)
    backward: ClassVar[str] = "qkv_tui.kernels.differential_backward:read_back"
    def used(self, half: int) -> tuple[Matrix, Matrix]:
        """Map ``half`` (1 or 2)'s Queries and Keys as they were scored: (n, d) and (m, d)."""
        Q = self.Q if self.Q_used is None else self.Q_used
        K = self.K if self.K_used is None else self.K_used
        cols = slice(0, self.d) if half == 1 else slice(self.d, 2 * self.d)
        return Q[:, cols], K[:, cols]

    def part(self, kind: type[P]) -> P | None:
        """The record of a part that changed Q and K before the scores, of type ``kind`` (kernels/attention.py
        SharedKV: a later query head reading the same K/V head reuses its Keys as that part left them)."""
        return next((r for r in self.moved if isinstance(r, kind)), None)


def diff_lambda(head: DiffHead, policy: Policy = EXACT) -> DiffLambda:
    """λ = e^(λ_q1·λ_k1) − e^(λ_q2·λ_k2) + λ_init, each dot product, exponential and sum as the policy keeps a
    table: the λ step shows each as a number of its own, and a printed page prints each rounded."""
    def dot(a: Matrix, b: Matrix) -> float:
        return float(policy.table(policy.matmul(a[None, :], b[:, None]))[0, 0])

    def kept(x: float) -> float:  # each is a number of its own on the λ step (and on a printed page)
        return float(policy.table(np.array(x)))

    dot_1, dot_2 = dot(head.lambda_q1, head.lambda_k1), dot(head.lambda_q2, head.lambda_k2)
    with np.errstate(over="ignore"):  # the parser bounds the dot products; an e^ past float64 is ∞, named there
        lambda_1, lambda_2 = kept(float(np.exp(dot_1))), kept(float(np.exp(dot_2)))
    init = kept(head.lambda_init)
    return DiffLambda(dot_1, dot_2, lambda_1, lambda_2, init, kept(lambda_1 - lambda_2 + init))


def _map(Q: Matrix, K: Matrix, allow: np.ndarray, divisor: float, bias: Matrix | None, step: ScoresStep | None,
         policy: Policy) -> DiffMap:
    """One map: Score, Scale, the soft-cap and the bias, the mask, Softmax (kernels/attention.py's attend, without Mix)."""
    scores = policy.table(policy.matmul(Q, K.T))  # (n, m)
    scaled = policy.worked(scores / divisor)  # (n, m)
    stepped = None if step is None else frozen(step.scores_step(scaled, policy))  # (n, m)
    masked = masked_logits(scaled if stepped is None else stepped, allow, bias, policy)  # (n, m)
    soft = softmax_rows(masked, None, policy)
    for a in (scores, scaled, masked, soft.row_max, soft.exps, soft.row_sum, soft.weights):
        frozen(a)
    return DiffMap(scores, scaled, stepped, masked, soft)


def diff_forward(X: Matrix, X_kv: Matrix, W_Q: Matrix, W_K: Matrix, W_V: Matrix, b_Q: Matrix | None,
                 b_K: Matrix | None, b_V: Matrix | None, allow: np.ndarray, head: DiffHead, *,
                 scale: float | None = None, parts: Sequence[PartSpec] = (), bias: Matrix | None = None,
                 step: ScoresStep | None = None, shared: DiffForward | None = None,
                 policy: Policy = EXACT) -> DiffForward:
    """One differential head from what it reads. ``X`` is what the Query projection reads (already normalised),
    ``X_kv`` what the Keys and Values read; ``scale`` divides both maps' scores (None: √d, the half width);
    ``parts`` are the head's parts that act on Q and K before the scores (RoPE's, turning each half as a head of
    width d), run at their ``before_score`` hook as kernels/attention.py runs them; ``shared`` an earlier query
    head's forward on the same K/V head, whose K, V and parts' Keys this one reuses (contracts §7's sharing rule)."""
    Q = frozen(project(X, W_Q, b_Q, policy))  # (n, 2d)
    if shared is None:
        K = frozen(project(X_kv, W_K, b_K, policy))  # (m, 2d)
        V = frozen(project(X_kv, W_V, b_V, policy))  # (m, 2d)
    else:
        K, V = shared.K, shared.V
    # the parts' hook as a head's pass runs it (the pass's scale is not theirs to read: the maps divide by ``scale``)
    p = HeadPass(X, X_kv, allow, 1.0, policy, shared, Q, K, V, Q, K, Q, K)
    for part in parts:
        part.before_score(p)
    return diff_maps(Q, K, V, allow, head, Q_used=p.Q_used, K_used=p.K_used, moved=moved_by(p.records), scale=scale,
                     bias=bias, step=step, policy=policy)


def moved_by(records: Sequence[object]) -> tuple[object, ...]:
    """Of a head's part records, those of the parts that changed Q and K before the scores: each names Q and K as
    scored (``scored_suffix``, core/part_questions.py)."""
    return tuple(r for r in records if getattr(r, "scored_suffix", None))


def diff_maps(Q: Matrix, K: Matrix, V: Matrix, allow: np.ndarray, head: DiffHead, *, Q_used: Matrix | None = None,
              K_used: Matrix | None = None, moved: tuple[object, ...] = (), scale: float | None = None,
              bias: Matrix | None = None, step: ScoresStep | None = None, policy: Policy = EXACT) -> DiffForward:
    """One differential head from its projections Q (n, 2d), K (m, 2d) and V (m, 2d): ``Q_used`` and ``K_used``
    are Q and K as the head's parts before the scores left them (None: as projected), ``moved`` those parts'
    records; ``scale`` divides both maps' scores (None: √d, the half width)."""
    if Q.shape[1] % 2 or Q.shape[1] != K.shape[1] or V.shape[1] != Q.shape[1]:
        raise ValueError(f"a differential head needs W_Q, W_K and W_V 2d wide, got {Q.shape[1]}, {K.shape[1]},"
                         f" {V.shape[1]}")
    d = Q.shape[1] // 2
    Q_used = None if Q_used is Q else Q_used  # what the head's pass scores: the projection itself where no part moved it
    K_used = None if K_used is K else K_used
    Q_s, K_s = (Q if Q_used is None else Q_used), (K if K_used is None else K_used)
    divisor = policy.divisor(math.sqrt(d) if scale is None else scale)
    kept_bias = None if bias is None else policy.worked(bias)  # (n, m) one bias for both maps
    map_1 = _map(Q_s[:, :d], K_s[:, :d], allow, divisor, kept_bias, step, policy)
    map_2 = _map(Q_s[:, d:], K_s[:, d:], allow, divisor, kept_bias, step, policy)
    lam = diff_lambda(head, policy)
    # the Subtract step, cell by cell: λ·p₂ written down, then p₁ minus it; a masked cell is 0 in both maps, and
    # np.where keeps it the exact 0 it is (λ < 0 would make λ·0 a −0.0)
    lam_p2 = frozen(np.where(allow, policy.worked(lam.value * map_2.weights), 0.0))  # (n, m)
    weights = frozen(np.where(allow, policy.table(map_1.weights - lam_p2), 0.0))  # (n, m)
    mixed = frozen(policy.table(policy.matmul(weights, V)))  # (n, 2d)
    gamma = np.ones(2 * d) if head.gamma is None else np.asarray(head.gamma, dtype=np.float64)  # (2d,)
    norm = normalise(policy, "rms", mixed, gamma[None, :], None, head.eps)
    for a in (norm.X_norm, norm.spread, norm.root):
        frozen(a)
    factor = float(policy.table(np.array(1.0 - lam.lambda_init)))  # printed beside the sub-norm's rows
    output = frozen(policy.table(factor * norm.X_norm))  # (n, 2d)
    if kept_bias is not None and kept_bias is not bias:  # the caller's own array is the caller's to freeze
        frozen(kept_bias)
    return DiffForward(Q, K, V, Q_used, K_used, divisor, kept_bias, map_1, map_2, lam, lam_p2, weights, mixed, norm,
                       factor, output, head=head, moved=moved)


def lambda_init_of_layer(layer: int) -> float:
    """The paper's depth schedule, λ_init = 0.8 − 0.6·e^(−0.3·L) for layer L counted from 0 (the paper's l − 1;
    transformers' lambda_init_fn(layer_idx))."""
    return 0.8 - 0.6 * math.exp(-0.3 * layer)
