"""The Train view's long runs off the UI thread: end (or h at step 1,000) asks for many SGD steps at once.

1,000 steps by hand took ~18 s of CPU on one key, with the event loop blocked: no key, not even q, acted
until they were done. A worker thread now computes them one step at a time while the screen keeps the
step it showed and says how far the run has come (display/train_view.py reads only steps in hand); esc
stops the run at the step it reached, q quits at once (the worker looks for its cancellation after
every step), and leaving the view or asking for another step replaces the run's worker.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from textual.message import Message
from textual.worker import Worker, get_current_worker

from qkv_tui.display.side_views import TRAIN
from qkv_tui.ui.session import Session

if TYPE_CHECKING:
    from qkv_tui.display.train_view import SteppedRun

PROGRESS_SECONDS = 0.1  # how often the screen is redrawn with the steps done (a redraw per step would slow them)
GROUP = "train"


class TrainProgress(Message):
    """Posted by the worker (thread-safe): more steps are in hand, or the run stopped."""


class TrainSteps:
    """Starts, replaces and stops the worker that computes a Train view run's steps."""

    def __init__(self, app: Session) -> None:
        self.app = app
        self.worker: Worker[None] | None = None
        self.target: tuple[SteppedRun, int] | None = None  # the run and the step the worker computes up to

    @property
    def running(self) -> bool:
        """A worker's thread has not returned yet (cancelled ones too: it ends after the step it is on)."""
        return self.worker is not None and not self.worker.is_finished

    def follow(self) -> None:
        """After a redraw: compute what the view asks for, if it is too far to compute on a key.

        One worker at a time: a run's steps come from one generator, which two threads must not drive. A
        worker that is no longer wanted is cancelled, and the next one starts once it has ended (its end
        redraws the app, which calls this again)."""
        wanted = None
        if self.app.modes.view == TRAIN.name:  # the view's module loads when it is first opened, not at start-up
            from qkv_tui.display import train_view

            wanted = train_view.pending(self.app.presenter, self.app.modes)
        if self.running:
            assert self.worker is not None and self.target is not None
            on_its_way = wanted is not None and self.target[0] is wanted[0] and self.target[1] >= wanted[1]
            if not on_its_way:
                self.worker.cancel()
            return
        if wanted is None:
            return
        run, step = wanted
        self.target = wanted
        run.held = run.ready(self.app.modes.side_step)  # what the screen shows until the worker is done
        run.busy = True  # before the thread starts: from now on the screen asks the run for no new step
        self.worker = self.app.run_worker(lambda: self._compute(run, step), name="train steps", group=GROUP,
                                          exclusive=True, thread=True)

    def stop(self) -> int | None:
        """esc: stop the run where it is; returns the last step in hand, or None when nothing was running."""
        if not self.running or self.target is None or self.worker is None or self.worker.is_cancelled:
            return None
        self.worker.cancel()
        return max(self.target[0].computed - 1, 0)

    def _compute(self, run: SteppedRun, step: int) -> None:
        worker = get_current_worker()
        shown = time.monotonic()
        try:
            while run.computed <= step and not run.stopped and not worker.is_cancelled:
                run.at(run.computed)  # one SGD step, kept by the run
                time.sleep(0)  # the GIL to the event loop between steps: keys act while the run goes on
                if time.monotonic() - shown >= PROGRESS_SECONDS:
                    shown = time.monotonic()
                    self.app.post_message(TrainProgress())
        finally:
            run.busy = False
            self.app.post_message(TrainProgress())
