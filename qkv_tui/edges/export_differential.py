"""The JSON export's ``"differential"`` field (contracts §14), read from each head's DiffForward record.

Written only where the scenario has [differential], so no other scenario's document changes: ``lambda_init``
and per head λ, ``scores_2`` (Q₂K₂ᵀ before the scale), both maps' softmax weights and ``normed`` (the
sub-norm's output before the (1 − λ_init) factor). The head's own ``weights`` and ``output`` in ``"heads"`` are
the map that multiplies V and the output after the factor (core/differential_part.py).
"""

from __future__ import annotations

from typing import Any

from qkv_tui.core.engine import NormResult, iter_heads
from qkv_tui.core.scenario import Scenario
from qkv_tui.core.variants.differential import TABLE
from qkv_tui.edges.export_grad import Fields, Nested, WriteFields
from qkv_tui.kernels.differential import DiffForward


def head_fields(f: DiffForward) -> Fields:
    return [("lambda", f.lam.value), ("scores_2", f.map_2.scores), ("weights_1", f.map_1.weights),
            ("weights_2", f.map_2.weights), ("normed", f.normed)]


def differential_parts(sc: Scenario, norm: NormResult | None, write_fields: WriteFields) -> Fields:
    """``[("differential", …)]`` where the scenario has the table; nothing otherwise."""
    df: Any = TABLE.of(sc)
    if df is None:
        return []
    heads = [head_fields(h.need(DiffForward)) for h in iter_heads(sc, norm)]
    return [("differential", Nested(write_fields, fields=[("lambda_init", float(df.lambda_init)),
                                                          ("heads", Nested(write_fields, items=heads))]))]
