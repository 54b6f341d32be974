"""The JSON export's ``"indexer"`` field (contracts §15), read from the heads' Selection record.

Written only where the scenario has [indexer]: ``scores`` (n × n, I[t,s], null where the mask hides the key, as the
export writes every masked cell) and ``selected`` (n × n booleans, false where the mask hides the key). The
heads' own ``masked`` and ``weights`` in ``"heads"`` already carry the selection (−∞ / 0 where a key is dropped).
"""

from __future__ import annotations

from typing import Any

from qkv_tui.core.engine import NormResult, iter_heads
from qkv_tui.core.indexer_part import Selection
from qkv_tui.core.scenario import Scenario
from qkv_tui.core.variants.indexer import TABLE
from qkv_tui.edges.export_grad import Fields, Nested, WriteFields


def _nulls(scores: Any) -> list[list[float | None]]:
    """Rows of floats, −∞ as None: the export's writer takes −∞ only under ``masked``, so the rows go as lists."""
    return [[None if v == float("-inf") else float(v) for v in row] for row in scores.tolist()]


def indexer_fields(sc: Scenario, norm: NormResult | None, write_fields: WriteFields) -> Fields:
    """``[("indexer", …)]`` where the scenario has the table; nothing otherwise."""
    if TABLE.of(sc) is None:
        return []
    first = next(iter_heads(sc, norm))  # one selection for the layer: every head holds the same record
    ix = first.need(Selection).indexed
    return [("indexer", Nested(write_fields, fields=[("scores", _nulls(ix.scores)), ("selected", ix.selected)]))]
