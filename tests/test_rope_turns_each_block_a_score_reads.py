"""RoPE's part turns each block of columns one score reads as a head of that width (core/part_questions.py
score_width: a differential head's two halves), so the head's record of the turn is what the two maps score
without the differential part replacing it; the differential part scores what RoPE's part left and names no RoPE.
Checked against LLaMA's rotate_half worked in NumPy."""

from __future__ import annotations

import ast
import re

import numpy as np
import pytest

from qkv_tui import compute
from qkv_tui.core import part_questions as ask
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.kernels.differential import DiffForward
from qkv_tui.kernels.rope import Rotated

from .conftest import ROOT
from .test_views_ask_the_parts import _reach

SCENARIO = '''
tokens = ["a", "b", "c"]
X = [[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]]
mask = "causal"

[attention]
num_heads = 2
num_kv_heads = 1
W_Q = [[1, 0, 1, 0, 0.5, 1, 0, 0], [0, 1, 0, 0, 1, 0, 0, 1], [1, 0, 0, 1, 0, 0, 1, 0], [0, 1, 1, 0, 0, 1, 1, 0]]
W_K = [[0, 0, 1, 1], [1, 1, 0, 0], [0, 1, 0, 1], [1, 0, 1, 0]]
W_V = [[1, 0, 0, 1], [0, 1, 0, 0], [0, 0, 1, 0], [1, 1, 0, 1]]

[rope]
layout = "half"
base = 100

[differential]
lambda_q1 = [[0.1, 0.2], [0, 0.1]]
lambda_k1 = [[0.3, -0.1], [0.2, 0]]
lambda_q2 = [[-0.2, 0.1], [0.1, 0.1]]
lambda_k2 = [[0.05, 0.4], [0, -0.3]]
layer = 2
'''


def _rotate_half(M: np.ndarray) -> np.ndarray:
    """transformers' LLaMA RoPE on (n, 2) rows at positions 0, 1, 2, …: one pair, θ = 100^0 = 1."""
    p = np.arange(M.shape[0], dtype=float)
    x1, x2 = M[:, :1], M[:, 1:]
    cos, sin = np.cos(p)[:, None], np.sin(p)[:, None]
    return M * cos + np.concatenate([-x2, x1], axis=1) * sin


def _halves(M: np.ndarray) -> np.ndarray:
    return np.concatenate([_rotate_half(M[:, :2]), _rotate_half(M[:, 2:])], axis=1)


def test_each_half_of_each_head_is_turned_as_a_head_of_width_d() -> None:
    sc = parse_scenario(SCENARIO, "t.toml")
    assert ask.score_width(sc, 4) == 2
    for hr in compute(sc).heads:  # the second head reads the first one's K/V head, turned once
        f, turned = hr.need(DiffForward), hr.need(Rotated)
        np.testing.assert_allclose(turned.Q_rot, _halves(f.Q), rtol=0, atol=1e-12)
        np.testing.assert_allclose(turned.K_rot, _halves(f.K), rtol=0, atol=1e-12)
        assert f.moved == (turned,)
        np.testing.assert_array_equal(turned.Q_rot, f.Q_used)  # the maps scored what the record says
        np.testing.assert_array_equal(turned.K_rot, f.K_used)


def test_without_a_table_that_turns_there_is_no_turn() -> None:
    sc = parse_scenario(SCENARIO.replace('[rope]\nlayout = "half"\nbase = 100\n', ""), "t.toml")
    assert ask.turn(sc, 2, None) is None
    assert ask.score_width(parse_scenario(SCENARIO.split("[differential]")[0], "t.toml"), 4) == 4


@pytest.mark.parametrize("module", ["core/differential_part.py", "core/shared_kv_part.py", "core/engine.py"])
def test_the_module_names_no_step_on_queries_and_keys(module: str) -> None:
    reach = _reach()
    used = reach.names_in(ast.parse((ROOT / "qkv_tui" / module).read_text(encoding="utf-8")))
    named = {v for v in ("rope", "qk_norm") if any(re.search(reach.VARIANTS[v], n) for n in used)}
    assert not named, named
