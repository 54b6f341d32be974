"""FlashAttention's self-check (core/production.py's rounding_bound) bounds rounding over every key a row
may attend, not only the keys with a weight: a score whose exact value is −1e50, summed from terms of
±1e200, has weight 0 exactly, but summed in another order it is 0 and takes half the weight."""

from __future__ import annotations

import numpy as np

from qkv_tui.core.engine import compute
from qkv_tui.core.production import agreement, rounding_bound
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.edges.export_markdown import to_markdown


def _softmax_mix(scores: np.ndarray, V: np.ndarray) -> np.ndarray:
    e = np.exp(scores - scores.max(axis=1, keepdims=True))
    out: np.ndarray = (e / e.sum(axis=1, keepdims=True)) @ V
    return out


def test_weight_that_rounding_moves_onto_a_key_of_exact_weight_0_is_within_the_bound() -> None:
    q = np.array([[1e100, 1e100, 1e25]])
    K = np.array([[0.0, 0.0, 0.0], [1e100, -1e100, -1e25]])
    V = np.array([[0.0], [1.0]])
    terms = q[0] * K[1]  # 1e200, −1e200, about −1e50
    left_to_right = (terms[0] + terms[1]) + terms[2]  # about −1e50: the exact score
    pairwise = terms[0] + (terms[1] + terms[2])  # 0: −1e200 − 1e50 rounds to −1e200
    assert (left_to_right, pairwise) == (terms[2], 0.0) and terms[2] < -1e49
    want = _softmax_mix(np.array([[0.0, left_to_right]]), V)  # [[0]]: all the weight on key 0
    got = _softmax_mix(np.array([[0.0, pairwise]]), V)  # [[0.5]]
    weights = np.array([[1.0, 0.0]])
    for allow in (None, np.array([[True, True]])):
        bound = rounding_bound(q, K, V, weights, 1.0, allow=allow)
        assert agreement(got, want, bound)[0], bound
    # a key the row may not attend takes no weight however the sums round: it widens nothing
    masked = rounding_bound(q, K, V, weights, 1.0, allow=np.array([[True, False]]))
    assert masked[0, 0] < 1e-10


SCENARIO = """
tokens = ["t0", "t1", "t2"]
X = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
[tiles]
size = 1
[[heads]]
W_Q = [[1e+100, -1e+100], [-1e+25, -1e+25], [-1e+100, 1.0]]
W_K = [[0.0, -1e+25], [1.0, 0.0], [1e+100, 1e+100]]
W_V = [[0.5, -2.0], [1.0, -2.0], [-2.0, -2.0]]
"""


def test_the_markdown_flash_check_says_equal_for_a_rounding_difference() -> None:
    page = to_markdown(compute(parse_scenario(SCENARIO, "rounding.toml")))
    assert "✗" not in page and "DIFFERENT" not in page
    assert "- ✓ equal to the Mix stage within float64 rounding" in page
