"""SGD or AdamW on a scenario's own weights: w ← w − lr·∂loss/∂w (or AdamW's step, as torch.optim.AdamW takes it)
on the [backward] ``train`` inputs, one step at a time (docs/scenario-format.md, "[backward]"). Step k's
scenario is the file's, with k updates."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from qkv_tui.core import variants
from qkv_tui.core.engine import Computation, ComputeError, compute
from qkv_tui.core.gradients import Gradients, gradients
from qkv_tui.core.scenario import Matrix, Scenario, ScenarioError
from qkv_tui.core.toml_text import number
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

    if sc.mla is not None:
        return _mla_updated(sc, g, lr, train, _frozen)
    heads = list(sc.heads)
    own: list[dict[str, object]] = []
    for h, (head, hg) in enumerate(zip(sc.heads, g.heads, strict=True)):
        changes: dict[str, object] = {}
        if "W_Q" in train:
            changes["W_Q"] = _frozen(lr(("W_Q", h), head.W_Q, hg.dW_Q))
        if "b_Q" in train and head.b_Q is not None and hg.db_Q is not None:
            changes["b_Q"] = _frozen(lr(("b_Q", h), head.b_Q, hg.db_Q))
        if "W_G" in train and head.W_G is not None and hg.gate is not None:
            changes["W_G"] = _frozen(lr(("W_G", h), head.W_G, hg.gate.dW_G))
        if "sinks" in train and head.sink is not None and hg.attend.dsink is not None:
            changes["sink"] = float(_frozen(lr(("sinks", h), np.array(head.sink), np.array(hg.attend.dsink))))
        own.append(changes)
    owners = kv_owners([sc.kv_head(h) for h in range(len(sc.heads))], sc.heads)
    for kv in g.kv_heads:
        first = sc.heads[kv.heads[0]]
        shared: dict[str, object] = {}
        for name, grad in (("W_K", kv.dW_K), ("W_V", kv.dW_V), ("b_K", kv.db_K), ("b_V", kv.db_V)):
            current = getattr(first, name)
            if name in train and current is not None and grad is not None:
                shared[name] = _frozen(lr((name, kv.heads[0]), current, grad))
        for h in kv.heads:
            assert owners[h] == kv.heads[0]
            own[h].update(shared)
    for h, changes in enumerate(own):
        if changes:
            heads[h] = dataclasses.replace(heads[h], **changes)  # type: ignore[arg-type]
    top: dict[str, object] = {"heads": tuple(heads)}
    top.update(_outer_step(sc, g, lr, train, _frozen))
    if sc.qk_norm is not None and ("gamma_q" in train or "gamma_k" in train):
        qk = sc.qk_norm
        if "gamma_q" in train and g.dgamma_q is not None:
            qk = dataclasses.replace(qk, gamma_q=_frozen(lr(("gamma_q", None), qk.gamma_q, g.dgamma_q)))
        if "gamma_k" in train and g.dgamma_k is not None:
            qk = dataclasses.replace(qk, gamma_k=_frozen(lr(("gamma_k", None), qk.gamma_k, g.dgamma_k)))
        top["qk_norm"] = qk
    if sc.deltanet is not None and g.gates is not None:
        top.update(_gates_step(sc, g, lr, train, _frozen))
    stepped = dataclasses.replace(sc, **top)  # type: ignore[arg-type]
    for t in variants.TABLES:  # a table that trains weights of its own ([differential]'s λ vectors) steps them
        step = getattr(t.of(sc), "trained", None)
        if step is not None:
            stepped = t.put(stepped, step(g.heads, lr, train, _frozen))
    return stepped


def _outer_step(sc: Scenario, g: Gradients, lr: Rule, train: set[str],
                frozen: Callable[[Matrix], Matrix]) -> dict[str, object]:
    """What sits around the heads, whatever attention they run: W_O, b_O, the pre-norm's gains and the
    cross-entropy's unembedding W_U."""
    top: dict[str, object] = {}
    if "W_O" in train and sc.W_O is not None and g.dW_O is not None:
        top["W_O"] = frozen(lr(("W_O", None), sc.W_O, g.dW_O))
    if "b_O" in train and sc.b_O is not None and g.db_O is not None:
        top["b_O"] = frozen(lr(("b_O", None), sc.b_O, g.db_O))
    if sc.norm is not None and ("gamma" in train or "beta" in train):
        norm = sc.norm
        if "gamma" in train and g.dgamma is not None:
            norm = dataclasses.replace(norm, gamma=frozen(lr(("gamma", None), norm.gamma, g.dgamma)))
        if "beta" in train and norm.beta is not None and g.dbeta is not None:
            norm = dataclasses.replace(norm, beta=frozen(lr(("beta", None), norm.beta, g.dbeta)))
        top["norm"] = norm
    bw, ce = sc.backward, g.cross_entropy
    if "W_U" in train and bw is not None and bw.W_U is not None and ce is not None:
        top["backward"] = dataclasses.replace(bw, W_U=frozen(lr(("W_U", None), bw.W_U, ce.dW_U)))
    return top


