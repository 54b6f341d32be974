"""RoPE's fields in the exports ([rope]): each head's turned Queries and Keys, and the frequencies it turns by."""

from __future__ import annotations

from typing import Any

from qkv_tui.core.head import HeadResult
from qkv_tui.core.scenario import Scenario
from qkv_tui.core.variants import rope
from qkv_tui.edges.faces import At, ExportFace, Fields
from qkv_tui.kernels.rope import Rotated


def head(h: HeadResult) -> Fields:
    return [("Q_rot", h.read(Rotated, lambda r: r.Q_rot)), ("K_rot", h.read(Rotated, lambda r: r.K_rot))]


def document(sc: Scenario, norm: Any, write_fields: Any) -> Fields:
    """The frequencies RoPE turns by, after scaling, with YaRN's attention factor and how many dims turn;
    null for plain RoPE (every dim turns at base^(−2i/d_k), all in "positions" and the heads' d_k) and without."""
    if sc.rope is None or not sc.heads or (sc.rope.partial == 1.0 and sc.rope.scaling is None):
        return [("rope", None)]
    d_k = sc.heads[0].d_k  # [rope] needs one d_k for every head
    return [("rope", {"inv_freq": sc.rope.inv_freq(d_k).tolist(), "attention_factor": sc.rope.attention_factor,
                      "rotated_dims": sc.rope.rotated(d_k)})]


FACE = ExportFace(rope.TABLE, head=head, head_at=At(before="kv_head"), document=document,
                  document_at=At(after="b_O"))
