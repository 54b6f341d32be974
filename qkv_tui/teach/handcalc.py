"""The computation as a person does it with pen and paper: every intermediate rounded.

The forward pass is the engine's own (core/forward.py, on qkv_tui/kernels) under the by-hand policy:
each product, sum, quotient and exponential is rounded to the shown number of decimals before it is
used again (kernels/policy.py, ByHand). The result has the same shape as the exact Computation, so
the trace and the screen work on either.
"""

from __future__ import annotations

import numpy as np

from qkv_tui.core.engine import Computation, NormResult, normalize
from qkv_tui.core.forward import run_heads
from qkv_tui.core.scenario import Matrix
from qkv_tui.core.variants import Norm
from qkv_tui.kernels.attention import frozen
from qkv_tui.kernels.policy import ByHand
from qkv_tui.kernels.policy import hand_matmul as hand_matmul
from qkv_tui.kernels.policy import round_to as round_to


def hand_norm(norm: Norm, X: Matrix, decimals: int) -> NormResult:
    """The norm by hand: the row's mean and mean square (or variance), the root, then each cell."""
    return normalize(norm, X, ByHand(decimals))


def compute_hand(comp: Computation, decimals: int) -> Computation:
    """The same scenario worked by hand at ``decimals`` places (the exact computation's shapes, rounded values):
    each head with its own K and V, its exact head's divisor and ALiBi bias written down rounded."""
    sc = comp.scenario
    norm = hand_norm(sc.norm, sc.X, decimals) if sc.norm is not None else None
    X_in = sc.X if norm is None else norm.X_norm
    heads = tuple(run_heads(sc, X_in, ByHand(decimals), exact=comp.heads))
    concat = np.concatenate([h.joined for h in heads], axis=1)  # (n, sum d_v)
    output = hand_matmul(concat, comp.W_O, decimals) if comp.W_O is not None else concat  # (n, d_out)
    if comp.b_O is not None:
        output = round_to(output + comp.b_O[None, :], decimals)
    return Computation(sc, heads, frozen(concat), comp.W_O, frozen(output), hand_decimals=decimals, norm=norm,
                       b_O=comp.b_O)
