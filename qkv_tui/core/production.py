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
ends in a check that it equals plain attention. That check is :func:`agreement`: two float64
evaluations of one attention, summed in different orders, may differ by rounding alone, by
an amount that grows with the numbers involved; equal means within that bound.
"""

from __future__ import annotations

import difflib
import math
from typing import Any

import numpy as np

from qkv_tui.base.fixed import fixed
from qkv_tui.base.values import kind as _kind
from qkv_tui.base.values import show as _show
from qkv_tui.core.arrays import BoolMatrix, Matrix
from qkv_tui.core.variants.common import write_whole

Array = Matrix
U = 2.0**-53  # float64's unit roundoff: one rounding moves a number by at most this fraction of it
SAFETY = 4  # the bound below counts each rounding once; real sums of rounding errors stay far below
TILES_KEYS = ("size",)
CACHE_KEYS = ("block_size", "prefill", "chunk", "seed")
LIMIT = 1 << 20  # a tile or block larger than this is a typo, not a teaching choice


@fixed(eq=True)
class ProductionSettings:
    """[tiles] and [cache]: the FlashAttention tile and the paged cache's blocks, prefill and chunk."""

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
        raise fail(f"[{where}] {key} {said}; expected a whole number from {low} to {high}{write_whole(value, low, high)}")
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


def rounding_bound(q: Array, K: Array, V: Array, weights: Array, divisor: float, bias: Array | None = None,
                   rescales: int = 1, allow: BoolMatrix | None = None) -> Array:
    """(L, d_v): how far two float64 evaluations of softmax(q·Kᵀ/divisor + bias)·V may differ by rounding alone.

    The standard forward-error bound, term by term (u = 2⁻⁵³): each logit is a dot product of d_k terms,
    then a division and a bias, so it may be off by (d_k + 2)·u·Σ|q·k|/divisor + |bias| in absolute terms;
    an exponential e^(s − m) inherits that error (twice: in s and in the max m) as a relative one, and
    each weight twice that again after the normalisation, plus a rounding per term of the sum and per
    rescale (``rescales``: FlashAttention's tiles). The output sums S products w·V, so its error is at
    most that relative error times Σ w·|V|, plus S + 2 roundings of that size. Where the logits are
    too large for float64 to fix the weights at all (a relative error of 1 or more), any two weightings
    are possible: 2·max|V|. It depends only on the inputs' magnitudes, never on the order of a sum.
    ``weights`` (L, S) are 0 where masked; ``allow`` (L, S) says which keys each row may attend (default:
    every key). Logit errors and max|V| run over every key a row may attend, not only those with a weight:
    a score of −1e50 summed from terms of ±1e200 has an exact weight of 0, but summed in another order it
    is 0 and takes weight, so rounding alone moves weight onto it.
    """
    seen = np.ones(weights.shape, dtype=bool) if allow is None else allow | (weights > 0)  # (L, S) keys it may attend
    d_k, S = K.shape[1], K.shape[0]
    with np.errstate(over="ignore"):  # a magnitude beyond float64 only means that no bound holds: ∞
        size = (np.abs(q) @ np.abs(K).T) / divisor  # (L, S)
        if bias is not None:
            size = size + np.abs(bias)
        logit = (d_k + 2) * U * np.where(seen, size, 0.0)  # (L, S) absolute error of each logit
        relative = 4 * logit.max(axis=1, initial=0.0) + (2 * S + 2 * rescales + 8) * U  # (L,) of each weight
        terms = weights @ np.abs(V)  # (L, d_v) Σ w·|V|
        bound = SAFETY * ((relative + (S + 2) * U)[:, None] * terms + (S + 2) * 2.0**-1074)
        widest = np.where(seen[:, :, None], np.abs(V)[None, :, :], 0.0).max(axis=1)  # (L, d_v) max |V| it may attend
        out: Array = np.where((relative < 1)[:, None], bound, 2 * widest)
    return out


def agreement(got: Array, want: Array, bound: Array) -> tuple[bool, str]:
    """(whether every entry is within its rounding bound, what to print after "equal" or "DIFFERENT").

    ``within float64 rounding (every |diff| ≤ 1e-13)``: the bound rounded up to a power of ten, so the
    text does not move with the last bits of a sum. A larger difference is a fault, shown with its size.
    """
    diff = np.abs(np.asarray(got, dtype=float) - np.asarray(want, dtype=float))
    ok = bool(np.all(diff <= bound))
    top = float(np.max(bound, initial=0.0))
    limit = "∞" if not math.isfinite(top) else f"1e{math.ceil(math.log10(top)):+03d}" if top > 0 else "0"
    if ok:
        return True, f"within float64 rounding (every |diff| ≤ {limit})"
    worst = float(np.max(np.where(np.isnan(diff), np.inf, diff), initial=0.0))  # NaN: no agreement at all
    return False, f"max |diff| {worst:.1e}, beyond float64 rounding (≤ {limit})"
