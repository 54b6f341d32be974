"""What the rows of X are: ``[input]`` (docs/scenario-format.md).

A hand-made scenario's X is token embeddings, as on the seed page, and needs no table. A real
model's head reads something else from layer 1 on: the residual stream, the embeddings after every
earlier layer ran over them. The importers write the table so that the trace, the panes and the
exports can say which; a frozen head keeps it, and a hand-made file may use it too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from qkv_tui.base.values import kind as _kind
from qkv_tui.base.values import show as _show
from qkv_tui.core.variants.common import MAX_INDEX, Checker, choice, table_of

INPUT_KEYS = ("kind", "layer")
INPUT_KINDS = ("embedding", "embedding+position", "residual")


@dataclass(frozen=True)
class Input:
    kind: str = "embedding"  # token embeddings | token plus learned position embeddings | the residual stream
    layer: int | None = None  # "residual": the 0-based layer X enters (the stream after layers 0 … layer − 1)

    @property
    def is_embedding(self) -> bool:
        return self.kind != "residual"


def parse_input(v: Checker, doc: dict[str, Any]) -> Input:
    table = table_of(v, doc, "input")
    if table is None:
        return Input()
    v.known(table, INPUT_KEYS, "[input]")
    kind = choice(v, table.get("kind", "embedding"), "[input] kind", INPUT_KINDS)
    if kind != "residual":
        if "layer" in table:
            raise v.fail(f"[input] layer goes with kind = 'residual' (the layer X enters); kind is {kind!r}")
        return Input(kind)
    if "layer" not in table:
        raise v.fail("[input] kind = 'residual' needs layer, the 0-based layer X enters (1 or more)")
    layer = table["layer"]
    if isinstance(layer, bool) or not isinstance(layer, int) or not 1 <= layer <= MAX_INDEX:
        shown = _show(layer) if isinstance(layer, int) and not isinstance(layer, bool) else _kind(layer)
        raise v.fail(f"[input] layer = {shown}; expected a whole number from 1 to 2^53 (at layer 0, X is the embeddings)")
    return Input(kind, layer)
