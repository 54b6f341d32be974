"""The Train view's computation: core/training.py's SGD (or AdamW) steps, walked one at a time and kept, with what each
step moved (docs/scenario-format.md, "[backward]"). No gradient is worked here: every one is core/gradients.py's.

By hand (``h``) the run is a trajectory of its own, as a student with a calculator works it (docs/train-view.md):
each step's forward pass and gradients by hand (teach/handcalc.py: every product and table rounded to the shown
decimals), then each new weight w − lr·g written down rounded; step 0 is the file's weights, as given.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from qkv_tui.core import variants
from qkv_tui.core.gradients import Gradients, gradients
from qkv_tui.core.scenario import Matrix, Scenario, ScenarioError
from qkv_tui.core.trained import owner
from qkv_tui.core.training import Moments, TrainStep, advanced, computed_step, optimizer, steps, weights
from qkv_tui.teach.handcalc import compute_hand


@dataclass(frozen=True, eq=False)
class Param:
    """One trainable array of the scenario, as the Train view names it."""

    name: str  # "W_Q", or "W_Q (head 2)" where there are heads to tell apart
    weight: str  # its [backward] train name ("W_Q", "sinks")
    head: int | None  # the query head it belongs to (a K/V head's weights: its first reader); None for W_O, γ
    value: Matrix  # (rows, cols), a vector as one row, a sink as 1×1
    grad: Matrix | None  # ∂loss/∂value at that step, the same shape; None where the backward has none
    bare: bool = False  # one number, written without an index (a head's sink logit)


@dataclass(frozen=True)
class Adam:
    """One cell's AdamW numbers at step t: m and v before and after, and the bias-corrected m̂ and v̂."""

    t: int
    m0: float
    v0: float
    m: float
    v: float
    m_hat: float
    v_hat: float


@dataclass(frozen=True)
class Move:
    """One cell of one weight after one step: new = old − lr·grad (SGD), or AdamW's step from ``adam``."""

    param: str
    row: int
    col: int
    old: float
    grad: float
    new: float
    adam: Adam | None = None
    bare: bool = False  # its Param's: one number, written without an index

    def cell(self, single_row: bool) -> str:
        """``W_Q[1,2]``; a vector's ``b_Q[2]``; one number (a head's sink) bare."""
        return self.param if self.bare else (
            f"{self.param}[{self.col}]" if single_row else f"{self.param}[{self.row},{self.col}]")


def _row(v: Matrix | float | None) -> Matrix | None:
    if v is None:
        return None
    return np.atleast_2d(np.asarray(v, dtype=np.float64))


def params(sc: Scenario, g: Gradients) -> list[Param]:
    """Every weight the scenario gives, in the train list's order within a head (core/variants/backward.py
    trainable), with its gradient (core/training.py's weights). A K/V head's weights are listed once, under its first
    reader, with the sum of its readers' gradients (what SGD applies)."""
    many = len(sc.heads) > 1
    out = [Param(w.name + (f" ({sc.heads[w.head].name})" if many and w.head is not None else ""), w.train, w.head,
                 _row(w.value), _row(w.grad), w.bare)  # type: ignore[arg-type]
           for w in weights(sc, g) if w.value is not None]
    if owner(sc) is not None:  # a table that holds every head's projections stands for the tables' own weights
        return out
    for t in variants.TABLES:  # a table's own weights ([differential]'s λ vectors, one row per head)
        own = getattr(t.of(sc), "train_params", None)  # a part's value is in ``parts``, not a field of its name
        if own is not None:
            out += [Param(name, name, None, _row(value), _row(grad))  # type: ignore[arg-type]
                    for name, value, grad in own(g.heads) if value is not None]
    return out


def hand_steps(sc: Scenario, decimals: int) -> Iterator[TrainStep]:
    """train[0] … train[steps] worked by hand at ``decimals`` (module docstring): core/training.py's steps with
    the by-hand forward pass and gradients, and each update written down rounded."""
    bw = sc.backward
    assert bw is not None
    before: tuple[Scenario, Gradients] | None = None
    adam = optimizer(sc)
    for k in range(bw.steps + 1):
        comp = compute_hand(computed_step(sc, k, before), decimals)
        g = gradients(comp)  # by hand, as the computation it reads
        yield TrainStep(k, g.loss, tuple(h.weights for h in comp.heads), sc, comp, g,
                        None if adam is None else adam.snapshot())
        if k < bw.steps:
            before = (sc, g)
            sc = advanced(sc, g, adam, decimals)


