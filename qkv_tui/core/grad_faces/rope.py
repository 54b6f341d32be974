"""RoPE read backwards: the gradients at the turned Queries and Keys turned back by the opposite angle."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from qkv_tui.core.grad_faces import GradFace
from qkv_tui.core.rope_part import turn_of
from qkv_tui.core.variants import rope
from qkv_tui.kernels.rope_backward import rotate_back

if TYPE_CHECKING:
    from qkv_tui.core.head import HeadResult
    from qkv_tui.core.scenario import Matrix, Scenario
    from qkv_tui.kernels.attention import Turn
    from qkv_tui.kernels.policy import Policy


def turn_back(sc: Scenario, h: HeadResult, dQ_rot: Matrix, dK_rot: Matrix, p: Policy,
              trig: Mapping[int, Turn] | None) -> tuple[Matrix, Matrix, Matrix, Matrix] | None:
    """``trig``: the cos and sin by d_k as a worksheet prints them; the scenario's own where None."""
    turn = turn_of(sc.rope, sc.positions, h.d_k, p) if trig is None else trig.get(h.d_k)
    if turn is None:
        return None
    return (dQ_rot, dK_rot, rotate_back(dQ_rot, turn.cos, turn.sin, turn.pairs, p),
            rotate_back(dK_rot, turn.cos, turn.sin, turn.pairs, p))


FACE = GradFace(rope.TABLE, turn_back=turn_back)
