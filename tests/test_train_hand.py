"""The Train view by hand (h): a run of its own, worked as a student with a calculator does (teach/train_walk.py's
hand_steps): each step's forward pass and gradients by hand, each new weight w − lr·g written down rounded.
Every line it shows re-computes from its displayed operands at 1–4 decimals; the run is internally consistent
(each state's loss, map and gradients are the by-hand computation of that state's weights)."""

from __future__ import annotations

import numpy as np
import pytest

from qkv_tui.core.engine import compute
from qkv_tui.core.gradients import gradients
from qkv_tui.core.scenario import Scenario, load_scenario
from qkv_tui.display.train_view import train_explanation, train_panes
from qkv_tui.kernels.policy import round_to
from qkv_tui.teach.handcalc import compute_hand
from qkv_tui.teach.train_walk import TrainRun
from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.panels import ExplainPanel

from .arith_check import checked
from .test_backward_torch import _builtin, shape_of, with_backward


def trained(name: str, steps: int = 4, lr: float = 0.1) -> Scenario:
    """A built-in with a target and a few steps (learn_to_look: as shipped)."""
    if name == "learn_to_look":
        return load_scenario(name)
    text = _builtin(name)
    n, d_out = shape_of(text)
    return with_backward(text, np.random.default_rng(len(name)).normal(size=(n, d_out)).round(2).tolist(),
                         extra=f"lr = {lr}\nsteps = {steps}\n")


NAMES = ["learn_to_look", "gqa", "gated", "pre_norm", "sink", "two_heads", "qk_norm", "rope"]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("decimals", [1, 2, 3, 4])
def test_every_train_line_by_hand_checks_out(name: str, decimals: int) -> None:
    sc = trained(name)
    run = TrainRun(sc, decimals)
    lines: list[str] = []
    for k in range(len(run)):
        for head in range(len(sc.heads)):
            ex = train_explanation(run, k, head, decimals)
            lines += [ex.arithmetic, *ex.details]
    count, bad = checked([line.strip() for line in lines])
    assert not bad, "\n".join(bad[:10])
    assert count >= run.reached(run.total)  # at least each step's Δloss


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("decimals", [1, 3])
def test_the_hand_run_is_consistent(name: str, decimals: int) -> None:
    sc = trained(name)
    run = TrainRun(sc, decimals)
    for k in range(run.reached(run.total) + 1):
        s = run.at(k)
        hand = compute_hand(compute(s.scenario), decimals)
        g = gradients(hand)
        assert s.loss == g.loss  # the loss by step: the by-hand loss of that state's weights
        for h, P in enumerate(s.weights):
            assert np.array_equal(P, hand.heads[h].weights)  # the map: by hand too
        for p in run.params(k):
            if k > 0 and run.trainable(p):  # after a step each trained weight is written down rounded
                assert np.array_equal(p.value, round_to(p.value, decimals)), p.name
            if p.grad is not None:  # as written down (a K/V head's: its readers' written-down shares summed)
                assert np.allclose(p.grad, round_to(p.grad, decimals), rtol=0, atol=1e-12), p.name
        for m in run.moves(k):  # w = w − lr·g from the previous state's displayed weight and gradient
            assert m.new == float(round_to(np.array(m.old - run.lr * m.grad), decimals)), m


def test_the_panes_show_the_hand_run() -> None:
    sc = trained("learn_to_look")
    exact, hand = TrainRun(sc), TrainRun(sc, 2)
    focus, extra = train_panes(hand, 3, 0, 2)
    assert np.array_equal(focus[0].values, hand.at(3).weights[0])
    assert not np.array_equal(hand.at(3).weights[0], exact.at(3).weights[0])  # a trajectory of its own
    assert all(np.array_equal(p.values, round_to(p.values, 2)) for p in extra)


def explanation(app: QKVApp) -> str:
    return app.query_one(ExplainPanel).plain


async def test_h_in_the_train_view_switches_to_the_hand_run() -> None:
    app = QKVApp("learn_to_look")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("l", "right", "right")
        exact = explanation(app)
        await pilot.press("h")
        await pilot.pause()
        assert app.modes.hand and app.modes.view == "train"
        text = explanation(app)
        assert "step 2" in text and text != exact
        count, bad = checked([line.strip() for line in text.splitlines() if " = " in line])
        assert not bad and count
        await pilot.press("h")
        await pilot.pause()
        assert explanation(app) == exact


class TestSnapshots:
    def test_train_view_by_hand(self, snap_compare) -> None:
        assert snap_compare(QKVApp("learn_to_look"), press=["l", "right", "right", "right", "h"], terminal_size=(80, 24))
