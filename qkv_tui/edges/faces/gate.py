"""The output gate's fields in the exports (``W_G``): each head's gate σ(X̂·W_G) and its gated output."""

from __future__ import annotations

from qkv_tui.core.gradients import Gradients
from qkv_tui.core.head import HeadResult
from qkv_tui.core.variants import gate
from qkv_tui.edges.faces import At, ExportFace, Fields
from qkv_tui.kernels.gate import Gated


def head(h: HeadResult) -> Fields:
    return [("gate", h.read(Gated, lambda g: g.gate)), ("gated_output", h.read(Gated, lambda g: g.gated))]


def grad_head(sc: object, g: Gradients, h: int) -> Fields:
    gb = g.heads[h].gate
    return [("dW_G", None if gb is None else gb.dW_G)]


FACE = ExportFace(gate.KEYS, head=head, head_at=At(after="b_V"), grad_head=grad_head, grad_head_at=At(after="dsink"))
