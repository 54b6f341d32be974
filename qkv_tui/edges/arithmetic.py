"""The command line's rule for arithmetic that fails: one ScenarioError line, never a NumPy warning."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from qkv_tui.core.engine import Computation, compute
from qkv_tui.core.scenario import Scenario, ScenarioError


@contextmanager
def arithmetic_policy(source: str) -> Iterator[None]:
    """One rule for every computation outside the app: an overflow, a division by zero or
    an invalid operation is a clean ScenarioError, never a NumPy warning on stderr beside
    a zero exit status. Underflow to 0 is what softmax is meant to do, so it passes."""
    with warnings.catch_warnings(), np.errstate(over="raise", divide="raise", invalid="raise", under="ignore"):
        warnings.simplefilter("error", RuntimeWarning)  # NumPy's arithmetic warnings, and Python's own
        try:
            yield
        except (FloatingPointError, ArithmeticError, Warning) as exc:
            raise ScenarioError(
                source, f"the numbers are too large or too small to compute with float64 ({exc}); expected smaller values"
            ) from None


def computed(scenario: Scenario) -> Computation:
    """The computation, and with [backward] its gradients at the file's own weights: what --check computes,
    so every export and the app (a --serve tab's too) refuse a scenario --check refuses, with its line, before
    any output. Under ``arithmetic_policy`` a loss or gradient past float64 is that line, not a screen of ∞."""
    comp = compute(scenario)
    if scenario.backward is not None:
        from qkv_tui.core.gradients import gradients

        gradients(comp)
    return comp
