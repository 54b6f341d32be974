"""Under [rope] the differential part turns each half of Q and K on its own, with RoPE's turn for width d (the half),
as core/head_parts.py's turn_of makes it; and the head's result keeps the map that multiplies V as its weights."""

from __future__ import annotations

import numpy as np
import pytest

from qkv_tui import compute
from qkv_tui.core.rope_part import turn_of
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.kernels.differential import DiffForward
from qkv_tui.kernels.policy import EXACT
from qkv_tui.kernels.rope import RopeSpec

SCENARIO = '''
tokens = ["a", "b", "c"]
X = [[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]]
mask = "causal"

[[heads]]
W_Q = [[1, 0, 1, 0], [0, 1, 0, 0], [1, 0, 0, 1], [0, 1, 1, 0]]
W_K = [[0, 0, 1, 1], [1, 1, 0, 0], [0, 1, 0, 1], [1, 0, 1, 0]]
W_V = [[1, 0, 0, 1], [0, 1, 0, 0], [0, 0, 1, 0], [1, 1, 0, 1]]

[rope]
layout = "{layout}"
base = 100
{scaling}
[differential]
lambda_q1 = [[0.1, 0.2]]
lambda_k1 = [[0.3, -0.1]]
lambda_q2 = [[-0.2, 0.1]]
lambda_k2 = [[0.05, 0.4]]
layer = 2
'''
YARN = '[rope.scaling]\ntype = "yarn"\nfactor = 4\noriginal_max_position_embeddings = 2\n'


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("scaling", ["", YARN], ids=["plain", "yarn"])
def test_each_half_turns_with_the_turn_for_width_d(layout: str, scaling: str) -> None:
    sc = parse_scenario(SCENARIO.format(layout=layout, scaling=scaling), "t.toml")
    hr = compute(sc).heads[0]
    f = hr.need(DiffForward)
    turn = turn_of(sc.rope, sc.positions, 2)
    assert turn is not None and f.moved
    each_half = RopeSpec(turn, 2)
    np.testing.assert_array_equal(f.Q_used, each_half.turned(f.Q, EXACT))
    np.testing.assert_array_equal(f.K_used, each_half.turned(f.K, EXACT))
    np.testing.assert_array_equal(hr.weights, f.weights)
    np.testing.assert_allclose(hr.weights.sum(axis=1), 1 - f.lam.value, atol=1e-12)
