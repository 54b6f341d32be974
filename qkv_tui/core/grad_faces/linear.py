"""[linear] read backwards in the softmax's place (kernels/linear_backward.py). Its AttendBack carries dV, dQ_used and
dK_used on to RoPE and the projections like a softmax head's; there is no softmax, so its dP, dS and dscaled are the
quadratic form's dweights and dA, read by no softmax stage, and the JSON writes them null."""

from __future__ import annotations

from typing import TYPE_CHECKING

from qkv_tui.core.grad_faces import GradFace
from qkv_tui.core.variants import linear
from qkv_tui.kernels.attention_backward import AttendBack

if TYPE_CHECKING:
    from qkv_tui.core.head import HeadResult
    from qkv_tui.core.scenario import Matrix, Scenario
    from qkv_tui.kernels.linear_backward import LinearBack
    from qkv_tui.kernels.policy import Policy


def map_back(sc: Scenario, h: HeadResult, dO_h: Matrix, p: Policy) -> tuple[AttendBack, LinearBack] | None:
    if sc.linear is None:
        return None
    from qkv_tui.kernels.linear import LinearForward  # with a scenario that has [linear]
    from qkv_tui.kernels.linear_backward import linear_backward

    lb = linear_backward(dO_h, h.Q_used, h.K_used, h.V, h.need(LinearForward), sc.allow, p)
    return AttendBack(lb.dV, lb.dweights, lb.D, lb.dA, lb.dA, lb.dA, lb.dQ_used, lb.dK_used, None), lb


FACE = GradFace(linear.TABLE, map_back=map_back)
