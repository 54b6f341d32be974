"""The output gate's trainable array (``W_G``): each head's gate weights."""

from __future__ import annotations

from typing import TYPE_CHECKING

from qkv_tui.core.trained import TrainFace, Weight, in_head
from qkv_tui.core.variants import gate
from qkv_tui.kernels.gate_backward import GateBack

if TYPE_CHECKING:
    from qkv_tui.core.gradients import Gradients
    from qkv_tui.core.scenario import Scenario


def head(sc: Scenario, g: Gradients, h: int) -> list[Weight]:
    gb = g.heads[h].part(GateBack)
    return [Weight("W_G", "W_G", h, sc.heads[h].W_G, None if gb is None else gb.dW_G, in_head(h, "W_G"))]


FACE = TrainFace(gate.KEYS, head=head, head_before="b_Q")
