"""Grouped-query (and multi-query) attention: query heads that share K/V heads; ``num_kv_heads`` in
``[attention]``, ``kv_head`` in a ``[[heads]]`` table (docs/scenario-format.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from qkv_tui.base.values import kind as _kind
from qkv_tui.base.values import show as _show
from qkv_tui.core.variants.common import MAX_INDEX, Checker, Features, Keys, Lookalikes, write_whole
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
        raise v.fail(f"[attention] num_kv_heads must be a whole number >= 1, got {_kind(count)}{write_whole(count, 1)}")
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
        raise v.fail(f"{where} kv_head must be a whole number >= 0 (the K/V head it reads), got {_kind(value)}"
                     f"{write_whole(value, 0)}")
    if value > MAX_INDEX:
        raise v.fail(f"{where} kv_head is {_show(value)}, too large; expected a K/V head index from 0 to 2^53")
    for j, other in enumerate(earlier):
        if other.kv_head != value:
            continue
        theirs = (other.W_K, other.W_V, other.b_K, other.b_V)
        differ = [name for name, a, b in zip(("W_K", "W_V", "b_K", "b_V"), kv, theirs, strict=True)
                  if not ((a is None and b is None) or (a is not None and b is not None and np.array_equal(a, b)))]
        if differ:
            first = f"[[heads]] #{j + 1}"
            raise v.fail(f"{where} has kv_head = {value} like {first}, but {_differ(differ, kv, theirs, first)};"
                         " expected heads that share a K/V head to carry the same K/V weights")
    return value


def _differ(names: list[str], mine: tuple[Any, ...], theirs: tuple[Any, ...], other: str) -> str:
    """Which of W_K, W_V, b_K, b_V differ (``names``), said as a person would fix them: a weight both carry
    with other numbers, or a bias one of the two heads gives and the other does not."""
    order = ("W_K", "W_V", "b_K", "b_V")
    both = [n for n in names if mine[order.index(n)] is not None and theirs[order.index(n)] is not None]
    parts = [("a different " if len(both) == 1 else "different ") + _and(both)] if both else []
    for n in names:
        if mine[order.index(n)] is None and theirs[order.index(n)] is not None:
            parts.append(f"no {n}, which {other} has")
        elif theirs[order.index(n)] is None and mine[order.index(n)] is not None:
            parts.append(f"{n}, which {other} has not")
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + ", and " + parts[-1]


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def summary_parts(sc: Features) -> list[str]:
    count = sc.num_kv_heads
    return [] if count is None else [f"{count} K/V head{'s' if count != 1 else ''}"]


KEYS = Keys(summary_parts, LOOKALIKES)
