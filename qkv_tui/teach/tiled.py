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

The running max keeps every p ≤ 1, so ℓ stays at most the number of keys; but Õ, not yet
divided, is a sum of up to ℓ Value rows and can pass float64's largest number when the Values
are near it, though O = Õ/ℓ never leaves their range. Such a head accumulates V/2^k (a power of
two, so no digit changes) and multiplies O by 2^k at the end: :func:`value_shift`.

The view shows the walk as a calculator does it (:func:`work_block`): each row at the places
of its softmax row in the trace, every exponential, sum and product worked from the numbers as
shown, so p = e^(S − m) reads as the trace's e^(s − max) wherever the running max is the row's.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from qkv_tui.core import part_questions as ask
from qkv_tui.core.engine import Computation, HeadResult
from qkv_tui.core.fmt import fmt, is_integral, vector
from qkv_tui.core.production import agreement, rounding_bound
from qkv_tui.core.scenario import BoolMatrix, Matrix
from qkv_tui.kernels.softmax import exp_of_difference, masked_logits
from qkv_tui.teach.arith import MAX_GUARD, agrees, first_fit, shown, softmax_row

PHASES = ("scores", "tile_max", "new_max", "rescale", "exps", "accumulate")
PHASE_NAMES = {
    "scores": "tile scores", "tile_max": "tile row max", "new_max": "new running max",
    "rescale": "rescale ℓ and Õ", "exps": "exponentials into ℓ", "accumulate": "weighted V into Õ",
    "normalise": "O = Õ / ℓ",
}


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
    number: int = 0  # which of the block's visits (skipped tiles are not visited); their count for "normalise"


def value_shift(V: Matrix, keys: int) -> int:
    """k such that Õ, a sum of at most ``keys`` Value rows (each p ≤ 1), stays finite when it sums V/2^k.

    0 unless the Values are within a factor of ``keys`` of float64's largest number.
    """
    top = float(np.abs(V).max(initial=0.0))
    if top == 0 or not math.isfinite(top):
        return 0
    return max(0, math.frexp(top)[1] + math.frexp(float(keys))[1] - 1023)


def visit_tiles(Q: Matrix, K: Matrix, V: Matrix, allow: BoolMatrix, divisor: float, rows: range, tiles: list[range],
                qblock: int = 0, beside: float | None = None, numbers: list[int] | None = None,
                term: Matrix | None = None, keep: bool = True, shift: int = 0,
                step: Callable[[Matrix], Matrix] | None = None) -> tuple[list[TileVisit], BlockEnd]:
    """The online softmax of one block of query rows over the given key tiles, in order.

    ``keep=False`` returns no visits, only the end: every row of a long sequence over every
    tile would otherwise hold each tile's (rows, d_v) accumulators, gigabytes at 2,048 tokens.
    ``numbers`` are the tiles' indices among all tiles (skipped ones leave gaps); default 0, 1, ...
    ``term`` (n, m) is added to the scaled scores (ALiBi's bias), after ``step`` where a part steps them (the
    soft-cap's c·tanh(s/c)); ``beside`` is the logit of a column beside the map with no Value (a sink).
    ``shift``: Õ sums V/2^shift (:func:`value_shift`); O is multiplied back.
    """
    V = np.ldexp(V, -shift) if shift else V  # exact: a power of two changes no digit
    r = len(rows)
    # a column beside the map is one more softmax column with no Value: it starts the running max and sum
    m = np.full(r, -np.inf) if beside is None else np.full(r, float(beside))  # (r,)
    ell = np.zeros(r) if beside is None else np.ones(r)  # (r,)
    O_acc = np.zeros((r, V.shape[1]))  # (r, d_v)
    visits = []
    for k, cols in enumerate(tiles):
        dots = Q[rows.start:rows.stop] @ K[cols.start:cols.stop].T  # (r, c)
        allowed = allow[rows.start:rows.stop, cols.start:cols.stop]  # (r, c)
        tile_term = None if term is None else term[rows.start:rows.stop, cols.start:cols.stop]
        scaled = dots / divisor
        S = masked_logits(scaled if step is None else step(scaled), allowed, tile_term)  # (r, c)
        tile_max = S.max(axis=1)  # (r,) −∞ where the tile allows the row no key
        m_new = np.maximum(m, tile_max)  # (r,)
        alpha = exp_of_difference(m, m_new)  # (r,)
        l_scaled = alpha * ell
        O_scaled = alpha[:, None] * O_acc
        P = np.where(allowed, exp_of_difference(S, m_new[:, None]), 0.0)  # (r, c)
        l_new = l_scaled + P.sum(axis=1)
        O_new = O_scaled + P @ V[cols.start:cols.stop]  # (r, d_v)
        number = k if numbers is None else numbers[k]
        if keep:
            visits.append(TileVisit(qblock, number, rows, cols, dots, S, allowed, m, tile_max, m_new, alpha, ell,
                                    l_scaled, P, l_new, O_acc, O_scaled, O_new))
        m, ell, O_acc = m_new, l_new, O_new
    out = O_acc / ell[:, None]
    return visits, BlockEnd(qblock, rows, m, ell, O_acc, np.ldexp(out, shift) if shift else out)


