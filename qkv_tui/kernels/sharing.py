"""Grouped-query attention: which K/V head a query head reads, and when two heads' K and V are one computation."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from qkv_tui.kernels.stats import Matrix

KV_PROJECTIONS = ("W_K", "W_V", "b_K", "b_V")


class KVWeights(Protocol):
    """Anything with a head's K and V projections (a scenario's head, an engine's head result)."""

    @property
    def W_K(self) -> Matrix: ...
    @property
    def W_V(self) -> Matrix: ...
    @property
    def b_K(self) -> Matrix | None: ...
    @property
    def b_V(self) -> Matrix | None: ...


class KVHead(KVWeights, Protocol):
    @property
    def kv_head(self) -> int | None: ...  # a scenario's head may leave it unset (None: its own index)


def kv_head_of(head: int, num_heads: int, num_kv_heads: int) -> int:
    """The K/V head a query head reads in grouped-query attention: ⌊h · H_kv / H⌋."""
    return head * num_kv_heads // num_heads


def same_projection(a: Matrix | None, b: Matrix | None) -> bool:
    """The same projection: one slice shared by the loader, or equal numbers given twice."""
    if a is None or b is None:
        return a is b
    return a is b or (a.shape == b.shape and bool(np.array_equal(a, b)))


def same_kv_weights(a: KVWeights, b: KVWeights) -> bool:
    """Two heads whose K and V projections (weights and biases) are the same: their K and V are one computation."""
    return all(same_projection(getattr(a, r), getattr(b, r)) for r in KV_PROJECTIONS)


def shares_kv(a: KVHead, b: KVHead) -> bool:
    """Two query heads read one K/V head: the same K/V head and the same projections, so K and V are computed once."""
    return a.kv_head == b.kv_head and same_kv_weights(a, b)


def kv_owners(kv_heads: Sequence[int], heads: Sequence[KVWeights]) -> list[int]:
    """For each query head, the first query head that reads the same K/V head with the same weights
    (itself where none does): whose K and V it reads, and where they are shown once."""
    owners: list[int] = []
    for h, head in enumerate(heads):
        owner = h
        for g in range(h):
            if owners[g] == g and kv_heads[g] == kv_heads[h] and same_kv_weights(heads[g], head):
                owner = g
                break
        owners.append(owner)
    return owners