class TrainRun:
    """The states train[0] … train[steps], each computed the first time it is asked for (one SGD step per
    keypress, never the whole run at once) and kept, so stepping back costs nothing. ``hand``: the run by hand
    at that many decimals (module docstring), else exact."""

    def __init__(self, sc: Scenario, hand: int | None = None) -> None:
        assert sc.backward is not None
        self.scenario = sc
        self.total = sc.backward.steps
        self.lr = sc.backward.lr
        self.backward = sc.backward
        self.trained = frozenset(sc.backward.train)
        self.hand = hand
        self._walk: Iterator[TrainStep] = steps(sc) if hand is None else hand_steps(sc, hand)
        self._kept: list[TrainStep] = []
        self._params: dict[int, list[Param]] = {}
        self.error: str | None = None  # why the run stopped early: a step whose numbers overflow float64

    def __len__(self) -> int:
        return self.total + 1

    def at(self, k: int) -> TrainStep:
        """train[k], or the last state reached where a step on the way overflowed."""
        while len(self._kept) <= k and self.error is None:
            try:
                self._kept.append(next(self._walk))
            except ScenarioError as exc:
                self.error = str(exc)
            except StopIteration:  # pragma: no cover - total + 1 states always come
                break
        return self._kept[min(k, len(self._kept) - 1)]

    def reached(self, k: int) -> int:
        """The step actually shown for k (smaller where the run stopped early)."""
        return self.at(k).step

    def losses(self, k: int) -> list[float | None]:
        self.at(k)
        return [s.loss for s in self._kept[:k + 1]]

    def params(self, k: int) -> list[Param]:
        if k not in self._params:
            s = self.at(k)
            self._params[k] = params(s.scenario, s.grads)
        return self._params[k]

    def trainable(self, p: Param) -> bool:
        return p.weight in self.trained

    def moves(self, k: int) -> list[Move]:
        """Every cell step k changed (w ← w − lr·∂loss/∂w with step k − 1's gradient), biggest change first."""
        if k == 0:
            return []
        before, after = self.params(k - 1), self.params(k)
        was, now = self.at(k - 1).moments, self.at(k).moments
        out: list[Move] = []
        for p, q in zip(before, after, strict=True):
            if not self.trainable(p) or p.grad is None:
                continue
            slot = (p.weight, p.head)
            m1 = None if now is None else now.get(slot)
            m0 = None if was is None else was.get(slot)
            for r, c in zip(*np.nonzero(q.value != p.value), strict=True):
                adam = None if m1 is None else _cell(m0, m1, int(r), int(c))
                out.append(Move(p.name, int(r), int(c), float(p.value[r, c]), float(p.grad[r, c]),
                                float(q.value[r, c]), adam, p.bare))
        out.sort(key=lambda m: -abs(m.new - m.old))
        return out

    def since_start(self, k: int) -> list[Move]:
        """Every trained cell's change from train[0] to train[k], biggest first (grad: the total step / −lr)."""
        first, now = self.params(0), self.params(k)
        out: list[Move] = []
        for p, q in zip(first, now, strict=True):
            if not self.trainable(p):
                continue
            for r, c in zip(*np.nonzero(q.value != p.value), strict=True):
                old, new = float(p.value[r, c]), float(q.value[r, c])
                out.append(Move(p.name, int(r), int(c), old, (old - new) / self.lr, new, bare=p.bare))
        out.sort(key=lambda m: -abs(m.new - m.old))
        return out


def _cell(before: Moments | None, after: Moments, r: int, c: int) -> Adam:
    """One cell's AdamW numbers, from the state before the step (none at t = 1: m = v = 0) and after it."""

    def at(x: Matrix) -> float:
        return float(np.atleast_2d(np.asarray(x, dtype=np.float64))[r, c])

    m0 = 0.0 if before is None else at(before.m)
    v0 = 0.0 if before is None else at(before.v)
    return Adam(after.t, m0, v0, at(after.m), at(after.v), at(after.m_hat), at(after.v_hat))
