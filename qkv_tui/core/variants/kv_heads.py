"""Grouped-query (and multi-query) attention: query heads that share K/V heads; ``num_kv_heads`` in
``[attention]``, ``kv_head`` in a ``[[heads]]`` table (docs/scenario-format.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from qkv_tui.base.values import kind as _kind
from qkv_tui.base.values import show as _show
from qkv_tui.core.variants.common import MAX_INDEX, Checker, Features, Keys, Lookalikes
from qkv_tui.kernels.sharing import KVHead
from qkv_tui.kernels.sharing import kv_head_of as kv_head_of  # re-exported: the loader cuts [attention] with it

HEAD_KEY = "kv_head"
ATTENTION_KEY = "num_kv_heads"
# The same slip of form as the sinks' (sinks.py): the message renames the key for the table it is in.
LOOKALIKES: Lookalikes = {
    ("[attention]", "kv_head"): ("num_kv_heads", "[attention] says how many K/V heads the query heads share,"
                                                 " num_kv_heads = <count>; kv_head = <index> is the [[heads]] form"),
    ("[[heads]]", "num_kv_heads"): ("kv_head", "a [[heads]] table names the K/V head it reads, kv_head = <index>;"
                                               " num_kv_heads = <count> is the [attention] form"),
}


def parse_num_kv_heads(v: Checker, table: dict[str, Any], num_heads: int) -> int:
    if "num_kv_heads" not in table:
        return num_heads
    count = table["num_kv_heads"]
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise v.fail(f"[attention] num_kv_heads must be a whole number >= 1, got {_kind(count)}")
    if num_heads % count:
        raise v.fail(
            f"[attention] num_kv_heads = {count} does not divide num_heads = {num_heads};"
            " expected a divisor (each K/V head serves the same number of query heads)"
        )
    return count


def parse_kv_head(v: Checker, table: dict[str, Any], where: str, i: int, earlier: Sequence[KVHead],
                  kv: tuple[Any, ...]) -> int:
    """``kv_head`` in [[heads]]: the K/V head it reads (a real model's index); default its own index.
    Heads that name the same K/V head read the same Keys and Values, so they must carry the same W_K, W_V
    (``kv`` is this head's W_K, W_V, b_K, b_V; ``earlier`` the heads before it)."""
    if "kv_head" not in table:
        return i
    value = table["kv_head"]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise v.fail(f"{where} kv_head must be a whole number >= 0 (the K/V head it reads), got {_kind(value)}")
    if value > MAX_INDEX:
        raise v.fail(f"{where} kv_head is {_show(value)}, too large; expected a K/V head index from 0 to 2^53")
    for j, other in enumerate(earlier):
        theirs = (other.W_K, other.W_V, other.b_K, other.b_V)
        same = all((a is None and b is None) or (a is not None and b is not None and np.array_equal(a, b))
                   for a, b in zip(kv, theirs))
        if other.kv_head == value and not same:
            raise v.fail(
                f"{where} has kv_head = {value} like [[heads]] #{j + 1}, but different W_K, W_V or biases;"
                " expected heads that share a K/V head to carry the same K/V weights"
            )
    return value


def summary_parts(sc: Features) -> list[str]:
    count = sc.num_kv_heads
    return [] if count is None else [f"{count} K/V head{'s' if count != 1 else ''}"]


KEYS = Keys(summary_parts, LOOKALIKES)
