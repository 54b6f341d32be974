"""[deltanet] read backwards: each head's recurrence in the softmax's place (kernels/deltanet_backward.py), and, where
the table computes g and β from X̂ (W_a, A_log, dt_bias, W_b, as Qwen3-Next does), their weights' gradients and
their paths into X̂ (the layer's GatesBack)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from qkv_tui.core.grad_faces import GradFace, Path
from qkv_tui.core.variants import deltanet
from qkv_tui.kernels.attention_backward import AttendBack

if TYPE_CHECKING:
    from qkv_tui.core.engine import Computation
    from qkv_tui.core.gradients import HeadGrad
    from qkv_tui.core.head import HeadResult
    from qkv_tui.core.scenario import Matrix, Scenario
    from qkv_tui.kernels.deltanet_backward import DeltaBack, GatesBack
    from qkv_tui.kernels.policy import Policy


def map_back(sc: Scenario, h: HeadResult, dO_h: Matrix, p: Policy) -> tuple[AttendBack, DeltaBack] | None:
    """There is no softmax, so the AttendBack's dP, dS and dscaled are 0, read by no softmax stage (the JSON writes
    them null)."""
    if sc.deltanet is None:
        return None
    from qkv_tui.kernels.deltanet import DeltaForward  # with a scenario that has [deltanet]
    from qkv_tui.kernels.deltanet_backward import deltanet_backward

    db = deltanet_backward(dO_h, h.Q_used, h.K_used, h.V, h.need(DeltaForward), p)
    n = dO_h.shape[0]
    zero = np.zeros((n, n))
    return AttendBack(db.dv, zero, np.zeros(n), zero, zero, zero, db.dQ_used, db.dK_used, None), db


def layer_back(comp: Computation, heads: list[HeadGrad], p: Policy) -> tuple[GatesBack, list[Path]] | None:
    """g and β where computed from X̂: their weights' gradients, and their paths into dX̂."""
    dn = comp.scenario.deltanet
    if dn is None or (dn.g is not None and dn.beta is not None):
        return None
    from qkv_tui.kernels.deltanet import DeltaForward
    from qkv_tui.kernels.deltanet_backward import DeltaBack, gates_backward

    fwd = [hr.part(DeltaForward) for hr in comp.heads]
    back = [hg.part(DeltaBack) for hg in heads]
    assert all(f is not None for f in fwd) and all(b is not None for b in back)
    g = np.stack([f.g for f in fwd if f is not None], axis=1)  # (n, H)
    beta = np.stack([f.beta for f in fwd if f is not None], axis=1)
    dg = np.stack([b.dg for b in back if b is not None], axis=1)
    dbeta = np.stack([b.dbeta for b in back if b is not None], axis=1)
    gb = gates_backward(comp.X_in, g, beta, dg, dbeta, dn.W_a if dn.g is None else None, dn.A_log, dn.dt_bias,
                        dn.W_b if dn.beta is None else None, p)
    return gb, [(d, W) for d, W in ((gb.da, dn.W_a), (gb.db, dn.W_b)) if d is not None and W is not None]


FACE = GradFace(deltanet.TABLE, map_back=map_back, layer_back=layer_back)
