"""ALiBi's field in the exports ([alibi]): each head's bias, slope·(pos_j − pos_i)."""

from __future__ import annotations

from qkv_tui.core.head import HeadResult
from qkv_tui.core.variants import alibi
from qkv_tui.edges.faces import At, ExportFace, Fields
from qkv_tui.kernels.softmax import Biased


def head(h: HeadResult) -> Fields:
    return [("bias", h.read(Biased, lambda b: b.bias))]


FACE = ExportFace(alibi.TABLE, head=head, head_at=At(before="kv_head"))
