"""The output gate's fields in the exports (``W_G``): each head's gate σ(X̂·W_G) and its gated output."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from qkv_tui.core.head import HeadResult
from qkv_tui.core.scenario import Scenario
from qkv_tui.core.variants import gate
from qkv_tui.edges.export_toml import matrix
from qkv_tui.edges.faces import At, ExportFace, Fields
from qkv_tui.kernels.gate import Gated

if TYPE_CHECKING:  # the exports' gradients are read only where a scenario has [backward]
    from qkv_tui.core.gradients import Gradients


def head(h: HeadResult) -> Fields:
    return [("gate", h.read(Gated, lambda g: g.gate)), ("gated_output", h.read(Gated, lambda g: g.gated))]


def grad_head(sc: Scenario, g: Gradients, h: int) -> Fields:
    gb = g.heads[h].gate
    return [("dW_G", None if gb is None else gb.dW_G)]


def toml_attention(sc: Scenario) -> list[str]:
    """The gate's wide form: a table of its own after [attention]."""
    if sc.heads[0].W_G is None:
        return []
    return ["", "[gate]", f"W_G = {matrix(np.concatenate([h.W_G for h in sc.heads if h.W_G is not None], axis=1))}"]


def toml_head(sc: Scenario, i: int) -> list[str]:
    W_G = sc.heads[i].W_G
    return [] if W_G is None else [f"W_G = {matrix(W_G)}"]


FACE = ExportFace(gate.KEYS, head=head, head_at=At(after="b_V"), grad_head=grad_head, grad_head_at=At(after="dsink"),
                  toml_attention=toml_attention, toml_head=toml_head, toml_head_at=At(after="kv_head"),
                  sgd_head=(("W_G", (("W_G.{h}", "dW_G.{h}"),)),), sgd_head_at=At(before="b_Q"))
