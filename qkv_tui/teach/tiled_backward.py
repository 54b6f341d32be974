"""FlashAttention-2's backward pass over one head, tile by tile (Dao 2023, Algorithm 2), for the tiles view.

The forward kept only O and L = m + log ℓ per row. The backward never has the n×m weights either: for each
tile of keys (the outer loop) it walks the query blocks, recomputes that tile's P = e^(S − L) from the saved
L, and accumulates dV and dK for the tile's keys and dQ for the block's rows. D = rowsum(dO ⊙ O) is worked
once per row before the loop. Its dQ, dK and dV are compared with core/gradients.py's exact ones: the same
sums in another order.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from qkv_tui.core import part_questions as ask
from qkv_tui.core.gradients import Gradients, gradients
from qkv_tui.core.scenario import BoolMatrix, Matrix
from qkv_tui.kernels.softmax import from_logsumexp
from qkv_tui.teach.tiled import TiledHead

PAIR_PHASES = ("P", "dV", "dP", "dS", "dQ", "dK")  # one key tile against one query block
PHASE_NAMES = {"L": "L = m + log ℓ", "D": "D = rowsum(dO⊙O)", "P": "P = e^(S−L)", "dV": "dV += Pᵀ·dO",
               "dP": "dP = dO·Vᵀ", "dS": "dS = P⊙(dP−D)", "dQ": "dQ += dS·K", "dK": "dK += dSᵀ·Q",
               "check": "check"}
ORDER = ("L", "D", *PAIR_PHASES, "check")


@dataclass(frozen=True)
class BackOp:
    phase: str  # one of ORDER
    ktile: int | None = None  # the tile of keys (the outer loop); None before the loop and at the check
    qblock: int | None = None  # the block of query rows (the inner loop)


@dataclass(frozen=True, eq=False)
class Pair:
    """One key tile against one query block: everything the six operations work, before and after."""

    rows: range
    cols: range
    allowed: BoolMatrix  # (r, c)
    scaled: Matrix  # (r, c) the dots over the scale, before any part's step on them
    S: Matrix  # (r, c) the scores as the softmax read them (stepped, plus the term: capped, plus the bias)
    P: Matrix  # (r, c) e^(S − L), exactly 0 where masked
    dP: Matrix  # (r, c) dO·Vᵀ
    dS: Matrix  # (r, c) P ⊙ (dP − D)
    factor: Matrix | None  # (r, c) the step's own factor at the scaled scores (the soft-cap's tanh(scaled / c))
    dscaled: Matrix  # (r, c) dS back through the step (dS itself without one)
    dV_old: Matrix  # (c, d_v) the tile's dV before this block
    dV_new: Matrix
    dK_old: Matrix  # (c, d_k)
    dK_new: Matrix
    dQ_old: Matrix  # (r, d_k) the block's dQ before this tile
    dQ_new: Matrix


@dataclass(eq=False)
class TiledBackward:
    """FlashAttention-2's backward over one head, with random access to its operations."""

    th: TiledHead
    grads: Gradients
    _pairs: dict[tuple[int, int], Pair] = field(default_factory=dict, repr=False)

    @property
    def head(self) -> int:
        return self.th.head

    @cached_property
    def dO(self) -> Matrix:
        """(n, d_v) the gradient at the head's output (before any gate): the Backward stages' dO_h."""
        return self.grads.heads[self.head].dO

    @cached_property
    def L(self) -> Matrix:
        """(n,) the logsumexp the forward saved: m + log ℓ (−∞ for a row the mask allows nothing)."""
        m, ell, _, _ = self.th.finals
        with np.errstate(divide="ignore"):
            return np.asarray(m + np.log(ell))

    @cached_property
    def D(self) -> Matrix:
        """(n,) rowsum(dO ⊙ O), O the forward's output."""
        return np.asarray((self.dO * self.th.comp.heads[self.head].output).sum(axis=1))

    @cached_property
    def pairs(self) -> list[tuple[int, int]]:
        """(key tile, query block) in FlashAttention-2's backward order: keys outside, blocks inside."""
        needed = self.th.needed
        return [(j, i) for j in range(len(self.th.tiles)) for i in range(len(self.th.blocks)) if needed[i, j]]

    def __len__(self) -> int:
        return 2 + len(PAIR_PHASES) * len(self.pairs) + 1

    def op(self, index: int) -> BackOp:
        if index == 0:
            return BackOp("L")
        if index == 1:
            return BackOp("D")
        local = index - 2
        if local >= len(PAIR_PHASES) * len(self.pairs):
            return BackOp("check")
        j, i = self.pairs[local // len(PAIR_PHASES)]
        return BackOp(PAIR_PHASES[local % len(PAIR_PHASES)], j, i)

    def _tile(self, j: int, i: int) -> tuple[Matrix, Matrix, Matrix | None, Matrix, Matrix, BoolMatrix]:
        """(scaled, P, factor, dscaled, dS, allowed) of one key tile against one query block."""
        hr = self.th.comp.heads[self.head]
        rows, cols = self.th.blocks[i], self.th.tiles[j]
        r, c = slice(rows.start, rows.stop), slice(cols.start, cols.stop)
        allowed = self.th.comp.scenario.allow[r, c]
        scaled = hr.Q_used[r] @ hr.K_used[c].T / hr.scale  # (r, c)
        S = ask.logits(hr, scaled, r, c)
        with np.errstate(invalid="ignore", over="ignore"):
            P = np.where(allowed, from_logsumexp(S, self.L[r, None]), 0.0)  # (r, c)
        dP = self.dO[r] @ hr.V[c].T  # (r, c)
        dS = np.where(allowed, P * (dP - self.D[r, None]), 0.0)
        stepper = ask.stepper(hr)  # the part whose step the scores took: dS goes back through it
        factor = None if stepper is None else stepper.step_factor(scaled)
        dscaled = dS if factor is None else np.where(allowed, stepper.back_step(dS, factor), 0.0)
        return scaled, P, factor, dscaled, dS, allowed

    def pair(self, j: int, i: int) -> Pair:
        if (j, i) not in self._pairs:
            if len(self._pairs) > 64:  # a learner revisits a few pairs; a long walk must not keep them all
                self._pairs.clear()
            hr = self.th.comp.heads[self.head]
            rows, cols = self.th.blocks[i], self.th.tiles[j]
            r, c = slice(rows.start, rows.stop), slice(cols.start, cols.stop)
            d_k, d_v = hr.K_used.shape[1], hr.V.shape[1]
            dV = np.zeros((len(cols), d_v))
            dK = np.zeros((len(cols), d_k))
            for i2 in range(i):  # the tile's earlier blocks, as the loop met them
                if self.th.needed[i2, j]:
                    _, P2, _, ds2, _, _ = self._tile(j, i2)
                    r2 = slice(self.th.blocks[i2].start, self.th.blocks[i2].stop)
                    dV = dV + P2.T @ self.dO[r2]
                    dK = dK + ds2.T @ hr.Q_used[r2] / hr.scale
            dQ = np.zeros((len(rows), d_k))
            for j2 in range(j):  # the block's earlier tiles, in earlier turns of the outer loop
                if self.th.needed[i, j2]:
                    _, _, _, ds2, _, _ = self._tile(j2, i)
                    c2 = slice(self.th.tiles[j2].start, self.th.tiles[j2].stop)
                    dQ = dQ + ds2 @ hr.K_used[c2] / hr.scale
            scaled, P, factor, dscaled, dS, allowed = self._tile(j, i)
            added = ask.term(hr, r, c)
            S = ask.step(hr)(scaled) + (0.0 if added is None else added)
            self._pairs[(j, i)] = Pair(
                rows, cols, allowed, scaled, S, P, self.dO[r] @ hr.V[c].T, dS, factor, dscaled,
                dV, dV + P.T @ self.dO[r], dK, dK + dscaled.T @ hr.Q_used[r] / hr.scale,
                dQ, dQ + dscaled @ hr.K_used[c] / hr.scale)
        return self._pairs[(j, i)]

    def done(self, index: int) -> int:
        """How many pairs are complete after operation ``index`` (the dK operation ends a pair)."""
        local = index - 2
        return 0 if local < 0 else min(len(self.pairs), (local + 1) // len(PAIR_PHASES))

    @cached_property
    def finals(self) -> tuple[Matrix, Matrix, Matrix]:
        """(dQ, dK, dV) after every pair: every tile's sums, gathered in the loop's order."""
        hr = self.th.comp.heads[self.head]
        dQ, dK, dV = np.zeros_like(hr.Q_used), np.zeros_like(hr.K_used), np.zeros_like(hr.V)
        for j, i in self.pairs:
            _, P, _, dscaled, _, _ = self._tile(j, i)
            r = slice(self.th.blocks[i].start, self.th.blocks[i].stop)
            c = slice(self.th.tiles[j].start, self.th.tiles[j].stop)
            dV[c] += P.T @ self.dO[r]
            dK[c] += dscaled.T @ hr.Q_used[r] / hr.scale
            dQ[r] += dscaled @ hr.K_used[c] / hr.scale
        return dQ, dK, dV

    def check(self) -> tuple[bool, float]:
        """(equal to the Backward stages' exact dQ, dK, dV within float64 rounding, the largest difference)."""
        ab = self.grads.heads[self.head].attend
        worst, ok = 0.0, True
        for got, exact in zip(self.finals, (ab.dQ_used, ab.dK_used, ab.dV), strict=True):
            diff = float(np.abs(got - exact).max()) if got.size else 0.0
            scale = float(np.abs(exact).max()) if exact.size else 0.0
            worst = max(worst, diff)
            ok = ok and bool(np.isfinite(diff)) and diff <= 1e-9 * max(scale, 1.0)
        return ok, worst

    def dQ_at(self, index: int) -> Matrix:
        """(n, d_k) dQ as it stands after operation ``index``: the pairs done so far."""
        hr = self.th.comp.heads[self.head]
        out = np.zeros_like(hr.Q_used)
        for j, i in self.pairs[:self.done(index)]:
            _, _, _, dscaled, _, _ = self._tile(j, i)
            r = slice(self.th.blocks[i].start, self.th.blocks[i].stop)
            c = slice(self.th.tiles[j].start, self.th.tiles[j].stop)
            out[r] += dscaled @ hr.K_used[c] / hr.scale
        return out


def tiled_backward(th: TiledHead) -> TiledBackward:
    return TiledBackward(th, gradients(th.comp))


def position(tb: TiledBackward, j: int, i: int) -> int:
    """The index of the pair's first operation (for tests and jumps)."""
    return 2 + len(PAIR_PHASES) * bisect.bisect_left(tb.pairs, (j, i))
