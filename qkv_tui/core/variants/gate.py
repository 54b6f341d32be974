"""The output gate (Qwen3-Next, Qwen3.5; Qiu et al. 2025): each head's output times sigmoid(X̂·W_G), cell by
cell; ``W_G`` in each ``[[heads]]`` table, or one wide ``W_G`` in a ``[gate]`` table beside ``[attention]``
(docs/scenario-format.md, "[gate]").

A gate is on every head or on none: a model gates all its heads or none of them, and a half-gated file is
more likely a slip than a design.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from qkv_tui.base.values import kind as _kind
from qkv_tui.core.arrays import Matrix
from qkv_tui.core.variants.common import Checker, Context, Faces, Features, Keys, Reader, Trains

HEAD_KEY = "W_G"  # in a [[heads]] table
TABLE_KEY = "gate"  # the top-level [gate] table of the [attention] form
GATE_KEYS = ("W_G",)



def parse_head_gate(v: Reader, table: dict[str, Any], where: str, d_model: int, d_v: int) -> Matrix | None:
    """A [[heads]] table's own ``W_G``: d_model rows (what the Query projection reads), the head's d_v columns."""
    if HEAD_KEY not in table:
        return None
    W_G = v.matrix(table[HEAD_KEY], f"{where} W_G")
    _shape(v, W_G, f"{where} W_G", d_model, d_v, f"the head's d_v = {d_v} (one gate per output column)")
    return W_G


def every_head_or_none(v: Checker, gates: Sequence[Matrix | None], names: Sequence[str]) -> None:
    """Half a model gated is a slip: name the first head without a gate, and one with."""
    have = [g is not None for g in gates]
    if any(have) and not all(have):
        with_gate = names[have.index(True)]
        without = names[have.index(False)]
        raise v.fail(f"{without} has no W_G but {with_gate} has one; a gate is on every head or none:"
                     f" expected W_G in every [[heads]] table, or in none")


def no_table_with_heads(v: Checker, doc: dict[str, Any]) -> None:
    if TABLE_KEY in doc:
        raise v.fail("[gate] is the [attention] form of the output gate; with [[heads]] tables write"
                     " W_G = [[...]] (d_model × d_v) in each [[heads]] table instead")


def no_table_with_built_heads(v: Checker, doc: dict[str, Any], builder: str) -> None:
    """Heads a table builds itself (``builder``, its header: [mla]'s from its latent) have no W_G, so the [gate]
    table, the [attention] form of one, has no heads to gate."""
    if TABLE_KEY in doc:
        raise v.fail(f"{builder} has no output gate; remove [gate]")


def parse_wide_gate(v: Reader, doc: dict[str, Any], d_model: int, num_heads: int, d_v: int) -> tuple[Matrix | None, ...]:
    """``[gate] W_G``, d_model × (num_heads·d_v), cut into one d_model × d_v slice per query head."""
    if TABLE_KEY not in doc:
        return (None,) * num_heads
    table = doc[TABLE_KEY]
    if not isinstance(table, dict):
        raise v.fail(f"gate must be a table ([gate]), got {_kind(table)}")
    v.known(table, GATE_KEYS, "[gate]")
    if HEAD_KEY not in table:
        raise v.fail("[gate] is missing 'W_G'; expected W_G = [[...]], d_model × (num_heads·d_v)")
    wide = v.matrix(table[HEAD_KEY], "[gate] W_G")
    _shape(v, wide, "[gate] W_G", d_model, num_heads * d_v,
           f"num_heads × d_v = {num_heads} × {d_v} (one gate per column of every head's output)")
    parts = []
    for h in range(num_heads):
        part = np.ascontiguousarray(wide[:, h * d_v:(h + 1) * d_v])  # (d_model, d_v)
        part.setflags(write=False)
        parts.append(part)
    return tuple(parts)


def _shape(v: Checker, W_G: Matrix, key: str, d_model: int, cols: int, why: str) -> None:
    if W_G.shape[0] != d_model:
        raise v.fail(f"{key} has {W_G.shape[0]} rows; expected d_model = {d_model}"
                     " (the gate reads X̂, what the Query projection reads)")
    if W_G.shape[1] != cols:
        raise v.fail(f"{key} has {W_G.shape[1]} columns; expected {why}")


def summary_parts(sc: Features) -> list[str]:
    # HeadFeatures does not name W_G (the protocol is shared); the loader's Head has it
    return ["output gate"] if any(getattr(h, "W_G", None) is not None for h in sc.heads) else []


def trains(ctx: Context) -> tuple[str, ...]:
    """W_G in [backward]'s train list where a head has a gate."""
    return ("W_G",) if any(h.W_G is not None for h in ctx.head_tables) else ()  # the loader's Heads


KEYS = Keys(summary_parts, faces=Faces(head="qkv_tui.core.gate_part:gate_part", edit="qkv_tui.core.variants.gate_edit",
                                       # on each head's output, before Concat; backwards after dW_O
                                       stages=(("before:concat", "gate", "SPEC"), ("dwo", "gate", "BACKWARD"))),
            trains=Trains(("W_G",), "W_O", trains))
