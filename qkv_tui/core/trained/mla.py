"""Multi-head latent attention's trainable arrays ([mla]): the latent layer's own weights, which every head shares
(its heads hold no W_K or W_V of their own: their projections are the latent's, multiplied through)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from qkv_tui.core.trained import TrainFace, Weight, in_table
from qkv_tui.core.variants import mla

if TYPE_CHECKING:
    from qkv_tui.core.gradients import Gradients
    from qkv_tui.core.scenario import Scenario


def layer(sc: Scenario, g: Gradients) -> list[Weight]:
    m = sc.mla
    if m is None:
        return []
    from qkv_tui.kernels.mla_backward import MlaBack  # with a scenario that has [mla]

    back = g.part(MlaBack)
    if back is None:
        return []
    items = [("W_Q", m.W_Q, back.dW_Q), ("W_DKV", m.W_DKV, back.dW_DKV), ("W_UK", m.W_UK, back.dW_UK),
             ("W_UV", m.W_UV, back.dW_UV), ("W_KR", m.W_KR, back.dW_KR), ("W_DQ", m.W_DQ, back.dW_DQ),
             ("W_UQ", m.W_UQ, back.dW_UQ), ("gamma_kv", m.gamma_kv if m.kv_norm else None, back.dgamma_kv),
             ("gamma_q", m.gamma_q if m.q_norm else None, back.dgamma_q)]
    return [Weight(name, name, None, value, grad, in_table("mla", name)) for name, value, grad in items]


def owns_heads(sc: Scenario) -> bool:
    return sc.mla is not None


def heads_from(sc: Scenario) -> Scenario:
    """The heads' multiplied-through shapes, from the latent's weights as they now are."""
    assert sc.mla is not None
    heads = tuple(dataclasses.replace(head, W_Q=W_Q, W_K=W_K, W_V=W_V)
                  for head, (_, W_Q, W_K, W_V) in zip(sc.heads, sc.mla.head_weights(), strict=True))
    return dataclasses.replace(sc, heads=heads)


FACE = TrainFace(mla.TABLE, layer=layer, layer_before="W_O", owns_heads=owns_heads, heads_from=heads_from)
