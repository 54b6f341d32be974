"""The attention sink's field in the exports (``sink``/``sinks``): each head's sink logit."""

from __future__ import annotations

from typing import Any

import numpy as np

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


def sgd_table(by_key: dict[str, Any], h: int, lr: float, d: int) -> Any:
    """Head h's new sink logit: the sinks table's column h, less lr times the head's dsink."""
    from qkv_tui.edges.worksheet.sgd import STAGE
    from qkv_tui.kernels.policy import round_to
    from qkv_tui.teach.stages.printed import Table

    logits, g = by_key.get("sinks"), by_key.get(f"dsink.{h}")
    if logits is None or g is None or h >= logits.values.shape[1] or not np.isfinite(logits.values[0, h]):
        return None
    with np.errstate(over="ignore", invalid="ignore"):
        new = round_to(np.array([[logits.values[0, h] - lr * g.values[0, 0]]]), d)
    if not np.isfinite(new).all():
        return None
    return Table(f"sgd.sink.{h}", "new sink", "new sink = sink − lr·dsink", STAGE.key, h, new, ("sink",), ("new",),
                 False, True)


def sgd_operands(key: str) -> tuple[str, str, int] | None:
    """The sinks table, the head's dsink and its column, for a new-sink table's key."""
    if not key.startswith("sink."):
        return None
    h = int(key.partition(".")[2])
    return "sinks", f"dsink.{h}", h


FACE = ExportFace(sinks.KEYS, head=head, head_at=At(before="kv_head"), toml_attention=toml_attention,
                  toml_head=toml_head, toml_head_at=At(before="kv_head"), sgd_own=("sinks", sgd_table, sgd_operands))
