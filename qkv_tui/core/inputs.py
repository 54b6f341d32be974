"""What the rows of X are: ``[input]`` (docs/scenario-format.md).

A hand-made scenario's X is token embeddings, as on the seed page, and needs no table. A real
model's head reads something else from layer 1 on: the residual stream, the embeddings after every
earlier layer ran over them. The importers write the table so that the trace, the panes and the
exports can say which; a frozen head keeps it, and a hand-made file may use it too.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

from qkv_tui.base.fixed import fixed
from qkv_tui.base.values import kind as _kind
from qkv_tui.base.values import show as _show
from qkv_tui.core.layer_schedule import entry_error, kv_source, schedule_line
from qkv_tui.core.variants.common import MAX_INDEX, Checker, choice, table_of, write_whole

INPUT_KEYS = ("kind", "layer", "schedule")
INPUT_KINDS = ("embedding", "embedding+position", "residual", "embedding+position+type", "altup")


@fixed(eq=True)
class Input:
    """[input]: what the rows of X are (token embeddings, or a model's residual stream at a layer)."""

    kind: str = "embedding"  # token embeddings | token plus learned position embeddings | the residual stream
    # | "embedding+position+type": BERT's token, position and token-type embeddings summed, then LayerNormed
    # | "altup": Gemma 3n's active AltUp prediction entering the layer, after its input norm (what its attention reads)
    layer: int | None = None  # "residual", "altup": the 0-based layer X enters (the stream after layers 0 … layer − 1)
    # the model's layers, one entry each (core/layer_schedule.py); () = not given. Not part of equality:
    # it says where the layer sits in its model, not what X holds
    schedule: tuple[str, ...] = field(default=(), compare=False)

    @property
    def chosen_layer(self) -> int:
        """The layer whose attention the scenario shows: the one X enters (0 where X is the embeddings)."""
        return self.layer if self.layer is not None else 0

    @property
    def schedule_text(self) -> str:
        """The model's layer schedule as one line, the chosen layer marked; "" without a schedule."""
        return schedule_line(self.schedule, self.chosen_layer) if self.schedule else ""

    @property
    def kv_source_layer(self) -> int | None:
        """The layer whose K and V the chosen layer reuses (its schedule entry's " kv-from L"), or None."""
        return kv_source(self.schedule[self.chosen_layer]) if self.schedule else None

    @property
    def is_embedding(self) -> bool:
        return self.kind not in ("residual", "altup")


def parse_input(v: Checker, doc: dict[str, Any]) -> Input:
    table = table_of(v, doc, "input")
    if table is None:
        return Input()
    v.known(table, INPUT_KEYS, "[input]")
    kind = choice(v, table.get("kind", "embedding"), "[input] kind", INPUT_KINDS)
    if kind == "altup":  # what Gemma 3n's attention reads at any layer, 0 included
        layer = table.get("layer")
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer <= MAX_INDEX:
            raise v.fail("[input] kind = 'altup' needs layer, the 0-based layer whose attention reads X (0 or more)")
        return Input(kind, layer, _schedule(v, table, layer))
    if kind != "residual":
        if "layer" in table:
            raise v.fail(f"[input] layer goes with kind = 'residual' (the layer X enters); kind is {kind!r}")
        return Input(kind, None, _schedule(v, table, 0))
    if "layer" not in table:
        raise v.fail("[input] kind = 'residual' needs layer, the 0-based layer X enters (1 or more)")
    layer = table["layer"]
    if isinstance(layer, bool) or not isinstance(layer, int) or not 1 <= layer <= MAX_INDEX:
        shown = _show(layer) if isinstance(layer, int) and not isinstance(layer, bool) else _kind(layer)
        raise v.fail(f"[input] layer = {shown}; expected a whole number from 1 to 2^53 (at layer 0, X is the embeddings)"
                     f"{write_whole(layer, 1)}")
    return Input(kind, layer, _schedule(v, table, layer))


def _schedule(v: Checker, table: dict[str, Any], chosen: int) -> tuple[str, ...]:
    if "schedule" not in table:
        return ()
    raw = table["schedule"]
    if not isinstance(raw, list) or not raw:
        raise v.fail(f"[input] schedule must be a non-empty list of strings, one per layer of the model, got {_kind(raw)}")
    for i, entry in enumerate(raw):
        problem = entry_error(entry)
        if problem is not None:
            shown = _show(entry) if isinstance(entry, str) else _kind(entry)
            raise v.fail(f"[input] schedule[{i}] = {shown}; {problem}")
        source = kv_source(entry)
        if source is not None and (source >= i or kv_source(raw[source]) is not None):
            raise v.fail(f"[input] schedule[{i}] = {_show(entry)}; expected kv-from to name an earlier layer that"
                         " computes its own K and V")
    if chosen >= len(raw):
        raise v.fail(f"[input] schedule lists {len(raw)} layers, but X enters layer {chosen}; expected one entry per layer")
    return tuple(raw)
