"""QK-norm's trainable arrays ([qk_norm]): its gains γ_q and γ_k, as the file gives them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from qkv_tui.core.trained import TrainFace, Weight, in_table
from qkv_tui.core.variants import qk_norm

if TYPE_CHECKING:
    from qkv_tui.core.gradients import Gradients
    from qkv_tui.core.scenario import Scenario


def layer(sc: Scenario, g: Gradients) -> list[Weight]:
    qk = sc.qk_norm
    if qk is None:
        return []
    return [Weight("gamma_q", "gamma_q", None, qk.gamma_q, g.dgamma_q, in_table("qk_norm", "gamma_q")),
            Weight("gamma_k", "gamma_k", None, qk.gamma_k, g.dgamma_k, in_table("qk_norm", "gamma_k"))]


FACE = TrainFace(qk_norm.TABLE, layer=layer, layer_before="W_U")
