"""The attention sink's field in the exports (``sink``/``sinks``): each head's sink logit."""

from __future__ import annotations

from qkv_tui.core.head import HeadResult
from qkv_tui.core.scenario import Scenario
from qkv_tui.core.variants import sinks
from qkv_tui.edges.export_toml import number, vector
from qkv_tui.edges.faces import At, ExportFace, Fields
from qkv_tui.kernels.softmax import Sunk


def head(h: HeadResult) -> Fields:
    return [("sink", h.read(Sunk, lambda s: s.sink))]


def toml_attention(sc: Scenario) -> list[str]:
    if sc.heads[0].sink is None:
        return []
    return [f"sinks = {vector(h.sink for h in sc.heads if h.sink is not None)}"]


def toml_head(sc: Scenario, i: int) -> list[str]:
    sink = sc.heads[i].sink
    return [] if sink is None else [f"sink = {number(sink)}"]


FACE = ExportFace(sinks.KEYS, head=head, head_at=At(before="kv_head"), toml_attention=toml_attention,
                  toml_head=toml_head, toml_head_at=At(before="kv_head"))
