"""Attention sinks: one extra logit per head that takes part of the softmax and adds nothing to the
output; ``sink`` in a ``[[heads]]`` table, ``sinks`` in ``[attention]`` (docs/scenario-format.md)."""

from __future__ import annotations

from typing import Any

from qkv_tui.core.variants.common import Checker, Context, Faces, Features, Keys, Lookalikes, Trains, number, numbers

HEAD_KEY = "sink"
ATTENTION_KEY = "sinks"
# A key with a twin in the other way of writing heads is a slip of form, so the message renames it
# rather than sending it to the other table.
LOOKALIKES: Lookalikes = {
    ("[[heads]]", "sinks"): ("sink", "a [[heads]] table takes its own sink = <logit>;"
                                     " sinks = [...], one logit per query head, is the [attention] form"),
    ("[attention]", "sink"): ("sinks", "[attention] takes sinks = [...], one logit per query head;"
                                       " sink = <logit> is the [[heads]] form"),
}


def parse_sink(v: Checker, table: dict[str, Any], key: str) -> float | None:
    if "sink" not in table:
        return None
    return number(v, table["sink"], key, "a finite number (the sink's logit)")


def parse_sinks(v: Checker, table: dict[str, Any], heads: int) -> tuple[float | None, ...]:
    if "sinks" not in table:
        return (None,) * heads
    sinks = numbers(v, table["sinks"], "[attention] sinks", heads, "one sink logit per query head, num_heads")
    return tuple(float(s) for s in sinks)


def summary_parts(sc: Features) -> list[str]:
    return ["sink"] if any(h.sink is not None for h in sc.heads) else []


def trains(ctx: Context) -> tuple[str, ...]:
    """Each head's sink logit in [backward]'s train list (one name for them all) where a head has one."""
    return ("sinks",) if any(h.sink is not None for h in ctx.head_tables) else ()


KEYS = Keys(summary_parts, LOOKALIKES, Faces(head="qkv_tui.core.sink_part:sink_part",
                                            edit="qkv_tui.core.variants.sink_edit"),
            Trains(("sinks",), "b_O", trains))
