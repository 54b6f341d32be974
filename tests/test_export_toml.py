"""The TOML export: export -> load -> compute gives back exactly the original computation."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv_tui import compute, load_scenario
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.edges.export_toml import number, string, to_toml

from .conftest import SCENARIOS
from .strategies import cases


def same_computation(a: object, b: object) -> None:
    ca, cb = compute(a), compute(b)  # type: ignore[arg-type]
    assert ca.scenario.tokens == cb.scenario.tokens and ca.scenario.key_tokens == cb.scenario.key_tokens
    assert ca.scenario.title == cb.scenario.title and ca.scenario.description == cb.scenario.description
    np.testing.assert_array_equal(ca.scenario.allow, cb.scenario.allow)
    assert [h.name for h in ca.heads] == [h.name for h in cb.heads]
    for ha, hb in zip(ca.heads, cb.heads, strict=True):
        assert ha.scale == hb.scale
        for name in ("W_Q", "W_K", "W_V", "Q", "K", "V", "weights", "output"):
            np.testing.assert_array_equal(getattr(ha, name), getattr(hb, name))  # bit for bit, not approximately
    np.testing.assert_array_equal(ca.output, cb.output)


def round_trip(path_or_name: object) -> object:
    original = load_scenario(path_or_name)  # type: ignore[arg-type]
    text = to_toml(original)
    again = parse_scenario(text, "exported.toml")
    same_computation(original, again)
    return again


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_every_shipped_scenario_round_trips(path: Path) -> None:
    round_trip(path)


@settings(deadline=None, max_examples=60)
@given(cases())
def test_generated_scenarios_round_trip(case: object) -> None:
    original = parse_scenario(case.toml, "generated.toml")  # type: ignore[attr-defined]
    same_computation(original, parse_scenario(to_toml(original), "exported.toml"))


@settings(deadline=None, max_examples=200)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_every_float_reads_back_exactly(value: float) -> None:
    assert tomllib.loads(f"x = {number(value)}")["x"] == value


@settings(deadline=None, max_examples=200)
@given(st.text())
def test_every_string_reads_back_exactly(text: str) -> None:
    assert tomllib.loads(f"x = {string(text)}")["x"] == text


def test_whole_numbers_stay_whole_and_the_rest_is_exact() -> None:
    assert [number(v) for v in (1.0, -3.0, 0.1, 1 / 3, 1e-5, 2.0**60)] == [
        "1", "-3", "0.1", "0.3333333333333333", "1e-05", "1.152921504606847e+18"]


def test_the_file_reads_like_a_hand_written_one() -> None:
    text = to_toml(load_scenario("i_love_ai"))
    assert 'tokens = ["I", "love", "AI"]' in text
    assert "X = [\n  [1, 0, 1, 0],\n  [0, 1, 0, 1],\n  [1, 1, 0, 0],\n]" in text
    assert text.startswith("# Exported by qkv-tui --export toml from i_love_ai")


def test_the_command_line_writes_it(cli) -> None:
    run = cli("--export", "toml", "two_heads")
    assert run.code == 0 and run.err == ""
    same_computation(load_scenario("two_heads"), parse_scenario(run.out, "exported.toml"))
    bad = cli("--export", "toml", "no_such_scenario")
    assert bad.code == 2 and bad.out == "" and bad.err.startswith("error: no_such_scenario: no such file")