def _read(x: float, places: int) -> float:
    """What one number reads as at ``places`` decimals (scientific from 1e6 on, as fmt writes it)."""
    return x if not math.isfinite(x) else shown(fmt(x, False, places))


def _as_shown(x: Matrix | float, places: int) -> Matrix:
    """What each number reads as at ``places`` decimals: the value of its text, entry by entry."""
    x = np.asarray(x, dtype=float)
    return np.array([_read(float(v), places) for v in x.ravel()]).reshape(x.shape)


@dataclass(frozen=True, eq=False)
class WorkedVisit:
    """One tile for one query row, worked from the numbers as shown at ``places`` decimals.

    Each number is what a calculator gives from the shown ones before it, then shown at the same
    places: the trace's convention for its softmax rows, so the same exponential reads alike in both.
    """

    places: int
    S: Matrix  # (c,) the tile's scores as shown, −∞ where masked
    tile_max: float
    m_old: float
    m_new: float
    alpha_shift: float | None  # m_old − m as shown; None before any key (α = 0: nothing gathered)
    alpha: float
    l_old: float
    l_scaled: float  # α·ℓ
    shifted: Matrix  # (c,) S − m, −∞ where masked
    P: Matrix  # (c,) e^(S − m), 0 where masked
    l_new: float  # α·ℓ + Σp
    V: Matrix  # (c, d_v) the tile's Values as shown (Õ sums them divided by 2^shift)
    O_old: Matrix  # (d_v,)
    O_scaled: Matrix  # (d_v,)
    O_new: Matrix  # (d_v,)


@dataclass(frozen=True, eq=False)
class WorkedRow:
    """One query row of a block over all its tiles, as shown; ``out`` is the exact O (the Mix stage's)."""

    places: int
    visits: tuple[WorkedVisit, ...]
    m: float
    ell: float
    O_acc: Matrix  # (d_v,) Õ
    out: Matrix  # (d_v,) exact


