"""The built-in learn_to_look: a few SGD steps on W_Q and W_K make "I" move its attention from "love" to itself."""

from __future__ import annotations

import itertools

import numpy as np

from qkv_tui import load_scenario
from qkv_tui.core.training import steps


def test_attention_moves_within_a_handful_of_steps() -> None:
    sc = load_scenario("learn_to_look")
    assert sc.backward is not None and sc.backward.train == ("W_Q", "W_K") and sc.backward.steps <= 10
    states = list(steps(sc))
    first, last = states[0].weights[0], states[-1].weights[0]  # (3, 3)
    assert int(np.argmax(first[0])) == 1  # I looks at love
    assert int(np.argmax(last[0])) == 0  # and, trained, at itself
    moved = next(s.step for s in states if int(np.argmax(s.weights[0][0])) == 0)
    assert moved <= 3
    losses = [s.loss for s in states]
    assert all(a is not None and b is not None and b < a for a, b in itertools.pairwise(losses))
    # the values were not trained, so what I ends up with is a mix of the same three Values
    assert np.array_equal(states[-1].scenario.heads[0].W_V, sc.heads[0].W_V)


def test_its_description_quotes_the_numbers_it_shows() -> None:
    sc = load_scenario("learn_to_look")
    states = list(steps(sc))
    assert f"{states[0].weights[0][0, 1]:.3f}" in sc.description
    assert f"{states[3].weights[0][0, 0]:.3f}" in sc.description
    assert f"{states[6].weights[0][0, 0]:.3f}" in sc.description