def _gates_step(sc: Scenario, g: Gradients, lr: Rule, train: set[str],
               frozen: Callable[[Matrix], Matrix]) -> dict[str, object]:
    """[deltanet]'s W_a, A_log, dt_bias and W_b, where it computes g and β from them (``frozen`` writes each down)."""
    dn, gb = sc.deltanet, g.gates
    assert dn is not None and gb is not None
    changes: dict[str, Matrix] = {}
    for name, grad in (("W_a", gb.dW_a), ("W_b", gb.dW_b), ("A_log", gb.dA_log), ("dt_bias", gb.ddt_bias)):
        current = getattr(dn, name)
        if name in train and current is not None and grad is not None:
            changes[name] = frozen(lr((name, None), current, grad))
    return {"deltanet": dataclasses.replace(dn, **changes)} if changes else {}  # type: ignore[arg-type]


def _mla_updated(sc: Scenario, g: Gradients, lr: Rule, train: set[str],
                 _frozen: Callable[[Matrix], Matrix]) -> Scenario:
    """[mla]: the latent layer's own weights move; the heads' multiplied-through shapes follow from them
    (``_frozen`` writes each down)."""
    mla, back = sc.mla, g.mla
    assert mla is not None and back is not None
    changes: dict[str, object] = {}
    for name, grad in (("W_DKV", back.dW_DKV), ("W_UK", back.dW_UK), ("W_UV", back.dW_UV), ("W_KR", back.dW_KR),
                       ("W_Q", back.dW_Q), ("W_DQ", back.dW_DQ), ("W_UQ", back.dW_UQ)):
        current = getattr(mla, name)
        if name in train and current is not None and grad is not None:
            changes[name] = _frozen(lr((name, None), current, grad))
    if "gamma_kv" in train and mla.kv_norm and back.dgamma_kv is not None:
        changes["gamma_kv"] = _frozen(lr(("gamma_kv", None), mla.gamma_kv, back.dgamma_kv))
    if "gamma_q" in train and mla.q_norm and mla.gamma_q is not None and back.dgamma_q is not None:
        changes["gamma_q"] = _frozen(lr(("gamma_q", None), mla.gamma_q, back.dgamma_q))
    new = dataclasses.replace(mla, **changes)  # type: ignore[arg-type]
    heads = tuple(dataclasses.replace(head, W_Q=W_Q, W_K=W_K, W_V=W_V)
                  for head, (_, W_Q, W_K, W_V) in zip(sc.heads, new.head_weights(), strict=True))
    top: dict[str, object] = {"mla": new, "heads": heads}
    top.update(_outer_step(sc, g, lr, train, _frozen))
    return dataclasses.replace(sc, **top)  # type: ignore[arg-type]


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
