"""Generation with a KV cache, token by token, checked against full causal attention.

At decode step t the new token's Query is computed fresh, its Key and Value rows are
appended to the cache (earlier rows are reused, never recomputed), and the Query is
scored against the cached Keys only. Decoding is causal whatever mask the scenario
declares, so each step's output must equal row t of full causal attention. For
cross-attention the context's Keys and Values are computed once and reused at every step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from qkv_tui.core.engine import Computation, compute_head, softmax_rows
from qkv_tui.core.scenario import Matrix


@dataclass(frozen=True, eq=False)
class DecodeStep:
    """One head at one decode step t (0-based): the token being generated attends to the cache."""

    t: int
    head: int
    q: Matrix  # (d_k,) the new token's Query, computed fresh
    K_cache: Matrix  # (t + 1, d_k), or (m, d_k) for cross-attention
    V_cache: Matrix  # (t + 1, d_v), or (m, d_v)
    scores: Matrix  # (keys,)
    scaled: Matrix  # (keys,)
    weights: Matrix  # (keys,)
    output: Matrix  # (d_v,)
    reference: Matrix  # (d_v,) row t of full causal (or full cross) attention
    kv_computed: int  # Key/Value rows computed at this step (1 for self-attention; m, then 0, for cross)
    kv_reused: int  # cached rows read again instead of recomputed

    @property
    def max_error(self) -> float:
        return float(np.abs(self.output - self.reference).max())

    @property
    def matches(self) -> bool:
        return bool(np.allclose(self.output, self.reference, rtol=1e-12, atol=1e-12))


@dataclass(frozen=True, eq=False)
class Decode:
    """Every decode step of every head."""

    comp: Computation
    reference: tuple[Matrix, ...]  # per head (n, d_v): full causal attention (cross: the full computation)
    steps: tuple[tuple[DecodeStep, ...], ...]  # [head][t]

    @property
    def n(self) -> int:
        return self.comp.scenario.n

    def rows_computed(self, head: int, t: int) -> int:
        """Key/Value rows computed up to and including step t."""
        return sum(s.kv_computed for s in self.steps[head][: t + 1])

    def rows_reused(self, head: int, t: int) -> int:
        return sum(s.kv_reused for s in self.steps[head][: t + 1])

    def rows_without_cache(self, t: int) -> int:
        """Key/Value rows a decoder without a cache computes up to step t (all its keys, every step)."""
        m = self.comp.scenario.m
        return m * (t + 1) if self.comp.scenario.is_cross else (t + 1) * (t + 2) // 2


def causal_reference(comp: Computation) -> tuple[Matrix, ...]:
    """Full attention with a causal mask (cross-attention: the full computation, its own mask kept)."""
    sc = comp.scenario
    if sc.is_cross:
        return tuple(h.output for h in comp.heads)
    allow = np.tril(np.ones((sc.n, sc.n), dtype=bool))
    return tuple(compute_head(h, sc.X, sc.X, allow, sc.scale).output for h in sc.heads)


def decode(comp: Computation) -> Decode:
    """Replay the scenario as generation with a KV cache, for every head."""
    sc = comp.scenario
    reference = causal_reference(comp)
    all_steps = []
    for h, head in enumerate(sc.heads):
        divisor = math.sqrt(head.d_k) if sc.scale is None else sc.scale
        if sc.is_cross:
            K_full = sc.X_kv @ head.W_K  # (m, d_k): computed once, at the first step
            V_full = sc.X_kv @ head.W_V  # (m, d_v)
        # the cache: rows are written once, when their token arrives, and only read after that
        K_buf = np.empty((sc.n, head.d_k))
        V_buf = np.empty((sc.n, head.d_v))
        steps = []
        for t in range(sc.n):
            x = sc.X[t]  # (d_model,) the token being generated
            q = x @ head.W_Q  # (d_k,) fresh at every step: Queries are never cached
            if sc.is_cross:
                K, V = K_full, V_full
                computed, reused = (sc.m, 0) if t == 0 else (0, sc.m)
            else:
                K_buf[t] = x @ head.W_K  # only the new token's Key and Value are computed
                V_buf[t] = x @ head.W_V
                K, V = K_buf[: t + 1], V_buf[: t + 1]  # (t + 1, d_k), (t + 1, d_v): views, no copies
                computed, reused = 1, t
            scores = K @ q  # (keys,)
            scaled = scores / divisor
            # self-attention: every cached key is in the past, so the causal mask is implicit;
            # cross-attention keeps the scenario's mask on the context (padding, say)
            allowed = sc.allow[t] if sc.is_cross else np.ones(t + 1, dtype=bool)
            _, _, _, weights = softmax_rows(np.where(allowed, scaled, -np.inf)[None, :])
            output = weights[0] @ V  # (d_v,)
            steps.append(DecodeStep(t, h, q, K, V, scores, scaled, weights[0], output, reference[h][t], computed, reused))
        all_steps.append(tuple(steps))
    return Decode(comp, reference, tuple(all_steps))
