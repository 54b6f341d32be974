"""The computation as a person does it with pen and paper: every intermediate rounded.

The forward pass is the engine's own (qkv_tui/kernels) under the by-hand policy: each product,
sum, quotient and exponential is rounded to the shown number of decimals before it is used
again (kernels/policy.py, ByHand). The result has the same shape as the exact Computation, so
the trace and the screen work on either.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from qkv_tui.core.engine import (
    Computation,
    HeadResult,
    NormResult,
    around_spec,
    deltanet_gates,
    gate_fields,
    mla_results,
    normalize,
    qk_norms,
    turn_of,
)
from qkv_tui.core.scenario import Matrix
from qkv_tui.core.variants import Norm, Rope
from qkv_tui.kernels.attention import QKNormHead, frozen, head_forward
from qkv_tui.kernels.policy import ByHand
from qkv_tui.kernels.policy import hand_matmul as hand_matmul
from qkv_tui.kernels.policy import round_to as round_to

if TYPE_CHECKING:  # [deltanet]'s kernels load with a scenario that has it
    from qkv_tui.kernels.deltanet_parts import AroundSpec


def hand_head(
    head: HeadResult, X: Matrix, X_kv: Matrix, allow: np.ndarray, decimals: int,
    rope: Rope | None = None, positions: tuple[int, ...] | None = None, qk_norm: QKNormHead | None = None,
    deltanet: tuple[Matrix, Matrix] | None = None, around: AroundSpec | None = None,
) -> HeadResult:
    """The exact head ``head`` worked again by hand: its own K and V, its bias slope·(j − i) written down rounded."""
    f = head_forward(X, X_kv, head.W_Q, head.W_K, head.W_V, head.b_Q, head.b_K, head.b_V, allow, head.scale,
                     turn=turn_of(rope, positions, head.d_k, ByHand(decimals)) if positions is not None else None,
                     bias=head.bias, sink=head.sink, qk_norm=qk_norm, policy=ByHand(decimals), softcap=head.softcap,
                     W_G=head.W_G, linear=None if head.linear is None else head.linear.spec,
                     deltanet=deltanet, around=around)
    a, soft = f.attended, f.attended.softmax
    return replace(head, scale=a.divisor, Q=f.Q, K=f.K, V=f.V, scores=a.scores, scaled=a.scaled, masked=a.masked,
                   row_max=soft.row_max, exps=soft.exps, row_sum=soft.row_sum, weights=soft.weights, output=a.output,
                   Q_rot=f.Q_rot, K_rot=f.K_rot, bias=a.bias, sink_exp=soft.sink_exp, Q_normed=f.Q_normed,
                   K_normed=f.K_normed, capped=a.capped, **gate_fields(head.W_G, f), linear=f.linear,
                   deltanet=f.deltanet, around=f.around)


def hand_norm(norm: Norm, X: Matrix, decimals: int) -> NormResult:
    """The norm by hand: the row's mean and mean square (or variance), the root, then each cell."""
    return normalize(norm, X, ByHand(decimals))


def compute_hand(comp: Computation, decimals: int) -> Computation:
    """The same scenario worked by hand at ``decimals`` places (the exact computation's shapes, rounded values)."""
    sc = comp.scenario
    norm = hand_norm(sc.norm, sc.X, decimals) if sc.norm is not None else None
    X_in = sc.X if norm is None else norm.X_norm
    X_kv = sc.X_kv if sc.is_cross else X_in
    qk = qk_norms(sc, X_in, X_kv, ByHand(decimals))
    dn = deltanet_gates(sc, X_in, ByHand(decimals))
    heads = tuple(hand_head(h, X_in, X_kv, sc.allow, decimals, sc.rope, sc.positions, qk[i],
                            None if dn is None else (dn[0][:, i], dn[1][:, i]), around=around_spec(sc, i))
                  for i, h in enumerate(comp.heads)) if sc.mla is None else tuple(mla_results(sc, X_in, ByHand(decimals)))
    concat = np.concatenate([h.joined for h in heads], axis=1)  # (n, sum d_v)
    output = hand_matmul(concat, comp.W_O, decimals) if comp.W_O is not None else concat  # (n, d_out)
    if comp.b_O is not None:
        output = round_to(output + comp.b_O[None, :], decimals)
    return Computation(sc, heads, frozen(concat), comp.W_O, frozen(output), hand_decimals=decimals, norm=norm,
                       b_O=comp.b_O)
