"""[rope] as a part of a head's pass: each head's Queries and Keys turned by position (kernels/rope.py), built for
core/head_parts.py's HEAD_PARTS; ``turn_of`` is RoPE's cos and sin, which [mla]'s heads, the by-hand pages and
the backward read too; ``rotate`` turns a matrix by a [rope] outside a head's pass (the tests' own checks)."""

from __future__ import annotations

from typing import Any

from qkv_tui.core import part_questions as ask
from qkv_tui.core.variants.rope import Rope
from qkv_tui.kernels.attention import PartSpec, Turn
from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.rope import RopeSpec
from qkv_tui.kernels.rope import rotate as rotate_kernel
from qkv_tui.kernels.stats import Matrix


def turn_of(rope: Rope | None, positions: tuple[int, ...] | None, d_k: int, policy: Policy = EXACT) -> Turn | None:
    """RoPE's cos and sin for every token's position, for heads of width d_k; None without rope."""
    return None if rope is None else rope.turn_at(positions, d_k, policy)


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
        # a head whose scores each read a block of its columns (differential attention's halves) has each block
        # turned on its own, as a head of the block's width
        d_k = sc.heads[h].d_k
        width = ask.score_width(sc, d_k)
        return RopeSpec(rope.turn_at(sc.positions, width, run.policy), None if width == d_k else width)
    return spec