def _work_row(visits: list[TileVisit], r: int, V: Matrix, v_integral: bool, beside: float | None, places: int,
              shift: int) -> tuple[WorkedVisit, ...]:
    """Row ``r`` of a block over its tiles at ``places`` decimals, every number from the ones shown before it."""
    p = places
    m = _read(float(beside), p) if beside is not None else -math.inf
    ell = 1.0 if beside is not None else 0.0  # the column beside the map's e^(logit − logit)
    acc = np.zeros(V.shape[1])  # (d_v,) Õ
    out = []
    for v in visits:
        allowed = v.allowed[r]
        S = np.where(allowed, _as_shown(v.S[r], p), -math.inf)  # (c,)
        tile_max = float(S.max())
        m_new = max(m, tile_max)
        if math.isinf(m):  # nothing gathered yet: ℓ and Õ are 0, whatever α is
            alpha_shift, alpha = None, 0.0 if math.isfinite(m_new) else 1.0
        else:
            alpha_shift = _read(round(m - m_new, p), p)
            alpha = _read(math.exp(alpha_shift), p)
        l_scaled = _read(alpha * ell, p)
        O_scaled = _as_shown(alpha * acc, p)
        shifted = np.full(S.shape, -math.inf)
        P = np.zeros(S.shape)
        for j in np.flatnonzero(allowed):  # exactly as the trace works e^(s − max): math.exp of the shown difference
            shifted[j] = _read(round(float(S[j]) - m_new, p), p)
            P[j] = _read(math.exp(shifted[j]), p)
        l_new = _read(math.fsum([l_scaled, *P[allowed]]), p)
        V_tile = V[v.cols.start:v.cols.stop]
        V_shown = V_tile if v_integral else _as_shown(V_tile, p)  # (c, d_v) as the V pane shows them
        V_summed = np.ldexp(V_shown, -shift) if shift else V_shown  # exact
        O_new = _as_shown(O_scaled + P @ V_summed, p) if allowed.any() else O_scaled
        out.append(WorkedVisit(p, S, tile_max, m, m_new, alpha_shift, alpha, ell, l_scaled, shifted, P, l_new,
                               V_shown, acc, O_scaled, O_new))
        m, ell, acc = m_new, l_new, O_new
    return tuple(out)


def trace_places(hr: HeadResult, row: int, decimals: int) -> int:
    """The places at which the trace works this row's softmax (its exponentials and their sum), a column beside
    the map (a sink) as its last: its logit, and the share it takes."""
    logit, share = ask.beside(hr), ask.beside_share(hr)
    if logit is not None and share is not None:
        return softmax_row(np.append(hr.masked[row], logit), np.append(hr.weights[row], float(share[row])),
                           decimals).places
    return softmax_row(hr.masked[row], hr.weights[row], decimals).places


def work_block(hr: HeadResult, visits: list[TileVisit], end: BlockEnd, decimals: int, v_integral: bool,
               shift: int) -> tuple[WorkedRow, ...]:
    """Every row of a block worked as shown: at the trace's places for the row, or more where O = Õ/ℓ needs
    them to recompute the exact O from the shown Õ and ℓ within a unit of its last digit."""
    rows = []
    for r, i in enumerate(end.rows):
        start = trace_places(hr, i, decimals)
        result = vector(end.out[r], False, decimals)

        def attempt(p: int, r: int = r, result: str = result) -> tuple[tuple[WorkedVisit, ...], bool]:
            # a V near float64's largest reads as one past it at few places (1.80e308 is ∞, and 0·∞ is NaN):
            # what the shown numbers give, which the check below refuses, so more places are tried
            with np.errstate(over="ignore", invalid="ignore"):
                walk = _work_row(visits, r, hr.V, v_integral, ask.beside(hr), p, shift)
            last = walk[-1]
            with np.errstate(all="ignore"):  # ℓ is at least e^0 = 1: the check is the point
                calculated = np.ldexp(last.O_new / last.l_new, shift)
            return walk, agrees(calculated, result)

        walk = first_fit(range(start, max(start, decimals + MAX_GUARD) + 1), attempt)
        last = walk[-1]
        rows.append(WorkedRow(last.places, walk, last.m_new, last.l_new, last.O_new, end.out[r]))
    return tuple(rows)


