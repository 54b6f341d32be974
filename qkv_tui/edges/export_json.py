"""The JSON export (contracts §3): every matrix of the computation at full float64 precision."""

from __future__ import annotations

import json
import math
from typing import Any

from qkv_tui.core.engine import Computation
from qkv_tui.core.scenario import Matrix


def _rows(array: Matrix) -> list[list[float]]:
    return [[float(v) for v in row] for row in array]


def _masked_rows(array: Matrix) -> list[list[float | None]]:
    return [[None if math.isinf(v) else float(v) for v in row] for row in array]


def to_data(comp: Computation) -> dict[str, Any]:
    """The computation as plain JSON-ready data, full float64 precision."""
    sc = comp.scenario
    heads = []
    for h in comp.heads:
        heads.append({
            "name": h.name, "d_k": h.d_k, "scale": h.scale,
            "W_Q": _rows(h.W_Q), "W_K": _rows(h.W_K), "W_V": _rows(h.W_V),
            "Q": _rows(h.Q), "K": _rows(h.K), "V": _rows(h.V),
            "scores": _rows(h.scores), "scaled": _rows(h.scaled), "masked": _masked_rows(h.masked),
            "weights": _rows(h.weights), "output": _rows(h.output),
        })
    return {
        "title": sc.title,
        "tokens": list(sc.tokens),
        "key_tokens": list(sc.key_tokens),
        "X": _rows(sc.X),
        "context_X": _rows(sc.context_X) if sc.context_X is not None else None,
        "mask": [[bool(v) for v in row] for row in sc.allow],
        "heads": heads,
        "concat": _rows(comp.concat),
        "W_O": _rows(comp.W_O) if comp.W_O is not None else None,
        "output": _rows(comp.output),
    }


def to_json(comp: Computation) -> str:
    return json.dumps(to_data(comp), indent=2, allow_nan=False) + "\n"
