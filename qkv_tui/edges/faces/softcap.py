"""The soft-cap's field in the exports (``softcap``): each head's capped scores, c·tanh(scaled / c)."""

from __future__ import annotations

from qkv_tui.core.head import HeadResult
from qkv_tui.core.variants import softcap
from qkv_tui.edges.faces import At, ExportFace, Fields
from qkv_tui.kernels.softmax import Capped


def head(h: HeadResult) -> Fields:
    return [("capped", h.read(Capped, lambda c: c.capped))]


FACE = ExportFace(softcap.KEYS, head=head, head_at=At(after="b_V"))