@dataclass(frozen=True, eq=False)
class TiledHead:
    """FlashAttention over one head, with random access to its operations."""

    comp: Computation
    head: int
    tile: int
    _blocks: dict[int, tuple[list[TileVisit], BlockEnd]] = field(default_factory=dict, repr=False)
    _worked: dict[tuple[int, int], tuple[WorkedRow, ...]] = field(default_factory=dict, repr=False)

    @property
    def n(self) -> int:
        return self.comp.scenario.n

    @property
    def m(self) -> int:
        return self.comp.scenario.m

    @cached_property
    def shift(self) -> int:
        """Õ sums V/2^shift: 0 unless the Values are so large that Õ, up to ℓ of them, would overflow."""
        return value_shift(self.comp.heads[self.head].V, self.m)

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
                                               ask.beside(hr), kept, ask.term(hr), shift=self.shift,
                                               step=_step_of(hr))
        return self._blocks[qblock]

    def worked(self, qblock: int, decimals: int) -> tuple[WorkedRow, ...]:
        """The block's rows as a calculator works them at ``decimals`` (what the view prints)."""
        key = (qblock, decimals)
        if key not in self._worked:
            if len(self._worked) > 16:
                self._worked.clear()
            visits, end = self.block(qblock)
            hr = self.comp.heads[self.head]
            self._worked[key] = work_block(hr, visits, end, decimals, is_integral(hr.V), self.shift)
        return self._worked[key]

    def op(self, index: int) -> TileOp:
        qblock = bisect.bisect_right(self.offsets, index) - 1
        local = index - self.offsets[qblock]
        visits, end = self.block(qblock)
        if local == 6 * len(visits):
            return TileOp("normalise", qblock, None, end, len(visits))
        return TileOp(PHASES[local % 6], qblock, visits[local // 6], end, local // 6)

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
                             self.tiles, 0, ask.beside(hr), None, ask.term(hr), keep=False, shift=self.shift,
                             step=_step_of(hr))
        return end.m, end.ell, end.O_acc, end.out

    @property
    def output(self) -> Matrix:
        return self.finals[3]

    @property
    def max_error(self) -> float:
        """max |O − the Mix stage's output| over the head."""
        return float(np.abs(self.output - self.comp.heads[self.head].output).max())

    def bound(self, rows: range | None = None) -> Matrix:
        """(rows, d_v): how far the tiled O may differ from the Mix stage's by float64 rounding alone."""
        hr = self.comp.heads[self.head]
        rows = range(self.n) if rows is None else rows
        sl = slice(rows.start, rows.stop)
        return rounding_bound(hr.Q_used[sl], hr.K_used, hr.V, hr.weights[sl], hr.scale, ask.term(hr, sl),
                              rescales=len(self.tiles), allow=self.comp.scenario.allow[sl])

    def check(self, rows: range | None = None, out: Matrix | None = None) -> tuple[bool, str]:
        """(equal to the Mix stage within float64 rounding, what to print): rows of a block, or the head."""
        rows = range(self.n) if rows is None else rows
        got = self.output[rows.start:rows.stop] if out is None else out
        return agreement(got, self.comp.heads[self.head].output[rows.start:rows.stop], self.bound(rows))

    @property
    def matches(self) -> bool:
        return self.check()[0]


def _step_of(hr: HeadResult) -> Callable[[Matrix], Matrix] | None:
    """The parts' step on the scaled scores (the soft-cap's), None where no part steps them."""
    return None if ask.stepper(hr) is None else ask.step(hr)


def tiled(comp: Computation, head: int, tile: int | None = None) -> TiledHead:
    tile = comp.scenario.production.tile if tile is None else tile
    return TiledHead(comp, head, max(1, tile))


def memory_line(n: int, m: int, tile: int, d_v: int) -> str:
    """The full score matrix against what one tile needs at a time, and what FlashAttention keeps per row.

    Its extra memory is O(N) (Dao et al. 2022, Theorem 1): m and ℓ per row, where FlashAttention-2 keeps
    L = m + log ℓ; the saving is that the n×m scores never travel to HBM and back.
    """
    rows, cols = min(tile, n), min(tile, m)
    return (f"memory: full scores n×m = {n}×{m} = {n * m} numbers, never formed (nor written to HBM and read back);"
            f" one tile B_r×B_c = {rows}×{cols} = {rows * cols} on chip, with m, ℓ and Õ for its rows:"
            f" {rows}·(2 + {d_v}) = {rows * (2 + d_v)}; written for every row besides O: L = m + log ℓ, {n} numbers"
            " (O(n), for the backward pass);"
            f" at 8,192 tokens the full scores are {8192 * 8192:,} numbers, a 128×128 tile {128 * 128:,}")
