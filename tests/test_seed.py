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
    assert any("e^2.887 / Σ e^s = 17.935 / 25.368 = 0.707" in d for d in softmax.details)
