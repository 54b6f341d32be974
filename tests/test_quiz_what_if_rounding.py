"""The core of the extras (decode: tests/test_decode.py): hand rounding, what-if scaling, quiz answers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv_tui import compute, load_scenario
from qkv_tui.core.ssd_part import SsdRecord
from qkv_tui.display.view import hand_note
from qkv_tui.kernels.deltanet import DeltaForward
from qkv_tui.kernels.differential import DiffForward
from qkv_tui.kernels.sinks import Sunk
from qkv_tui.teach.handcalc import compute_hand, round_to
from qkv_tui.teach.quiz import Score, check_choice, check_number, hide_result, parse_number, questions
from qkv_tui.teach.trace import Trace
from qkv_tui.teach.whatif import what_if

from .conftest import SCENARIOS


def test_hand_rounding_reproduces_the_seed() -> None:
    comp = compute(load_scenario("i_love_ai"))
    hand = compute_hand(comp, 3)
    head = hand.heads[0]
    assert head.scaled[0].tolist() == [0.577, 2.887, 1.732]
    assert head.weights[0].tolist() == [0.070, 0.707, 0.223]
    details = Trace(hand).op(49).details
    # the seed's row sum 25.372 comes from rounded exponentials, by hand and in the exact trace alike,
    # since every line is worked from the numbers it shows (exactly, Σ e^s is 25.368)
    assert details[2].endswith("; same weight: e^2.887 / Σ e^s = 17.939 / 25.372 = 0.707")
    assert Trace(comp).op(49).details[2] == details[2]
    # love's uniform row by hand: 3 × 0.333 = 0.999, not 1.000
    assert hand.heads[0].output[1].tolist() == [0.999, 0.999, 0.333]
    note = hand_note(Trace(comp), Trace(hand), 60, 3)
    assert note.startswith("hand rounding: out[love,0] = 0.999 by hand, but 1.000 exactly")
    assert "the same as the exact value" in hand_note(Trace(comp), Trace(hand), 49, 3)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False) | st.sampled_from([1.85, 2.675, 0.125, -0.5, 1.005, 2.5]),
                min_size=1, max_size=20), st.integers(0, 8))
def test_hand_rounding_rounds_as_the_text_reads(values: list[float], decimals: int) -> None:
    """A hand-rounded number is the number the student reads: 1.85 at 1 decimal is 1.9, as printed
    (np.round gives 1.8: it scales by 10 in binary first)."""
    rounded = round_to(np.array(values), decimals)
    for x, r in zip(values, rounded):
        assert r == float(f"{x:.{decimals}f}"), (x, decimals)


def test_a_tie_in_the_hand_computation_is_the_printed_one() -> None:
    assert round_to(np.array([1.85, 2.675, -1.85]), 1).tolist() == [1.9, 2.7, -1.9]
    assert float(round_to(np.array(1.85), 1)) == 1.9  # a 0-d value too
    assert round_to(np.array([1e306, np.inf, np.nan]), 3)[:2].tolist() == [1e306, np.inf]


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_hand_rounding_converges_to_exact(path) -> None:
    comp = compute(load_scenario(path))
    hand = compute_hand(comp, 10)
    assert np.allclose(hand.output, comp.output, atol=1e-7)
    for h in hand.heads:
        if h.part(DeltaForward) is not None or h.part(SsdRecord) is not None:
            continue  # their weights are q·k (C·Bᵀ) times a decaying mask: no distribution
        if h.part(DiffForward) is not None:  # p₁ − λ·p₂: its rows sum to 1 − λ
            assert np.allclose(h.weights.sum(axis=1), 1 - h.need(DiffForward).lam.value, atol=1e-8)
            continue
        sink_share = h.need(Sunk).sink_exp / h.row_sum if h.part(Sunk) is not None else 0.0  # a sink's dropped column
        assert np.allclose(h.weights.sum(axis=1) + sink_share, 1, atol=1e-8)


def test_what_if_scaling() -> None:
    head = compute(load_scenario("i_love_ai")).heads[0]
    rows = what_if(head, np.ones((3, 3), dtype=bool), 0)
    assert [r.d_k for r in rows] == [3, 12, 48]
    for r in rows:  # dividing by √(f·dₖ) undoes the √f stretch exactly
        assert np.allclose(r.scaled, head.weights[0])
    maxima = [r.unscaled_max for r in rows]
    assert maxima == sorted(maxima) and maxima[-1] > 0.999
    assert round(rows[0].unscaled_max, 3) == 0.867


def test_what_if_keeps_masked_keys_at_zero() -> None:
    comp = compute(load_scenario("causal_mask"))
    rows = what_if(comp.heads[0], comp.allow, 1)
    assert all(r.unscaled[2] == 0 and r.scaled[2] == 0 for r in rows)


@pytest.mark.parametrize(("text", "value", "integral", "right"), [
    ("0.707", 0.7071067, False, True),
    (".707", 0.7071067, False, True),
    ("0.7074", 0.7071067, False, True),  # shows as 0.707 at 3 decimals
    ("0.7075", 0.7071067, False, False),  # shows as 0.708: one answer never fits two shown values
    ("0.708", 0.7071067, False, False),
    ("2", 2.0, True, True),
    ("2.4", 2.0, True, False),  # a whole-number cell wants the whole number
    ("2.0", 2.0, True, True),
    ("3", 2.0, True, False),
    ("−1.5", -1.5, False, True),  # a typographic minus
    ("-inf", -math.inf, False, True),
    ("−∞", -math.inf, False, True),
    ("0", -math.inf, False, False),
    ("1e-3", 0.001, False, True),
])
def test_numbers_are_judged_at_the_shown_precision(text: str, value: float, integral: bool, right: bool) -> None:
    assert check_number(text, value, integral, 3).right is right


@pytest.mark.parametrize("text", ["", "   ", "abc", "0.7.1", "--1", "1,2,3"])
def test_non_answers_are_answered_kindly(text: str) -> None:
    verdict = check_number(text, 0.5, False, 3)
    assert verdict.right is None and verdict.message
    assert parse_number("abc") is None


def test_choice_and_score() -> None:
    keys = ("I", "love", "AI")
    assert check_choice("love", keys, frozenset({"love"})).right is True
    assert check_choice("LOVE", keys, frozenset({"love"})).right is True
    assert check_choice("AI", keys, frozenset({"love"})).right is False
    assert check_choice("cat", keys, frozenset({"love"})).right is None
    score = Score().add(check_number("2", 2, True, 3)).add(check_number("x", 2, True, 3)).add(check_number("5", 2, True, 3))
    assert str(score) == "1/2 right"


def test_questions_follow_the_operations() -> None:
    trace = Trace(compute(load_scenario("i_love_ai")))
    assert questions(trace, 0, 3) == []  # an embedding is looked up, not computed
    (q,) = questions(trace, 3, 3)
    assert q.kind == "value" and q.prompt.startswith("What is Q[I,0]?") and q.check("2").right
    argmax, value = questions(trace, 48, 3)
    assert argmax.kind == "argmax" and argmax.check("love").right and not argmax.check("I").right
    assert value.check("0.070").right
    shown = "scores[I,love] = Q[I]·K[love] = 2·2 + 0·1 + 1·1 = 5"
    assert hide_result(shown) == "scores[I,love] = Q[I]·K[love] = 2·2 + 0·1 + 1·1 = ?"
