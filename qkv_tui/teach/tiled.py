"""FlashAttention-2's tiled online softmax, one operation at a time.

Dao, "FlashAttention-2" (arXiv 2307.08691, §3.1 and Algorithm 1), on the trick of Milakov &
Gimelshein (arXiv 1805.02867). The query rows are cut into blocks of B; for each block the
Keys and Values arrive in tiles of B. Per tile:

    S     = Q_blk · K_tileᵀ / scale   (masked cells −∞)     the tile's scores only
    m̃     = rowmax(S)
    m_new = max(m_old, m̃)
    α     = e^(m_old − m_new)          ℓ ← α·ℓ,  Õ ← α·Õ     undo the old max, use the new one
    P     = e^(S − m_new)              ℓ ← ℓ + rowsum(P)
    Õ     ← Õ + P · V_tile
and after the block's last tile O = Õ / ℓ. The n×m score matrix is never formed. A tile
the mask forbids entirely is skipped (under a causal mask, every tile above the diagonal).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from qkv_tui.core.engine import Computation
from qkv_tui.core.scenario import BoolMatrix, Matrix

PHASES = ("scores", "tile_max", "new_max", "rescale", "exps", "accumulate")
PHASE_NAMES = {
    "scores": "tile scores", "tile_max": "tile row max", "new_max": "new running max",
    "rescale": "rescale ℓ and Õ", "exps": "exponentials into ℓ", "accumulate": "weighted V into Õ",
    "normalise": "O = Õ / ℓ",
}


def _exp_diff(a: Matrix, b: Matrix) -> Matrix:
    """e^(a − b), with e^(−∞ − (−∞)) taken as 1: a row that has seen no key yet has nothing to rescale.

    A difference beyond float64 is −∞, and its e^ the 0 it stands for (as in the engine's softmax)."""
    with np.errstate(invalid="ignore", over="ignore"):
        diff = a - b
    return np.exp(np.where(np.isnan(diff), 0.0, diff))


@dataclass(frozen=True, eq=False)
class TileVisit:
    """One tile of keys met by one block of query rows: every number of the six operations."""

    qblock: int
    ktile: int
    rows: range  # the block's query rows
    cols: range  # the tile's key columns
    dots: Matrix  # (r, c) Q_blk·K_tileᵀ before scaling
    S: Matrix  # (r, c) scaled, −∞ where masked
    allowed: BoolMatrix  # (r, c)
    m_old: Matrix  # (r,)
    tile_max: Matrix  # (r,)
    m_new: Matrix  # (r,)
    alpha: Matrix  # (r,) e^(m_old − m_new)
    l_old: Matrix  # (r,)
    l_scaled: Matrix  # (r,) α·ℓ_old
    P: Matrix  # (r, c) e^(S − m_new), 0 where masked
    l_new: Matrix  # (r,) α·ℓ_old + rowsum(P)
    O_old: Matrix  # (r, d_v)
    O_scaled: Matrix  # (r, d_v) α·Õ_old
    O_new: Matrix  # (r, d_v) α·Õ_old + P·V_tile


@dataclass(frozen=True, eq=False)
class BlockEnd:
    """The last operation of a query block: O = Õ / ℓ."""

    qblock: int
    rows: range
    m: Matrix  # (r,)
    ell: Matrix  # (r,) ℓ
    O_acc: Matrix  # (r, d_v) Õ
    out: Matrix  # (r, d_v) O = Õ / ℓ


@dataclass(frozen=True)
class TileOp:
    phase: str  # one of PHASES, or "normalise"
    qblock: int
    visit: TileVisit | None  # None for "normalise"
    end: BlockEnd


def visit_tiles(Q: Matrix, K: Matrix, V: Matrix, allow: BoolMatrix, divisor: float, rows: range, tiles: list[range],
                qblock: int = 0, sink: float | None = None, numbers: list[int] | None = None,
                bias: Matrix | None = None, keep: bool = True) -> tuple[list[TileVisit], BlockEnd]:
    """The online softmax of one block of query rows over the given key tiles, in order.

    ``keep=False`` returns no visits, only the end: every row of a long sequence over every
    tile would otherwise hold each tile's (rows, d_v) accumulators, gigabytes at 2,048 tokens.
    ``numbers`` are the tiles' indices among all tiles (skipped ones leave gaps); default 0, 1, ...
    ``bias`` (n, m) is added to the scaled scores (ALiBi); ``sink`` is a logit with no Value.
    """
    r = len(rows)
    # a sink is one more softmax column with no Value: it starts the running max and sum
    m = np.full(r, -np.inf) if sink is None else np.full(r, float(sink))  # (r,)
    ell = np.zeros(r) if sink is None else np.ones(r)  # (r,)
    O_acc = np.zeros((r, V.shape[1]))  # (r, d_v)
    visits = []
    for k, cols in enumerate(tiles):
        dots = Q[rows.start:rows.stop] @ K[cols.start:cols.stop].T  # (r, c)
        allowed = allow[rows.start:rows.stop, cols.start:cols.stop]  # (r, c)
        logits = dots / divisor
        if bias is not None:
            logits = logits + bias[rows.start:rows.stop, cols.start:cols.stop]
        S = np.where(allowed, logits, -np.inf)  # (r, c)
        tile_max = S.max(axis=1)  # (r,)
        m_new = np.maximum(m, tile_max)  # (r,)
        alpha = _exp_diff(m, m_new)  # (r,)
        l_scaled = alpha * ell
        O_scaled = alpha[:, None] * O_acc
        P = np.where(allowed, _exp_diff(S, m_new[:, None]), 0.0)  # (r, c)
        l_new = l_scaled + P.sum(axis=1)
        O_new = O_scaled + P @ V[cols.start:cols.stop]  # (r, d_v)
        number = k if numbers is None else numbers[k]
        if keep:
            visits.append(TileVisit(qblock, number, rows, cols, dots, S, allowed, m, tile_max, m_new, alpha, ell,
                                    l_scaled, P, l_new, O_acc, O_scaled, O_new))
        m, ell, O_acc = m_new, l_new, O_new
    return visits, BlockEnd(qblock, rows, m, ell, O_acc, O_acc / ell[:, None])


@dataclass(frozen=True, eq=False)
class TiledHead:
    """FlashAttention over one head, with random access to its operations."""

    comp: Computation
    head: int
    tile: int
    _blocks: dict[int, tuple[list[TileVisit], BlockEnd]] = field(default_factory=dict, repr=False)

    @property
    def n(self) -> int:
        return self.comp.scenario.n

    @property
    def m(self) -> int:
        return self.comp.scenario.m

    @cached_property
    def blocks(self) -> list[range]:
        return [range(s, min(s + self.tile, self.n)) for s in range(0, self.n, self.tile)]

    @cached_property
    def tiles(self) -> list[range]:
        return [range(s, min(s + self.tile, self.m)) for s in range(0, self.m, self.tile)]

    @cached_property
    def needed(self) -> BoolMatrix:
        """(blocks, tiles): False where the mask forbids every cell of the tile, so it is skipped."""
        allow = self.comp.scenario.allow.astype(np.int64)
        starts_r = [b.start for b in self.blocks]
        starts_c = [t.start for t in self.tiles]
        counts = np.add.reduceat(np.add.reduceat(allow, starts_r, axis=0), starts_c, axis=1)
        return np.asarray(counts > 0)

    @property
    def skipped(self) -> int:
        return int((~self.needed).sum())

    @property
    def total_tiles(self) -> int:
        return int(self.needed.size)

    @cached_property
    def offsets(self) -> list[int]:
        """Where each query block's operations start; one more for the end."""
        per_block = [6 * int(row.sum()) + 1 for row in self.needed]
        return [0, *np.cumsum(per_block).tolist()]

    def __len__(self) -> int:
        return self.offsets[-1]

    def block(self, qblock: int) -> tuple[list[TileVisit], BlockEnd]:
        """Every visit of one query block (skipped tiles left out), computed when first asked for."""
        if qblock not in self._blocks:
            if len(self._blocks) > 16:  # a learner revisits a few blocks; a 2,048-token walk must not keep them all
                self._blocks.clear()
            hr = self.comp.heads[self.head]
            kept = [k for k in range(len(self.tiles)) if self.needed[qblock, k]]
            self._blocks[qblock] = visit_tiles(hr.Q_used, hr.K_used, hr.V, self.comp.scenario.allow, hr.scale,
                                               self.blocks[qblock], [self.tiles[k] for k in kept], qblock,
                                               hr.sink, kept, hr.bias)
        return self._blocks[qblock]

    def op(self, index: int) -> TileOp:
        qblock = bisect.bisect_right(self.offsets, index) - 1
        local = index - self.offsets[qblock]
        visits, end = self.block(qblock)
        if local == 6 * len(visits):
            return TileOp("normalise", qblock, None, end)
        return TileOp(PHASES[local % 6], qblock, visits[local // 6], end)

    def skipped_before(self, qblock: int, ktile: int) -> int:
        """Tiles skipped so far, up to (qblock, ktile) in the order the blocks are walked."""
        flat = (~self.needed).ravel()
        return int(flat[: qblock * len(self.tiles) + ktile + 1].sum())

    @cached_property
    def finals(self) -> tuple[Matrix, Matrix, Matrix, Matrix]:
        """(m, ℓ, Õ, O) of every row after all its tiles: every block at once, tile by tile.

        A tile with no allowed cell changes nothing (α = 1, P = 0), so running every row over
        every tile gives exactly what the per-block walk with skipping gives.
        """
        hr = self.comp.heads[self.head]
        _, end = visit_tiles(hr.Q_used, hr.K_used, hr.V, self.comp.scenario.allow, hr.scale, range(self.n),
                             self.tiles, 0, hr.sink, None, hr.bias, keep=False)
        return end.m, end.ell, end.O_acc, end.out

    @property
    def output(self) -> Matrix:
        return self.finals[3]

    @property
    def max_error(self) -> float:
        """max |O − the Mix stage's output| over the head."""
        return float(np.abs(self.output - self.comp.heads[self.head].output).max())

    @property
    def matches(self) -> bool:
        return bool(np.allclose(self.output, self.comp.heads[self.head].output, rtol=1e-9, atol=1e-12))


def tiled(comp: Computation, head: int, tile: int | None = None) -> TiledHead:
    tile = comp.scenario.production.tile if tile is None else tile
    return TiledHead(comp, head, max(1, tile))


def memory_line(n: int, m: int, tile: int, d_v: int) -> str:
    """The full score matrix against what one tile needs at a time."""
    rows, cols = min(tile, n), min(tile, m)
    return (f"memory: full scores n×m = {n}×{m} = {n * m} numbers; one tile {rows}×{cols} = {rows * cols}"
            f"; m, ℓ and Õ for its rows: {rows}·(2 + {d_v}) = {rows * (2 + d_v)}"
            f"; at 8,192 tokens the full scores are {8192 * 8192:,} numbers, a 128×128 tile {128 * 128:,}")
