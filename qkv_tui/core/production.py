"""Settings of the production views: FlashAttention's tile size, and the paged KV cache's layout.

Two optional scenario tables (docs/scenario-format.md):

    [tiles]
    size = 2          # FlashAttention tile: query rows and key columns per tile (default 2)

    [cache]
    block_size = 2    # paged KV cache: token rows per physical block (default 2)
    prefill = 2       # tokens processed at once before decoding one at a time (default: half, rounded up)
    chunk = 1         # chunked prefill: tokens per chunk (default: half the prefill, rounded up)
    seed = 0          # the order in which the pool hands out free physical blocks (a seeded shuffle)

They change how the computation is scheduled, never its result: every view built on them
ends in a check that it equals plain attention.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from qkv_tui.base.values import kind as _kind
from qkv_tui.base.values import show as _show

TILES_KEYS = ("size",)
CACHE_KEYS = ("block_size", "prefill", "chunk", "seed")
LIMIT = 1 << 20  # a tile or block larger than this is a typo, not a teaching choice


@dataclass(frozen=True)
class ProductionSettings:
    tile: int = 2  # FlashAttention tile size B (query rows and key columns per tile)
    block_size: int = 2  # token rows per physical block of the paged cache
    prefill: int | None = None  # P; None: half the tokens, rounded up
    chunk: int | None = None  # C; None: half of P, rounded up
    seed: int = 0  # shuffles the pool's free list, so physical blocks are visibly not in order

    def prefill_for(self, n: int) -> int:
        return min(self.prefill, n) if self.prefill is not None else max(1, -(-n // 2))

    def chunk_for(self, n: int) -> int:
        prefill = self.prefill_for(n)
        return min(self.chunk, prefill) if self.chunk is not None else max(1, -(-prefill // 2))


def _whole(table: dict[str, Any], key: str, where: str, low: int, high: int, fail: Any) -> int | None:
    if key not in table:
        return None
    value = table[key]
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        said = f"= {_show(value)}" if isinstance(value, int) and not isinstance(value, bool) else f"is {_kind(value)}"
        raise fail(f"[{where}] {key} {said}; expected a whole number from {low} to {high}")
    return value


def _table(doc: dict[str, Any], name: str, allowed: tuple[str, ...], fail: Any) -> dict[str, Any]:
    table = doc.get(name, {})
    if not isinstance(table, dict):
        raise fail(f"{name} must be a table ([{name}]), got {_kind(table)}")
    for key in table:
        if key not in allowed:
            hint = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
            tail = f"; did you mean {hint[0]!r}?" if hint else f"; expected one of: {', '.join(allowed)}"
            raise fail(f"unknown key {_show(key)} in [{name}]{tail}")
    return table


def parse_production(doc: dict[str, Any], n: int, fail: Any) -> ProductionSettings:
    """The [tiles] and [cache] tables of a parsed scenario; ``fail(message)`` builds the error to raise."""
    tiles = _table(doc, "tiles", TILES_KEYS, fail)
    cache = _table(doc, "cache", CACHE_KEYS, fail)
    tile = _whole(tiles, "size", "tiles", 1, LIMIT, fail)
    block = _whole(cache, "block_size", "cache", 1, LIMIT, fail)
    prefill = _whole(cache, "prefill", "cache", 1, n, fail)
    chunk = _whole(cache, "chunk", "cache", 1, prefill if prefill is not None else n, fail)
    seed = _whole(cache, "seed", "cache", 0, 2**32 - 1, fail)
    return ProductionSettings(
        tile=2 if tile is None else tile,
        block_size=2 if block is None else block,
        prefill=prefill,
        chunk=chunk,
        seed=0 if seed is None else seed,
    )
