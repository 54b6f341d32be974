"""The gated delta rule's trainable arrays ([deltanet]): W_a, A_log, dt_bias and W_b, where it computes g and β."""

from __future__ import annotations

from typing import TYPE_CHECKING

from qkv_tui.core.trained import TrainFace, Weight, in_table
from qkv_tui.core.variants import deltanet

if TYPE_CHECKING:
    from qkv_tui.core.gradients import Gradients
    from qkv_tui.core.scenario import Scenario


def layer(sc: Scenario, g: Gradients) -> list[Weight]:
    dn = sc.deltanet
    if dn is None:
        return []
    from qkv_tui.kernels.deltanet_backward import GatesBack  # with a scenario that has [deltanet]

    gb = g.part(GatesBack)
    if gb is None:
        return []
    return [Weight(name, name, None, getattr(dn, name), grad, in_table("deltanet", name))
            for name, grad in (("W_a", gb.dW_a), ("W_b", gb.dW_b), ("A_log", gb.dA_log), ("dt_bias", gb.ddt_bias))]


FACE = TrainFace(deltanet.TABLE, layer=layer, layer_before="W_U")
