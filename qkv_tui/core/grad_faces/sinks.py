"""The attention sink read backwards: each row's sink share, for the softmax backward (kernels/attention_backward.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from qkv_tui.core.grad_faces import GradFace
from qkv_tui.core.variants import sinks
from qkv_tui.kernels.sinks import Sunk

if TYPE_CHECKING:
    from qkv_tui.core.head import HeadResult


def options(h: HeadResult) -> Mapping[str, Any]:
    sunk = h.part(Sunk)
    return {} if sunk is None else {"beside_share": sunk.sink_exp / h.row_sum}  # (n,) each row's sink weight


FACE = GradFace(sinks.KEYS, options=options)
