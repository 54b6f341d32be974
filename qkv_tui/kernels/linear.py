"""Linear attention (Katharopoulos et al. 2020) in both of its forms, under a numeric policy.

The quadratic form is attention with φ(q)·φ(k) for e^(q·k/√d): A = φ(Q)φ(K)ᵀ, masked causally (a 0 where
the mask forbids, not −∞), each row divided by its sum, times V. The recurrent form keeps a d_k × d_v state
instead of the n × n matrix: S_t = S_{t−1} + φ(k_t)v_tᵀ, z_t = z_{t−1} + φ(k_t), o_t = φ(q_t)ᵀS_t / φ(q_t)ᵀz_t.
Exactly they agree; by hand each form rounds its own intermediates.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

from qkv_tui.kernels.attention import Attended, HeadPass, PartSpec, frozen
from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.softmax import SoftmaxRows
from qkv_tui.kernels.stats import Matrix


@dataclass(frozen=True)
class LinearSpec(PartSpec):
    """What the kernel needs of a scenario's [linear]; as a part of a head's forward pass, its map replaces the
    softmax's."""

    feature: str  # "elu1" | "relu" | "identity"
    normalize: bool
    keeps_scale: ClassVar[bool] = False  # φ(q)·φ(k) is divided by no √d_k

    def attend(self, p: HeadPass) -> Attended:
        lin = linear_forward(p.Q_used, p.K_used, p.V, p.allow, self, p.policy)
        p.records.append(lin)
        return as_attended(lin, p.allow)


@dataclass(frozen=True, eq=False)
class LinearForward:
    """Both forms of one head, every array read-only."""

    spec: LinearSpec
    phi_Q: Matrix  # (n, d_k) φ(Q)
    phi_K: Matrix  # (n, d_k) φ(K)
    scores: Matrix  # (n, n) φ(Q)φ(K)ᵀ, every cell
    masked: Matrix  # (n, n) the scores, 0 where the mask forbids
    row_sum: Matrix  # (n,) Σ of each masked row (what it is divided by); 1 without normalize
    weights: Matrix  # (n, n) masked / row_sum
    output: Matrix  # (n, d_v) weights·V: the quadratic form
    S: Matrix  # (n, d_k, d_v) the state after each token
    z: Matrix  # (n, d_k) the running sum of φ(k) after each token
    numer: Matrix  # (n, d_v) φ(q_t)ᵀS_t
    denom: Matrix  # (n,) φ(q_t)ᵀz_t; 1 without normalize
    recurrent: Matrix  # (n, d_v) numer / denom: the recurrent form

    # the decode view's module for the state it carries, line by line (core/part_questions.py face)
    faces: ClassVar[Mapping[str, str]] = MappingProxyType({"state": "linear_state"})
    # the last operation's "Next:" line names the k view by what it shows here: a state, where no KV cache is kept
    words: ClassVar[Mapping[str, str]] = MappingProxyType({"closing.cache": "decoding with a state"})

    @property
    def map_formula(self) -> tuple[tuple[str, bool], ...]:
        """What the heads view's maps hold (core/part_questions.py): φ(q)·φ(k), from no softmax."""
        return (("rownorm(φ(Q)·φ(K)ᵀ)" if self.spec.normalize else "φ(Q)·φ(K)ᵀ", True), ("·V", False))

    @property
    def distribution(self) -> bool:
        """Whether the weights are a distribution: only where each row is divided by its sum."""
        return self.spec.normalize

    @property
    def route(self) -> str | None:
        """How a token's output is made, where the summary's "weights·V" would mislead."""
        return None if self.spec.normalize else "weights·V, its weights φ(q)·φ(k) not divided by their row's sum"

    def overflow(self, stage: str, at: Any) -> tuple[str, str, str] | None:
        """Its values past float64 in place of the weights, and a zero denominator, each naming its row
        (core/part_questions.py)."""
        if stage != "state":
            return None
        for what, array in (("φ(Q)", self.phi_Q), ("φ(K)", self.phi_K), ("the state S", self.S), ("z", self.z),
                            ("φ(q)ᵀS", self.numer)):
            if (where := at.first(array)) is not None:
                return what, f"{at.head}: values in {what} of [linear] overflow float64 at {where}", \
                    "expected smaller Q and K (or V)"
        if self.spec.normalize and (row := zero_row(self.denom)) is not None:
            return "denominator", (f"{at.head}: [linear]'s denominator φ(q)ᵀz is 0 at {at.row(row)}"
                                   " (every φ(q)·φ(k) of the row is 0), so the row cannot be divided by it"), \
                "expected feature = \"elu1\" (never 0) or normalize = false"
        return None


