"""Query/key heads wider than value heads outside [mla] (MiMo-V2-Flash: head_dim 192, v_head_dim 128): a
[[heads]] head whose W_V is narrower than its W_Q loads, computes as NumPy does, and every line checks out."""

from __future__ import annotations

import numpy as np

from qkv_tui import compute
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.display.view import View
from qkv_tui.teach.trace import Trace

from .test_calculator import assert_holds, check_text, explanation_text

TEXT = """
tokens = ["a", "b", "c"]
X = [[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]]

[[heads]]
W_Q = [[1, 0, 1, 0.5], [0, 1, 0, 1], [1, 0, 0, 0], [0, 1, 1, 2]]
W_K = [[0, 0, 1, 1], [1, 1, 0, 0], [0, 1, 0, 1], [1, 0, 1, 0]]
W_V = [[1], [0], [2], [1]]

[[heads]]
W_Q = [[1, -1, 0], [0, 1, 1], [1, 0, 2], [0, 3, 0]]
W_K = [[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 1]]
W_V = [[0, 1], [1, 0], [1, 1], [0, 0]]
"""


def test_narrow_values_compute_as_numpy_does() -> None:
    comp = compute(parse_scenario(TEXT, "narrow.toml"))
    assert [(h.d_k, h.d_v) for h in comp.heads] == [(4, 1), (3, 2)]
    X = np.array([[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]], dtype=float)
    for hr in comp.heads:
        s = (X @ hr.W_Q) @ (X @ hr.W_K).T / np.sqrt(hr.d_k)
        w = np.exp(s - s.max(axis=1, keepdims=True))
        w /= w.sum(axis=1, keepdims=True)
        np.testing.assert_allclose(hr.output, w @ (X @ hr.W_V), rtol=1e-13)
    assert comp.output.shape == (3, 3)  # no W_O: the heads' d_v side by side, 1 + 2


def test_every_line_checks_out() -> None:
    comp = compute(parse_scenario(TEXT, "narrow.toml"))
    for decimals in (2, 4):
        assert_holds(check_text(explanation_text(View(Trace(comp)), decimals)))
