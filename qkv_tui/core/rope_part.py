"""[rope] as a part of a head's pass: each head's Queries and Keys turned by position (kernels/rope.py), built for
core/head_parts.py's HEAD_PARTS; ``turn_of`` is RoPE's cos and sin, which [mla]'s heads, the by-hand pages and
the backward read too; ``rotate`` turns a matrix by a [rope] outside a head's pass (the tests' own checks)."""

from __future__ import annotations

from typing import Any

import numpy as np

from qkv_tui.core.variants.rope import Rope
from qkv_tui.kernels.attention import PartSpec, Turn
from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.rope import RopeSpec, angles_at
from qkv_tui.kernels.rope import rotate as rotate_kernel
from qkv_tui.kernels.stats import Matrix


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


def rotate(M: Matrix, rope: Rope, positions: tuple[int, ...]) -> Matrix:
    """RoPE: each pair (a, b) of a row at position p turns by p·θ_i (docs/scenario-format.md, `[rope]`)."""
    t = turn_of(rope, positions, M.shape[1])
    assert t is not None
    return rotate_kernel(M, t.cos, t.sin, t.pairs)


def rope_part(run: Any) -> Any:
    """Each head's turn where the scenario has [rope] (``run`` is core/head_parts.py's Run)."""
    sc, rope = run.sc, run.sc.rope
    if rope is None:
        return None

    def spec(h: int) -> PartSpec:
        turn = turn_of(rope, sc.positions, sc.heads[h].d_k, run.policy)
        assert turn is not None
        return RopeSpec(turn)
    return spec