def feature(x: Matrix, kind: str, policy: Policy = EXACT) -> Matrix:
    """φ cell by cell: elu(x) + 1 (x + 1 above 0, e^x at or below), max(x, 0), or x itself."""
    if kind == "elu1":
        with np.errstate(over="ignore"):
            # e^x only where it is used (x ≤ 0), so a large x never overflows an unused branch
            out = np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0.0)))  # (rows, d)
    elif kind == "relu":
        out = np.maximum(x, 0.0)
    else:
        out = np.array(x, dtype=np.float64)
    return policy.table(out)


def _dot(policy: Policy, a: Matrix, b: Matrix) -> Matrix:
    """Σ a·b over the last axis with each product written down, then the sum (a dot product by hand)."""
    return policy.worked(policy.worked(a * b).sum(axis=-1))


def linear_forward(Q: Matrix, K: Matrix, V: Matrix, allow: np.ndarray, spec: LinearSpec,
                   policy: Policy = EXACT) -> LinearForward:
    """Both forms for Queries and Keys as they are fed to φ (n, d_k) and Values (n, d_v)."""
    phi_Q, phi_K = feature(Q, spec.feature, policy), feature(K, spec.feature, policy)
    scores = policy.table(policy.matmul(phi_Q, phi_K.T))  # (n, n)
    masked = np.where(allow, scores, 0.0)  # (n, n)
    n, d_k = phi_Q.shape
    d_v = V.shape[1]
    if spec.normalize:
        row_sum = policy.worked(masked.sum(axis=1))  # (n,)
        weights = policy.table(masked / safe(row_sum)[:, None])  # (n, n)
    else:
        row_sum, weights = np.ones(n), masked
    output = policy.table(policy.matmul(weights, V))  # (n, d_v)
    S = np.zeros((n, d_k, d_v))
    z = np.zeros((n, d_k))
    prev_S, prev_z = np.zeros((d_k, d_v)), np.zeros(d_k)
    for t in range(n):
        prev_S = policy.worked(prev_S + policy.worked(phi_K[t][:, None] * V[t][None, :]))  # (d_k, d_v)
        prev_z = policy.worked(prev_z + phi_K[t])  # (d_k,)
        S[t], z[t] = prev_S, prev_z
    numer = policy.table(policy.worked(phi_Q[:, :, None] * S).sum(axis=1))  # (n, d_v): Σ_i φ(q_t)_i·S_t[i, j]
    denom = _dot(policy, phi_Q, z) if spec.normalize else np.ones(n)  # (n,)
    recurrent = policy.table(numer / safe(denom)[:, None])  # (n, d_v)
    arrays = (phi_Q, phi_K, scores, masked, row_sum, weights, output, S, z, numer, denom, recurrent)
    for a in arrays:
        a.setflags(write=False)
    return LinearForward(spec, *arrays)


def safe(denominator: Matrix) -> Matrix:
    """A zero denominator is refused by the engine, naming its row; here it only must not warn on the way."""
    return np.where(denominator == 0, np.nan, denominator)


def zero_row(denominator: Matrix) -> int | None:
    """The first row whose denominator is 0 (or too small to divide by), or None."""
    with np.errstate(divide="ignore", over="ignore"):
        bad = ~np.isfinite(np.divide(1.0, denominator))
    return int(np.argmax(bad)) if bad.any() else None


def as_attended(lin: LinearForward, allow: np.ndarray) -> Attended:
    """Linear attention's quadratic form in the softmax's places, so that Mix, Concat and the exports read it
    as they read a softmax head: its scores, the masked scores (−∞ where the mask forbids, as every masked
    input is kept), the masked scores again as the row's terms, each row's sum and the divided weights."""
    logits = frozen(np.where(allow, lin.scores, -np.inf))  # (n, n)
    row_max = frozen(np.zeros(len(lin.row_sum)))  # (n,) nothing is subtracted: φ(q)·φ(k) is never exponentiated
    return Attended(1.0, lin.scores, lin.scores, None, logits,
                    SoftmaxRows(row_max, lin.masked, lin.row_sum, lin.weights, None), lin.output)
