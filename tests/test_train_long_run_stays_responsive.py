"""A Train view run of 1,000 steps by hand (h, then end) is computed in a worker thread: the key returns
at once, the screen shows the last step in hand and how far the run has come, esc stops it there and q
quits while it runs. Before, one key blocked the event loop for ~18 s of CPU (q included).

No assertion here is timed: each reads state (what is computed, what the screen says, the worker's)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from qkv_tui import compute
from qkv_tui.core.scenario import builtin_dir, parse_scenario
from qkv_tui.display.modes import Modes
from qkv_tui.display.presenter import Presenter
from qkv_tui.display.train_view import SYNC_STEPS, SteppedRun, pending
from qkv_tui.teach.stepper import Position
from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.panels import ExplainPanel

STEPS = 1000


def long_run():
    text = (builtin_dir() / "learn_to_look.toml").read_text(encoding="utf-8")
    assert "steps = 6\n" in text
    return parse_scenario(text.replace("steps = 6\n", f"steps = {STEPS}\n"), "long.toml")


def test_a_far_step_is_not_computed_by_the_screen() -> None:
    presenter = Presenter(compute(long_run()))
    modes = Modes(view="train", hand=True, side_step=STEPS)
    frame = presenter.frame(Position(0, 0), modes)
    wanted = pending(presenter, modes)
    assert wanted is not None
    run, step = wanted
    assert isinstance(run, SteppedRun) and step == STEPS
    assert run.computed <= 1  # step 0 only: the far step is the worker's
    assert frame.explanation.details[0].startswith(f"computing the steps by hand up to step {STEPS}: 0 done")
    assert frame.explanation.stage_label == f"step 0/{STEPS}"


def test_a_few_steps_are_computed_on_the_key() -> None:
    presenter = Presenter(compute(long_run()))
    modes = Modes(view="train", side_step=SYNC_STEPS - 1)
    frame = presenter.frame(Position(0, 0), modes)
    assert pending(presenter, modes) is None
    assert frame.explanation.stage_label == f"step {SYNC_STEPS - 1}/{STEPS}"


async def until_stopped(run: SteppedRun) -> None:
    """Until the worker's thread has let the run go (it does after the step it is on, once cancelled)."""
    for _ in range(6000):
        if not run.busy:
            return
        await asyncio.sleep(0.01)


@pytest.fixture
def slow_worker_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each step the worker's thread computes waits 50 ms first: 1,000 steps by hand take about a second of CPU
    on a fast machine, and a run that ends before the test looks cannot show what the screen does meanwhile
    (the run is long here, however fast the machine; the screen thread's own steps are not slowed)."""
    original = SteppedRun.at
    never = threading.Event()

    def at(self: SteppedRun, k: int):  # type: ignore[no-untyped-def]
        if threading.current_thread() is not threading.main_thread():
            never.wait(0.05)
        return original(self, k)

    monkeypatch.setattr(SteppedRun, "at", at)


@pytest.mark.usefixtures("slow_worker_steps")
async def test_q_quits_while_the_steps_are_computed() -> None:
    app = QKVApp(long_run())
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("l", "h", "end")
        await pilot.pause()
        worker, target = app.train_steps.worker, app.train_steps.target
        assert worker is not None and target is not None
        run = target[0]
        assert app.modes.side_step == STEPS and run.hand is not None
        assert "computing the steps by hand up to step 1000" in app.query_one(ExplainPanel).plain
        await pilot.press("q")
    assert worker.is_cancelled
    await until_stopped(run)
    assert not run.busy and run.computed < STEPS + 1  # it stopped: quitting did not wait for the run


@pytest.mark.usefixtures("slow_worker_steps")
async def test_esc_stops_the_run_at_the_step_it_reached() -> None:
    app = QKVApp(long_run())
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("l", "h", "end")
        await pilot.pause()
        assert app.train_steps.running and app.train_steps.target is not None
        run = app.train_steps.target[0]
        await pilot.press("escape")
        await until_stopped(run)
        await pilot.pause()
        assert app.modes.view == "train" and app.modes.side_step < STEPS
        assert app.modes.side_step <= run.computed - 1
        assert not app.train_steps.running
        assert "computing" not in app.query_one(ExplainPanel).plain
        assert pending(app.presenter, app.modes) is None
