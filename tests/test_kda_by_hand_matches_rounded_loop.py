"""Kimi Delta Attention by hand (kernels/kda.kda_forward under ByHand) against an independent rounded loop in plain
Python: every number a person writes down (each square and its sum, the root, each q and k, each e^g, each decayed
state cell, each recall product and sum, v − kv and its product with β, each k·δ and new state cell, each output
product and sum) rounded to the page's places with Python's ``round``. They agree within one unit in the last place."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qkv_tui.kernels.kda import kda_forward
from qkv_tui.kernels.policy import ByHand


def rounded_loop(Q: list[list[float]], K: list[list[float]], V: list[list[float]], g: list[list[float]],
                 beta: list[float], p: int) -> tuple[list[list[float]], list[list[list[float]]]]:
    def r(x: float) -> float:
        return round(x, p)

    n, d_k, d_v = len(Q), len(Q[0]), len(V[0])

    def l2(row: list[float]) -> list[float]:
        total = r(sum(r(x * x) for x in row))
        root = r(math.sqrt(total + 1e-6)) or math.sqrt(total + 1e-6)
        return [r(x / root) for x in row]

    div = r(math.sqrt(d_k)) or math.sqrt(d_k)
    q = [[r(x / div) for x in l2(row)] for row in Q]
    k = [l2(row) for row in K]
    S = [[0.0] * d_v for _ in range(d_k)]
    outs, states = [], []
    for t in range(n):
        S = [[r(S[i][j] * r(math.exp(g[t][i]))) for j in range(d_v)] for i in range(d_k)]
        kv = [r(sum(r(S[i][j] * k[t][i]) for i in range(d_k))) for j in range(d_v)]
        delta = [r(r(V[t][j] - kv[j]) * beta[t]) for j in range(d_v)]
        S = [[r(S[i][j] + r(k[t][i] * delta[j])) for j in range(d_v)] for i in range(d_k)]
        outs.append([r(sum(r(S[i][j] * q[t][i]) for i in range(d_k))) for j in range(d_v)])
        states.append([row[:] for row in S])
    return outs, states


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("places", [2, 3])
def test_by_hand_matches_rounded_loop(seed: int, places: int) -> None:
    rng = np.random.default_rng(seed)
    n, d_k, d_v = 6, 3, 2
    Q, K, V = (np.round(rng.normal(size=s), 1) for s in ((n, d_k), (n, d_k), (n, d_v)))
    g = np.round(-rng.uniform(0.0, 1.5, size=(n, d_k)), 2)
    beta = np.round(rng.uniform(0.1, 1.0, size=n), 2)
    ours = kda_forward(Q, K, V, g, beta, ByHand(places))
    outs, states = rounded_loop(Q.tolist(), K.tolist(), V.tolist(), g.tolist(), beta.tolist(), places)
    unit = 10.0 ** -places
    for mine, theirs in ((ours.output, np.array(outs)), (ours.S, np.array(states))):
        off = np.abs(mine - theirs)
        assert off.max() <= unit * (1 + 1e-9)
        # both round correctly and sum in the same order, so a cell may differ only where a tie was rounded apart:
        # nearly every cell is the same number (a missed rounding site moves many)
        assert (off > 1e-12).mean() <= 0.02
    assert np.abs(ours.output - np.round(ours.output, places)).max() < 1e-12  # every output cell as written down
