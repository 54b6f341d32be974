"""The built-in scenario reproduces every number the seed page prints."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qkv_tui import compute, load_scenario
from qkv_tui.teach.trace import Trace


@pytest.fixture(scope="module")
def head():
    return compute(load_scenario("i_love_ai")).heads[0]


def test_first_row_of_x_and_projections(head) -> None:
    sc = load_scenario("i_love_ai")
    assert sc.X[0].tolist() == [1, 0, 1, 0]
    assert head.Q[0].tolist() == [2, 0, 1]
    assert head.K[0].tolist() == [0, 1, 1]
    assert head.V[0].tolist() == [1, 0, 1]
    assert head.K[1].tolist() == [2, 1, 1]
    assert head.K[2].tolist() == [1, 1, 1]
    assert head.V[1].tolist() == [1, 2, 0]
    assert head.V[2].tolist() == [1, 1, 0]


def test_scores(head) -> None:
    assert head.scores.tolist() == [[1, 5, 3], [3, 3, 3], [2, 4, 3]]


def test_scaling(head) -> None:
    assert head.scale == pytest.approx(math.sqrt(3))
    assert np.round(head.scaled[0], 3).tolist() == [0.577, 2.887, 1.732]
    assert np.round(head.scaled[2], 3).tolist() == [1.155, 2.309, 1.732]


def test_softmax(head) -> None:
    assert np.round(head.weights[0], 3).tolist() == [0.070, 0.707, 0.223]
    assert np.allclose(head.weights[1], 1 / 3)
    assert np.round(head.weights[2], 3).tolist() == [0.168, 0.533, 0.299]
    # the seed's unshifted exponentials, e^0.577 ≈ 1.781 etc. (exact: 17.935, sum 25.368)
    e = np.exp(head.scaled[0])
    assert np.round(e, 3).tolist() == [1.781, 17.935, 5.652]
    assert round(float(e.sum()), 3) == 25.368


def test_outputs(head) -> None:
    assert np.round(head.output[0], 3).tolist() == [1.000, 1.637, 0.070]
    assert np.round(head.output[1], 3).tolist() == [1.000, 1.000, 0.333]


def test_trace_prints_the_seed_arithmetic() -> None:
    trace = Trace(compute(load_scenario("i_love_ai")))
    texts = [trace.op(i).arithmetic for i in range(len(trace))]
    assert "Q[I,0] = X[I]·W_Q[:,0] = 1·1 + 0·0 + 1·1 + 0·0 = 2" in texts
    assert "Q[I,1] = X[I]·W_Q[:,1] = 1·0 + 0·1 + 1·0 + 0·1 = 0" in texts
    assert "scores[I,love] = Q[I]·K[love] = 2·2 + 0·1 + 1·1 = 5" in texts
    assert "scaled[I,love] = 5 / √3 = 2.887" in texts
    assert "out[I,1] = weights[I]·V[:,1] = 0.070·0 + 0.707·2 + 0.223·1 = 1.637" in texts
    assert "out[I,0] = weights[I]·V[:,0] = 0.070·1 + 0.707·1 + 0.223·1 = 1.000" in texts
    softmax = next(trace.op(i) for i in range(len(trace)) if trace.op(i).arithmetic.startswith("weights[I,love]"))
    assert softmax.arithmetic.endswith("= 0.707")
    assert "weights[I,I] = e^(0.577 − 2.887) / 1.414 = e^-2.310 / 1.414 = 0.099 / 1.414 = 0.070" in texts
    assert softmax.details[2].endswith("; same weight: e^2.887 / Σ e^s = 17.939 / 25.372 = 0.707")


def test_trace_shows_the_seed_softmax_and_mix_lines() -> None:
    """The seed's exponentials, its row sum and its vector form of the mix, worked from the numbers shown.

    The seed prints e^2.887 ≈ 17.940 and e^1.732 ≈ 5.651; a calculator gives 17.939 and 5.652 (the
    seed's sum, 25.372, is the same either way). Its AI row prints e^2.309 ≈ 10.063 and sum 18.888;
    a calculator gives 10.064 and 3.174 + 10.064 + 5.652 = 18.890.
    """
    trace = Trace(compute(load_scenario("i_love_ai")))
    lines = [line for i in range(len(trace)) for line in (trace.op(i).arithmetic, *trace.op(i).details)]
    text = "\n".join(lines)
    assert ("without the max, as the seed does: e^0.577 = 1.781 | e^2.887 = 17.939 | e^1.732 = 5.652"
            "  →  Σ e^s = 25.372;") in text
    assert ("without the max, as the seed does: e^1.155 = 3.174 | e^2.309 = 10.064 | e^1.732 = 5.652"
            "  →  Σ e^s = 18.890;") in text
    assert "out[I] = 0.070·[1, 0, 1] + 0.707·[1, 2, 0] + 0.223·[1, 1, 0] = [1.000, 1.637, 0.070]" in lines
    assert "out[love] = 0.333·[1, 0, 1] + 0.333·[1, 2, 0] + 0.333·[1, 1, 0] = [1.000, 1.000, 0.333]" in lines
    assert "row max = max(0.577, 2.887, 1.732) = 2.887" in "\n".join(lines)
