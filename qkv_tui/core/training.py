"""SGD or AdamW on a scenario's own weights: w ← w − lr·∂loss/∂w (or AdamW's step, as torch.optim.AdamW takes it)
on the [backward] ``train`` inputs, one step at a time (docs/scenario-format.md, "[backward]"). Step k's
scenario is the file's, with k updates."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from qkv_tui.core import trained, variants
from qkv_tui.core.engine import Computation, ComputeError, compute
from qkv_tui.core.gradients import Gradients, gradients
from qkv_tui.core.scenario import Matrix, Scenario, ScenarioError
from qkv_tui.core.toml_text import number
from qkv_tui.core.trained import Weight, in_head, in_table, with_heads
from qkv_tui.kernels.policy import round_to
from qkv_tui.kernels.sharing import kv_owners

Slot = tuple[str, int | None]  # a trained array: its [backward] train name and its head (None: shared by all)


@dataclass(frozen=True, eq=False)
class Moments:
    """AdamW's state for one array after step t: m and v as kept, and the step's bias-corrected m̂ and v̂."""

    t: int
    m: Matrix
    v: Matrix
    m_hat: Matrix
    v_hat: Matrix


@dataclass(frozen=True, eq=False)
class TrainStep:
    """The state after ``step`` updates: its loss and every head's attention weights."""

    step: int
    loss: float | None
    weights: tuple[Matrix, ...]  # (n, m) per head
    scenario: Scenario
    computation: Computation
    grads: Gradients
    moments: Mapping[Slot, Moments] | None = None  # AdamW's state after the update that led here; None with SGD


class Rule(Protocol):
    def __call__(self, slot: Slot, current: Matrix, grad: Matrix) -> Matrix: ...


def sgd(lr: float) -> Rule:
    def step(slot: Slot, current: Matrix, grad: Matrix) -> Matrix:
        out: Matrix = current - lr * grad
        return out
    return step


class AdamW:
    """torch.optim.AdamW's update, one array at a time: p ← p − lr·wd·p (decoupled decay), m ← β₁·m + (1 − β₁)·g,
    v ← β₂·v + (1 − β₂)·g², m̂ = m/(1 − β₁ᵗ), v̂ = v/(1 − β₂ᵗ), p ← p − lr·m̂/(√v̂ + ε). By hand too m and v stay
    as the calculator holds them: a v of 1e-4 written down at 2 decimals is 0, and lr·m̂/(0 + ε) is a million."""

    def __init__(self, lr: float, betas: tuple[float, float], eps: float, weight_decay: float) -> None:
        self.lr, self.betas, self.eps, self.weight_decay = lr, betas, eps, weight_decay
        self.t = 0
        self.state: dict[Slot, Moments] = {}

    def begin(self) -> None:
        """A new step: every array's t moves on together, as torch's (each parameter's step count)."""
        self.t += 1

    def __call__(self, slot: Slot, current: Matrix, grad: Matrix) -> Matrix:
        b1, b2 = self.betas
        before = self.state.get(slot)
        m0 = np.zeros_like(grad) if before is None else before.m
        v0 = np.zeros_like(grad) if before is None else before.v
        m = b1 * m0 + (1 - b1) * grad
        v = b2 * v0 + (1 - b2) * grad * grad
        m_hat = m / (1 - b1 ** self.t)
        v_hat = v / (1 - b2 ** self.t)
        self.state[slot] = Moments(self.t, m, v, m_hat, v_hat)
        out: Matrix = current - self.lr * self.weight_decay * current - self.lr * m_hat / (np.sqrt(v_hat) + self.eps)
        return out

    def snapshot(self) -> dict[Slot, Moments]:
        return dict(self.state)


def _keep(a: Matrix) -> Matrix:
    out = np.array(a, dtype=np.float64)
    out.setflags(write=False)
    return out


def weights(sc: Scenario, g: Gradients) -> list[Weight]:
    """Every array of the scenario [backward] may train, with its gradient, in the Train view's order: each head's
    (a K/V head's once, under its first reader, with the sum of its readers' gradients: what a step applies), then
    the layer's; each variant's (core/trained/) at its place. A table that holds every head's projections ([mla]'s
    latent layer) stands for the heads' arrays. None values are arrays the scenario does not give."""
    outer = [Weight("W_O", "W_O", None, sc.W_O, g.dW_O, lambda s, new: dataclasses.replace(s, W_O=new)),
             Weight("b_O", "b_O", None, sc.b_O, g.db_O, lambda s, new: dataclasses.replace(s, b_O=new)),
             Weight("gamma", "gamma", None, None if sc.norm is None else sc.norm.gamma, g.dgamma, in_table("norm", "gamma")),
             Weight("beta", "beta", None, None if sc.norm is None else sc.norm.beta, g.dbeta, in_table("norm", "beta"))]
    bw, ce = sc.backward, g.cross_entropy  # the cross-entropy's unembedding W_U: trained like any weight where it is
    outer.append(Weight("W_U", "W_U", None, None if bw is None or ce is None else bw.W_U,
                        None if ce is None else ce.dW_U, in_table("backward", "W_U")))
    owns = trained.owner(sc)
    if owns is not None and owns.layer is not None:
        return trained.placed(outer, [(owns.layer_before, owns.layer(sc, g))])
    owners = kv_owners([sc.kv_head(h) for h in range(len(sc.heads))], sc.heads)
    kv_of = {kv.heads[0]: kv for kv in g.kv_heads}
    out: list[Weight] = []
    for h, (head, hg) in enumerate(zip(sc.heads, g.heads, strict=True)):
        kv = kv_of.get(h) if owners[h] == h else None
        own = [Weight("W_Q", "W_Q", h, head.W_Q, hg.dW_Q, in_head(h, "W_Q"))]
        shared = [] if kv is None else [
            Weight(name, name, h, getattr(head, name), grad, _in_readers(kv.heads, name))
            for name, grad in (("W_K", kv.dW_K), ("W_V", kv.dW_V), ("b_K", kv.db_K), ("b_V", kv.db_V))]
        own += [*shared[:2], Weight("b_Q", "b_Q", h, head.b_Q, hg.db_Q, in_head(h, "b_Q")), *shared[2:]]
        out += trained.placed(own, [(f.head_before, f.head(sc, g, h)) for f in trained.faces() if f.head is not None])
    return out + trained.placed(outer, [(f.layer_before, f.layer(sc, g)) for f in trained.faces() if f.layer is not None])


