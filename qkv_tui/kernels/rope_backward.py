"""RoPE read backwards: the gradient before the turn from the gradient after it (docs/backward.md)."""

from __future__ import annotations

from collections.abc import Sequence

from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.rope import rotate
from qkv_tui.kernels.stats import Matrix


def rotate_back(dM: Matrix, cos: Matrix, sin: Matrix, turned: Sequence[tuple[int, int]], policy: Policy = EXACT) -> Matrix:
    """The gradient before RoPE from the gradient after it: a rotation's transpose is the rotation by the
    opposite angle (−sin), and the dimensions in no pair pass straight through: (rows, d_k)."""
    return rotate(dM, cos, -sin, turned, policy)
