"""The JSON export's ``"ssd"`` field (contracts §15), read from each head's SsdRecord.

Written only where the scenario has [ssd], so no other scenario's document changes: per head its steps dt
(n), its per-token decays a = e^(dt·A) (n), the cumulative-decay mask L (n × n) and its y (n × d, the SSD's
output before any gate). The head's own ``weights`` and ``output`` in ``"heads"`` are the map L ∘ C·Bᵀ and the
head's output after the z-gate and the grouped RMSNorm where the table gives z (core/ssd_part.py).
"""

from __future__ import annotations

from qkv_tui.core.engine import NormResult, iter_heads
from qkv_tui.core.scenario import Scenario
from qkv_tui.core.ssd_part import SsdRecord
from qkv_tui.core.variants.ssd import TABLE
from qkv_tui.edges.export_grad import Fields, Nested, WriteFields


def ssd_parts(sc: Scenario, norm: NormResult | None, write_fields: WriteFields) -> Fields:
    """``[("ssd", …)]`` where the scenario has the table; nothing otherwise."""
    if TABLE.of(sc) is None:
        return []
    heads: list[Fields] = []
    for hr in iter_heads(sc, norm):
        s = hr.need(SsdRecord).ssd
        # vectors as JSON lists (the writer puts a matrix a row per line)
        heads.append([("dt", [float(v) for v in s.dt]), ("a", [float(v) for v in s.a]), ("L", s.L), ("y", s.y)])
    return [("ssd", Nested(write_fields, fields=[("heads", Nested(write_fields, items=heads))]))]
