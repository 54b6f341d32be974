"""DeepSeek's multi-head latent attention (DeepSeek-V2 §2.1), on the kernels the other heads use.

The keys and values of every head come from one small latent per token, c_KV = X·W_DKV (RMS-normalised
where the model does); each head expands it (k_C = c_KV·W_UK, v_C = c_KV·W_UV) and adds the one rotary
key k_R = RoPE(X·W_KR) that all heads share. The queries are X·W_Q, or up from their own latent
c_Q = X·W_DQ (normalised where asked) through W_UQ; each head's columns are [nope | rope], DeepSeek's
order. A head scores q = [q_C; q_R] against k = [k_C; k_R] and attends as any head does (attention.py).

The absorbed form computes the same scores without expanding the keys: q_C·k_Cᵀ = (q_C·W_UKᵀ)·c_KVᵀ,
and the same output without expanding the values: weights·v_C = (weights·c_KV)·W_UV. It is what lets
the cache keep c_KV and k_R alone (docs/scenario-format.md, [mla]).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Protocol

import numpy as np

from qkv_tui.kernels.attention import Attended, HeadPass, PartSpec, frozen, project, scored
from qkv_tui.kernels.norm import Normed, normalise
from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.stats import Matrix


class Turning(Protocol):
    """What turns the rotary columns by position (kernels/mla_rope.py's Rotary): the layer's kernels only ask it."""

    @property
    def turns(self) -> bool: ...

    def turned(self, M: Matrix, policy: Policy = ...) -> Matrix: ...

    def turned_back(self, dM: Matrix, policy: Policy = ...) -> Matrix: ...


@dataclass(frozen=True, eq=False)
class MlaWeights:
    """The weights of one latent attention layer, as plain arrays (the kernels know no Scenario)."""

    num_heads: int
    d_nope: int
    d_v: int
    W_DKV: Matrix  # (d_model, d_c)
    W_UK: Matrix  # (d_c, num_heads·d_nope)
    W_UV: Matrix  # (d_c, num_heads·d_v)
    W_KR: Matrix  # (d_model, d_rope)
    W_Q: Matrix | None  # (d_model, num_heads·(d_nope + d_rope)); None where the queries have a latent
    W_DQ: Matrix | None  # (d_model, d_cq)
    W_UQ: Matrix | None  # (d_cq, num_heads·(d_nope + d_rope))
    gamma_kv: Matrix | None  # (d_c,) the latent's RMSNorm gains; None: no norm
    gamma_q: Matrix | None  # (d_cq,)
    eps: float

    @property
    def d_c(self) -> int:
        return int(self.W_DKV.shape[1])

    @property
    def d_qk(self) -> int:
        """A head's query and key width: its d_nope columns, then the rotary key's (W_KR's) columns."""
        return self.d_nope + int(self.W_KR.shape[1])

    def W_UK_of(self, h: int) -> Matrix:
        return self.W_UK[:, h * self.d_nope:(h + 1) * self.d_nope]  # (d_c, d_nope)

    def W_UV_of(self, h: int) -> Matrix:
        return self.W_UV[:, h * self.d_v:(h + 1) * self.d_v]  # (d_c, d_v)


@dataclass(frozen=True, eq=False)
class MlaShared:
    """What every head reads: the latents and the shared rotary key (as the policy keeps them)."""

    c_KV_raw: Matrix  # (n, d_c) X·W_DKV
    c_KV_normed: Normed | None  # its RMSNorm with the row statistics; None without kv_norm
    c_Q_raw: Matrix | None  # (n, d_cq) X·W_DQ; None with a plain W_Q
    c_Q_normed: Normed | None  # None without q_norm
    Q_all: Matrix  # (n, num_heads·(d_nope + d_rope)) every head's queries, before the rotation
    k_R_raw: Matrix  # (n, d_rope) X·W_KR
    k_R: Matrix  # (n, d_rope) turned by position (as k_R_raw without a rotation)

    @property
    def c_KV(self) -> Matrix:
        """The latent the heads expand, and all the cache keeps of the keys and values (with k_R)."""
        return self.c_KV_raw if self.c_KV_normed is None else self.c_KV_normed.X_norm

    @property
    def c_Q(self) -> Matrix | None:
        if self.c_Q_raw is None:
            return None
        return self.c_Q_raw if self.c_Q_normed is None else self.c_Q_normed.X_norm


@dataclass(frozen=True, eq=False)
class MlaHead:
    """One head of latent attention: its parts, the concatenations it scores, and the absorbed check."""

    shared: MlaShared
    q_C: Matrix  # (n, d_nope)
    q_R_raw: Matrix  # (n, d_rope) before the rotation
    q_R: Matrix  # (n, d_rope) turned by position
    k_C: Matrix  # (n, d_nope) c_KV·W_UK_h
    v_C: Matrix  # (n, d_v) c_KV·W_UV_h
    Q: Matrix  # (n, d_nope + d_rope) [q_C | q_R]: what is scored
    K: Matrix  # (n, d_nope + d_rope) [k_C | k_R]
    attended: Attended
    q_latent: Matrix  # (n, d_c) q_C·W_UK_hᵀ: the query moved into the latent's space
    absorbed_scores: Matrix  # (n, n) q_latent·c_KVᵀ + q_R·k_Rᵀ, the same as the scores
    latent_mix: Matrix  # (n, d_c) weights·c_KV
    absorbed_output: Matrix  # (n, d_v) latent_mix·W_UV_h, the same as the output
    records: tuple[object, ...] = ()  # the records of the head's parts from the scores on, in the order they ran

    # the display module that shows what the cache keeps of these heads (core/part_questions.face)
    faces: ClassVar[Mapping[str, str]] = MappingProxyType({"cache": "mla_cache"})
    # its heads project through the latent, not by W_Q, W_K and W_V (teach/stages/replaced.py heads_project), and
    # the module under teach/stages that titles the Q, K and V the later stages read of them
    projects: ClassVar[bool] = False
    titles: ClassVar[str] = "mla_parts"

    def overflow(self, stage: str, at: Any) -> tuple[str, str, str] | None:
        """The latent layer's own matrices, before the heads' Q, K and V they make (core/part_questions.py)."""
        if stage != "latent":
            return None
        shared = self.shared
        parts = (("c_KV = X̂·W_DKV", shared.c_KV_raw, "expected smaller X or W_DKV"),
                 ("c_KV after kv_norm", shared.c_KV, "expected a smaller gamma_kv"),
                 ("c_Q = X̂·W_DQ", shared.c_Q_raw, "expected smaller X or W_DQ"),
                 ("c_Q after q_norm", shared.c_Q, "expected a smaller gamma_q"),
                 ("k_R = X̂·W_KR", shared.k_R_raw, "expected smaller X or W_KR"))
        for what, array, hint in parts:
            if (where := at.first(array)) is not None:
                return what, f"values in [mla]'s {what} overflow float64 at {where}", hint
        return None


def mla_shared(X: Matrix, w: MlaWeights, rotary: Turning, policy: Policy = EXACT) -> MlaShared:
    """The latents c_KV (and c_Q) with their norms, every head's queries and the shared rotary key."""
    c_KV_raw = frozen(project(X, w.W_DKV, None, policy))  # (n, d_c)
    c_KV_normed = None if w.gamma_kv is None else _rms(c_KV_raw, w.gamma_kv, w.eps, policy)
    c_Q_raw = c_Q_normed = None
    if w.W_DQ is not None:
        assert w.W_UQ is not None
        c_Q_raw = frozen(project(X, w.W_DQ, None, policy))  # (n, d_cq)
        c_Q_normed = None if w.gamma_q is None else _rms(c_Q_raw, w.gamma_q, w.eps, policy)
        c_Q = c_Q_raw if c_Q_normed is None else c_Q_normed.X_norm
        Q_all = frozen(project(c_Q, w.W_UQ, None, policy))  # (n, H·(d_nope + d_rope))
    else:
        assert w.W_Q is not None
        Q_all = frozen(project(X, w.W_Q, None, policy))
    k_R_raw = frozen(project(X, w.W_KR, None, policy))  # (n, d_rope)
    k_R = rotary.turned(k_R_raw, policy)
    return MlaShared(c_KV_raw, c_KV_normed, c_Q_raw, c_Q_normed, Q_all, k_R_raw, k_R)


def mla_head(shared: MlaShared, w: MlaWeights, h: int, allow: np.ndarray, scale: float, rotary: Turning, *,
             X: Matrix | None = None, parts: Sequence[PartSpec] = (), policy: Policy = EXACT) -> MlaHead:
    """Head h: expand its keys and values from the latent, turn its rotary query, attend (with ``parts`` at their
    hooks from the scores on, as any head's: a bias or a soft-cap; ``X`` is what the queries were projected from),
    and work the absorbed form beside it."""
    start = h * w.d_qk
    q_C = frozen(np.ascontiguousarray(shared.Q_all[:, start:start + w.d_nope]))  # (n, d_nope)
    q_R_raw = frozen(np.ascontiguousarray(shared.Q_all[:, start + w.d_nope:start + w.d_qk]))  # (n, d_rope)
    q_R = rotary.turned(q_R_raw, policy)
    W_UK, W_UV = w.W_UK_of(h), w.W_UV_of(h)
    k_C = frozen(project(shared.c_KV, W_UK, None, policy))  # (n, d_nope)
    v_C = frozen(project(shared.c_KV, W_UV, None, policy))  # (n, d_v)
    Q = frozen(np.concatenate([q_C, q_R], axis=1))  # (n, d_qk)
    K = frozen(np.concatenate([k_C, shared.k_R], axis=1))  # (n, d_qk)
    p = HeadPass(Q if X is None else X, shared.c_KV, allow, scale, policy, None, Q, K, v_C, Q, K, Q, K)
    attended = scored(p, parts)
    q_latent = frozen(project(q_C, W_UK.T, None, policy))  # (n, d_c)
    # one dot of [q_latent | q_R] with [c_KV | k_R], as the screen works it (by hand: one running sum)
    absorbed_scores = frozen(policy.table(policy.matmul(np.concatenate([q_latent, q_R], axis=1),
                                                        np.concatenate([shared.c_KV, shared.k_R], axis=1).T)))  # (n, n)
    latent_mix = frozen(project(attended.softmax.weights, shared.c_KV, None, policy))  # (n, d_c)
    absorbed_output = frozen(project(latent_mix, W_UV, None, policy))  # (n, d_v)
    return MlaHead(shared, q_C, q_R_raw, q_R, k_C, v_C, Q, K, attended, q_latent, absorbed_scores, latent_mix,
                   absorbed_output, tuple(p.records))


def _rms(M: Matrix, gamma: Matrix, eps: float, policy: Policy) -> Normed:
    done = normalise(policy, "rms", M, gamma[None, :], None, eps)
    for a in (done.X_norm, done.spread, done.root):
        frozen(a)
    return done
