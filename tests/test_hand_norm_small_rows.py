"""By hand, a norm's statistic below 0.1 keeps two significant digits at least.

A row of small numbers (0.01, −0.01, 0.02) has a mean square of 0.0002: written down at three decimals it was
0.000, its root √(0 + 1e-05) = 0.003, and every normalised cell came out five times too large (3.333 where the
exact value is 0.690), on a line that still checked out on a calculator. The rule now: such a statistic is
written 0.00020, its root 0.014, and the cell reads 0.714, within the drift any hand computation has.
"""

from __future__ import annotations

import numpy as np
import pytest

from qkv_tui import compute
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.display.view import View
from qkv_tui.kernels.policy import ByHand, statistic_places
from qkv_tui.teach.handcalc import compute_hand
from qkv_tui.teach.stepper import Position
from qkv_tui.teach.trace import Trace

from .test_calculator import assert_holds, check_text
from .test_hand_norm_rule import stage_lines

TEXT = """
title = "small rows"
tokens = ["a", "b"]
X = [[0.01, -0.01, 0.02], [1, 2, 0.5]]
mask = "none"
[norm]
kind = "{kind}"
[[heads]]
W_Q = [[1, 0], [0, 1], [1, 1]]
W_K = [[1, 0], [0, 1], [1, 1]]
W_V = [[1, 0], [0, 1], [1, 1]]
"""


def _hand(kind: str, decimals: int):
    sc = parse_scenario(TEXT.format(kind=kind), "small.toml")
    exact = compute(sc)
    return exact, compute_hand(exact, decimals)


# LayerNorm at two decimals is left out: its mean, 0.0067, is 0.01 there, and x − mean of inputs of 0.01 keeps
# nothing of them: the inputs' own places, not a statistic's
@pytest.mark.parametrize(("kind", "decimals"), [("rms", 2), ("rms", 3), ("rms", 4), ("layer", 3), ("layer", 4)])
def test_a_small_row_normalises_near_its_exact_value(kind: str, decimals: int) -> None:
    exact, hand = _hand(kind, decimals)
    assert hand.norm is not None and exact.norm is not None
    # the exact statistic, written from its two first significant digits: never 0 where it is not
    assert np.all(hand.norm.spread > 0)
    # two significant digits of a statistic and the hand's places of x: some percent, never a factor
    assert np.allclose(hand.norm.X_norm, exact.norm.X_norm, rtol=0.15, atol=2 * 10.0**-decimals)


@pytest.mark.parametrize("kind", ["rms", "layer"])
@pytest.mark.parametrize("decimals", [2, 3, 5])
def test_every_line_by_hand_checks_out(kind: str, decimals: int) -> None:
    _, hand = _hand(kind, decimals)
    assert_holds(check_text(stage_lines(Trace(hand), decimals, ("norm",)), whole=False))


def test_the_line_shows_the_statistic_it_divides_by() -> None:
    _, hand = _hand("rms", 3)
    view = View(Trace(hand))
    ex = view.explain(Position(2, 0), 3)
    assert ex.arithmetic.endswith("= 0.010 / √(0.00020 + 1e-05)·1 = 0.010 / 0.014·1 = 0.714"), ex.arithmetic
    assert "ms(a) = mean of squares = (0.010·0.010 + (-0.010)·(-0.010) + 0.020·0.020) / 3 = 0.00020" in ex.details


def test_statistics_the_places_keep_are_left_as_they_were() -> None:
    """Only a statistic below 0.1 gains places: 0.877 at one decimal is still 0.9, 1.75 still 1.750."""
    x = np.array([0.877, 1.75, 0.003162, 0.0, 0.00015, 4.9e-4, 0.0456])
    assert statistic_places(x, 1).tolist() == [1, 1, 4, 1, 5, 5, 3]
    assert statistic_places(x, 3).tolist() == [3, 3, 4, 3, 5, 5, 3]
    assert ByHand(3).statistic(x, table=True).tolist() == [0.877, 1.75, 0.0032, 0.0, 0.00015, 0.00049, 0.046]