def _in_readers(readers: tuple[int, ...], name: str) -> Callable[[Scenario, Matrix], Scenario]:
    """K/V weights a K/V head's readers share stay one array: the new value goes to every reader."""
    return lambda sc, new: with_heads(sc, readers, **{name: new})


def updated(sc: Scenario, g: Gradients, decimals: int | None = None, rule: Rule | None = None) -> Scenario:
    """One step on the weights ``[backward] train`` names: ``rule``'s (SGD with the file's lr by default).
    K/V weights a K/V head's readers share are moved once, by the sum of their gradients, and stay one array,
    so the readers still share them. With ``decimals`` each new weight is written down rounded, as a student
    keys w − lr·g into a calculator."""
    bw = sc.backward
    assert bw is not None
    lr, train = (sgd(bw.lr) if rule is None else rule), set(bw.train)

    def _frozen(a: Matrix) -> Matrix:
        return _keep(a if decimals is None else round_to(a, decimals))

    stepped = sc
    for w in weights(sc, g):
        if w.train in train and w.value is not None and w.grad is not None:
            stepped = w.put(stepped, _frozen(lr((w.train, w.head), w.value, w.grad)))
    owns = trained.owner(sc)
    if owns is not None and owns.heads_from is not None:  # the heads follow from the table's new weights
        return owns.heads_from(stepped)
    for t in variants.TABLES:  # a table that trains weights of its own ([differential]'s λ vectors) steps them
        step = getattr(t.of(sc), "trained", None)
        if step is not None:
            stepped = t.put(stepped, step(g.heads, lr, train, _frozen))
    return stepped


def steps(sc: Scenario, count: int | None = None) -> Iterator[TrainStep]:
    """train[0] (the file's weights), then the state after each update, ``count`` updates (the file's
    ``steps`` by default); raises ScenarioError where a step's numbers overflow float64, naming the
    learning rate as what to change (step_refused)."""
    bw = sc.backward
    assert bw is not None
    total = bw.steps if count is None else count
    before: tuple[Scenario, Gradients] | None = None
    adam = optimizer(sc)
    for k in range(total + 1):
        comp = computed_step(sc, k, before)
        g = gradients(comp)
        yield TrainStep(k, g.loss, tuple(h.weights for h in comp.heads), sc, comp, g,
                        None if adam is None else adam.snapshot())
        if k < total:
            before = (sc, g)
            sc = advanced(sc, g, adam)


def optimizer(sc: Scenario) -> AdamW | None:
    """The run's AdamW state (a fresh one, at t = 0), or None where the file trains with SGD."""
    bw = sc.backward
    assert bw is not None
    if not bw.adamw:
        return None
    return AdamW(bw.lr, bw.betas, bw.eps, bw.weight_decay)


def advanced(sc: Scenario, g: Gradients, adam: AdamW | None, decimals: int | None = None) -> Scenario:
    """The next state: SGD's step, or AdamW's (its t moved on first)."""
    if adam is None:
        return updated(sc, g, decimals)
    adam.begin()
    return updated(sc, g, decimals, adam)


def computed_step(sc: Scenario, k: int, before: tuple[Scenario, Gradients] | None) -> Computation:
    """compute(sc) for train[k]; ``before`` is train[k − 1]'s scenario and gradients (None for the file's own)."""
    try:
        return compute(sc)
    except ComputeError as exc:
        if before is None:
            raise
        raise step_refused(exc, k, *before) from None


def step_refused(exc: ComputeError, k: int, sc: Scenario, g: Gradients) -> ScenarioError:
    """Step k (≥ 1) overflowed where the file's own numbers compute: whatever matrix met float64's limit,
    the update w ← w − lr·∂loss/∂w carried the weights there, so the hint names lr (shrinking it brings the
    weights back toward the file's own), or, where step k − 1's gradients themselves are past float64 (an
    update with lr = 0 still fails), those gradients."""
    bw = sc.backward
    assert bw is not None
    still = dataclasses.replace(sc, backward=dataclasses.replace(bw, lr=0.0))
    try:
        with np.errstate(invalid="ignore", over="ignore"):
            compute(updated(still, g))
    except ComputeError:
        where = "the file's own gradients are" if k == 1 else f"step {k - 1}'s gradients are"
        fix = ("expected a smaller target (or dO) or smaller weights" if k == 1
               else f"expected a smaller [backward] lr{_fewer(k - 2)}")
        return ScenarioError(sc.source, f"{exc.fact}; {where} past float64, so step {k}'s update cannot be"
                             f" computed: {fix}")
    return ScenarioError(sc.source, f"{exc.fact}; expected a smaller [backward] lr{_fewer(k - 1)}:"
                         f" the file's own numbers compute, and step {k}'s are theirs moved by w ← w − lr·∂loss/∂w"
                         f" with lr = {number(bw.lr)}")



def _fewer(last: int) -> str:
    """The other way out: fewer steps, where at least one update still computes."""
    return f" (or steps = {last} at most)" if last >= 1 else ""
