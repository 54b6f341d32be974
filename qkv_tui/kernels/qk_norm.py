"""QK-norm ([qk_norm], Qwen3, Gemma 3, OLMo 2): RMSNorm on each query and key row before the scores (and before
RoPE turns them). A part of a head's pass (QKNormHead) that sets the Queries and Keys as scored, its record
(QKNormed) and the row norm it runs (qk_normalise, which a value norm runs too)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from qkv_tui.kernels.attention import HeadPass, PartSpec, frozen
from qkv_tui.kernels.norm import Normed, normalise
from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.stats import Matrix


def qk_normalise(M: Matrix, gamma: Matrix, eps: float, rows: Normed | None, policy: Policy = EXACT) -> Normed:
    """RMSNorm of each row of Q or K (rows, d_k): over the row itself, or with the statistics of the whole
    projection it was cut from (``rows``)."""
    done = normalise(policy, "rms", M, gamma[None, :], None, eps, rows)
    for a in (done.X_norm, done.spread, done.root):
        frozen(a)
    return done


def as_normed(K: Matrix) -> Normed:
    """Keys handed over already normed (by the layer that computed them) in the norm's record form: their
    statistics here are K's own."""
    spread = np.mean(K * K, axis=1)
    return Normed(K, np.zeros(K.shape[0]), spread, np.sqrt(spread), K)


@dataclass(frozen=True, eq=False)
class QKNormed:
    """QK-norm's record of one head ([qk_norm]): Q and K after the norm, each row's mean square and root."""

    Q_normed: Normed  # (n, d_k)
    K_normed: Normed  # (m, d_k)

    # the views' names of the Queries and Keys as scored, where no later part turns them (core/part_questions.py)
    scored_suffix: ClassVar[str] = "_norm"
    scored_word: ClassVar[str] = "normalised"
    scored_mark: ClassVar[str] = "\u0302"  # Q̂, K̂ in the arithmetic (a combining circumflex)
    back_suffix: ClassVar[str] = "_n"  # dQ_n, dK_n: the gradient at Q and K before the norm (teach/stages/grads.py)

    @property
    def Q_norm(self) -> Matrix:
        return self.Q_normed.X_norm

    @property
    def K_norm(self) -> Matrix:
        return self.K_normed.X_norm

    @property
    def Q_after(self) -> Matrix:
        """The Queries as this part leaves them (what RoPE turns, or what is scored)."""
        return self.Q_normed.X_norm

    def overflow(self, stage: str, at: Any) -> tuple[str, str, str] | None:
        """Q and K after the norm, past float64 (core/part_questions.py): its gains, or squares past float64."""
        if stage != "turned":
            return None
        said: tuple[str, str, str] | None = at.named((
            ("Q_norm", self.Q_norm, False, False, "expected a smaller gamma_q in [qk_norm], or Q whose squares float64 can hold"),
            ("K_norm", self.K_norm, True, False, "expected a smaller gamma_k in [qk_norm], or K whose squares float64 can hold")))
        return said

    @property
    def K_after(self) -> Matrix:
        return self.K_normed.X_norm


@dataclass(frozen=True, eq=False)
class QKNormHead(PartSpec):
    """QK-norm for one head: the gains of its Q and of its K/V head's K, and, where the norm runs over every
    head's columns together, each row's statistics over the whole projection (None: over the head's d_k)."""

    gamma_q: Matrix  # (d_k,)
    gamma_k: Matrix  # (d_k,)
    eps: float
    q_rows: Normed | None = None  # (n,) statistics of each token's whole query projection
    k_rows: Normed | None = None  # (m,) statistics of each token's whole key projection

    def before_score(self, p: HeadPass) -> None:
        """Normalise each query and key row (before RoPE turns them); a head sharing an earlier head's K/V head
        reuses its normalised Keys."""
        Q_normed = qk_normalise(p.Q, self.gamma_q, self.eps, self.q_rows, p.policy)
        earlier = p.shared_part(QKNormed)
        if earlier is not None:
            K_normed = earlier.K_normed
        elif p.K_given:
            K_normed = as_normed(p.K)
        else:
            K_normed = qk_normalise(p.K, self.gamma_k, self.eps, self.k_rows, p.policy)
        p.Q_turned = p.Q_used = Q_normed.X_norm
        p.K_turned = p.K_used = K_normed.X_norm
        p.records.append(QKNormed(Q_normed, K_normed))
