"""The attention sink's trainable array (``sinks``): each head's sink logit, a 0-d array while it steps."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from qkv_tui.core.trained import TrainFace, Weight, with_heads
from qkv_tui.core.variants import sinks

if TYPE_CHECKING:
    from qkv_tui.core.gradients import Gradients
    from qkv_tui.core.scenario import Matrix, Scenario


def head(sc: Scenario, g: Gradients, h: int) -> list[Weight]:
    logit, grad = sc.heads[h].sink, g.heads[h].attend.dsink

    def put(s: Scenario, new: Matrix) -> Scenario:
        return with_heads(s, (h,), sink=float(new))

    return [Weight("sinks", "sink", h, None if logit is None else np.array(logit),
                   None if grad is None else np.array(grad), put, bare=True)]


FACE = TrainFace(sinks.KEYS, head=head)
