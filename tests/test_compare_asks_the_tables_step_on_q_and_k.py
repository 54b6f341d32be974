"""--compare (core/diagnose.py) asks the scenario's tables for their step on Q and K and its mistakes, and for a
setting it does not try them with, instead of naming RoPE: the report's names and order, the refusal's words and
order, and the step's numbers (LLaMA's rotate_half worked again in NumPy) are as they were."""

from __future__ import annotations

import ast
import re

import numpy as np

from qkv_tui.core.diagnose import MISTAKES, forward, problem_of, variants
from qkv_tui.core.scenario import parse_scenario

from .conftest import ROOT
from .test_views_ask_the_parts import _reach

PLAIN = '''tokens = ["a", "b", "c"]
X = [[1, 0, 0.5, 0], [0, 1, 0, 1], [1, 1, 0, -0.5]]
mask = "causal"

[[heads]]
W_Q = [[1, 0], [0, 1], [1, 0.5], [0, 0.25]]
W_K = [[0, 1], [1, 0], [0.5, 1], [1, 0]]
W_V = [[1, 1], [0, 1], [1, 0], [0, 0]]
'''
ROPE = '\n[rope]\nlayout = "half"\nbase = 100\n'


def test_the_report_names_the_steps_mistake_after_head_order() -> None:
    assert MISTAKES[MISTAKES.index("head_order") + 1] == "rope_layout"
    assert MISTAKES.count("rope_layout") == 1


def test_a_setting_not_tried_is_named_after_b_o_as_before() -> None:
    eye = "[[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]"
    wide = PLAIN.split("[[heads]]")[0] + f"[[heads]]\nW_Q = {eye}\nW_K = {eye}\nW_V = {eye}\n"
    text = wide + "\n[output]\nW_O = " + eye + "\nb_O = [1, 0, 0, 0]\n" + ROPE + "partial = 0.5\n"
    said = problem_of(parse_scenario(text, "f.toml"))
    assert said == "the mistakes are tried on plain attention; this scenario has b_O, RoPE's partial or scaling"


def _turn_half(M: np.ndarray, base: float) -> np.ndarray:
    """LLaMA's rotate_half on (n, 2) rows at positions 0, 1, 2, …: one pair, θ = base^0 = 1."""
    p = np.arange(M.shape[0], dtype=float)
    c, s = np.cos(p), np.sin(p)
    return np.stack([M[:, 0] * c - M[:, 1] * s, M[:, 0] * s + M[:, 1] * c], axis=1)


def test_the_step_and_its_mistake_turn_q_and_k() -> None:
    sc = parse_scenario(PLAIN + ROPE, "f.toml")
    p = problem_of(sc)
    assert not isinstance(p, str)
    assert "rope_layout" in variants(p)
    h = sc.heads[0]
    Q, K = sc.X @ h.W_Q, sc.X @ h.W_K
    right = forward(p)
    np.testing.assert_allclose(right.scores[0], _turn_half(Q, 100.0) @ _turn_half(K, 100.0).T, rtol=1e-12)
    # with d_k = 2 both layouts pair (0, 1): the mistake changes nothing here, and the search never names it
    np.testing.assert_allclose(forward(p, frozenset({"rope_layout"})).scores, right.scores, rtol=1e-12)


def test_the_diagnosis_names_no_variant() -> None:
    reach = _reach()
    used = reach.names_in(ast.parse((ROOT / "qkv_tui" / "core" / "diagnose.py").read_text(encoding="utf-8")))
    named = {v for v, pattern in reach.VARIANTS.items() if any(re.search(pattern, n) for n in used)}
    assert not named, named
