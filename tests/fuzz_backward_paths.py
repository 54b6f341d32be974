"""Every path a [backward] scenario adds, run on one scenario's text (tests/fuzz_paths.py runs the rest first:
--check, every export, the TOML round trip, the trace's lines exact and by hand with its backward stages, the
side views): the JSON's "grad" and "train", the Train view's every step exact and by hand (each line true on a
calculator), and the gradients against the engine's own forward pass, along the gradient (a central difference
of the loss, so a wrong gradient anywhere in the chain shows, not only a line that disagrees with itself).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math

import numpy as np

from qkv_tui.core.engine import compute
from qkv_tui.core.gradients import gradients
from qkv_tui.core.scenario import Scenario, ScenarioError, parse_scenario
from qkv_tui.core.training import updated
from qkv_tui.display.modes import Modes
from qkv_tui.display.presenter import Presenter
from qkv_tui.edges.export_json import to_json
from qkv_tui.teach.stepper import Position
from qkv_tui.teach.trace import Trace
from qkv_tui.teach.train_walk import params

from .arith_check import checked
from .fuzz_paths import assert_every_path

BACKWARD_STAGES = ("loss", "dwo", "dgate", "dmix", "dsoftmax", "dscale", "dscore", "drotate", "dqk_norm", "dproject",
                   "dembed", "dnorm")


def assert_train_view(sc: Scenario, decimals: int) -> None:
    """The Train view (l) at every step, exact and under h: each frame builds and each line checks out."""
    comp = compute(sc)
    presenter = Presenter(comp)
    for hand in (False, True):
        modes = Modes(view="train", hand=hand, decimals=decimals)
        lines: list[str] = []
        for step in range(presenter.side_steps(modes, 0)):
            for head in sorted({0, len(comp.heads) - 1}):
                ex = presenter.frame(Position(0, head), dataclasses.replace(modes, side_step=step)).explanation
                lines += [ex.arithmetic, *ex.details]
        _, bad = checked([line.strip() for line in lines])
        assert not bad, "\n".join(bad[:10])


def _loss(sc: Scenario) -> float:
    comp = compute(sc)
    bw = sc.backward
    assert bw is not None
    if bw.dO is not None:  # the loss whose gradient at the output is dO
        return float((comp.output * bw.dO).sum())
    g = gradients(comp)
    assert g.loss is not None
    return g.loss


def assert_gradients_true(sc: Scenario) -> None:
    """d/dε loss(w − ε·g) at ε = 0 is −Σ g² over the trained weights: a central difference through core/training.py's
    own step, so every trained gradient is checked against the forward pass at once."""
    bw = sc.backward
    assert bw is not None
    g = gradients(compute(sc))
    trained = [p for p in params(sc, g) if p.weight in bw.train and p.grad is not None]
    slope = sum(float((p.grad * p.grad).sum()) for p in trained if p.grad is not None)
    size = max([1.0] + [float(np.abs(p.value).max()) for p in trained])
    if not trained or slope == 0 or not math.isfinite(slope):
        return
    eps = 1e-6 * size / math.sqrt(slope)  # moves the weights by about 1e-6 of their size

    def at(lr: float) -> float:
        moved = dataclasses.replace(sc, backward=dataclasses.replace(bw, lr=lr))
        return _loss(updated(moved, g))

    # a latent norm of a row near 0 bends the loss on a scale of √eps: smaller steps until the difference settles
    diffs = []
    for step in (eps, eps / 30, eps / 900):
        diffs.append((at(-step) - at(step)) / (2 * step))
        if math.isclose(diffs[-1], slope, rel_tol=2e-4, abs_tol=1e-9 * abs(_loss(sc)) / step):
            return
    raise AssertionError(f"the loss moves by {diffs} along the gradient, not by Σ g² = {slope}")


def assert_backward_paths(text: str, decimals: int = 3, gradients_true: bool = True) -> bool:
    """assert_every_path, then what [backward] adds; False when --check refused the text (in one line, alike)."""
    if not assert_every_path(text, decimals):
        return False
    sc = parse_scenario(text, "fuzzed.toml")
    bw = sc.backward
    assert bw is not None
    comp = compute(sc)
    assert set(BACKWARD_STAGES) & set(Trace(comp).stage_keys)
    data = json.loads(to_json(comp))
    train = data["train"]
    assert data["grad"] is not None and (len(train) == bw.steps + 1 or "stopped" in train[-1]), train[-1]
    assert_train_view(sc, decimals)
    if gradients_true:
        with contextlib.suppress(ScenarioError):  # a step of the central difference past float64: no learner's
            assert_gradients_true(sc)
    return True
