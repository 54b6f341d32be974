"""The attention sink's field in the exports (``sink``/``sinks``): each head's sink logit."""

from __future__ import annotations

from qkv_tui.core.head import HeadResult
from qkv_tui.core.variants import sinks
from qkv_tui.edges.faces import At, ExportFace, Fields
from qkv_tui.kernels.softmax import Sunk


def head(h: HeadResult) -> Fields:
    return [("sink", h.read(Sunk, lambda s: s.sink))]


FACE = ExportFace(sinks.KEYS, head=head, head_at=At(before="kv_head"))
