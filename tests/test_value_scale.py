"""[value_scale] (MiMo-V2-Flash's attention_value_scale): V = (X·W_V + b_V)·factor after the projection, before
the mix, as transformers' MiMoV2FlashAttention; the shown V is the scaled V and every later stage reads it."""

from __future__ import annotations

import re

import numpy as np
import pytest

from qkv_tui import compute
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.core.variants import value_scale
from qkv_tui.display.view import View
from qkv_tui.edges.export_markdown import to_markdown
from qkv_tui.edges.export_toml import to_toml
from qkv_tui.teach.handcalc import compute_hand
from qkv_tui.teach.trace import Trace

from .error_table import assert_one_error_line
from .test_calculator import assert_holds, check_text, explanation_text

X = [[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]]
# grouped K/V heads with queries and keys 3 wide and values 2 wide (MiMo's d_k 192 against d_v 128), a value bias
BASE = """
tokens = ["I", "love", "AI"]
X = [[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]]
mask = "causal"

[attention]
num_heads = 2
num_kv_heads = 1
W_Q = [[1, 0, 1, 0.5, 0, 1], [0, 1, 0, 1, -1, 0], [1, 0, 0, 0, 1, 1], [0, 1, 1, 2, 0, -1]]
W_K = [[0, 0, 1], [1, 1, 0], [0, 1, 0], [1, 0, 1]]
W_V = [[1, 0.5], [0, 1], [2, 0], [1, -1]]
b_V = [0.25, -0.5]

[output]
W_O = [[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, -1]]
"""
FACTOR = 0.707


def scaled(factor: float | str = FACTOR, base: str = BASE) -> str:
    return base + f"\n[value_scale]\nfactor = {factor}\n"


def numpy_layer(factor: float) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
    """The same layer written out in NumPy, as transformers computes it: V scaled before the mix."""
    x = np.array(X, dtype=float)
    W_Q = np.array([[1, 0, 1, 0.5, 0, 1], [0, 1, 0, 1, -1, 0], [1, 0, 0, 0, 1, 1], [0, 1, 1, 2, 0, -1]])
    W_K = np.array([[0, 0, 1], [1, 1, 0], [0, 1, 0], [1, 0, 1]], dtype=float)
    W_V = np.array([[1, 0.5], [0, 1], [2, 0], [1, -1]])
    b_V = np.array([0.25, -0.5])
    W_O = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, -1]], dtype=float)
    K = x @ W_K
    V = (x @ W_V + b_V) * factor
    causal = np.tril(np.ones((3, 3), dtype=bool))
    Vs, outs = [], []
    for h in range(2):
        Q = x @ W_Q[:, 3 * h:3 * h + 3]
        s = np.where(causal, Q @ K.T / np.sqrt(3), -np.inf)
        w = np.exp(s - s.max(axis=1, keepdims=True))
        w /= w.sum(axis=1, keepdims=True)
        Vs.append(V)
        outs.append(w @ V)
    return Vs, outs, np.concatenate(outs, axis=1) @ W_O


def test_values_and_output_carry_the_scale_as_numpy_computes_them() -> None:
    comp = compute(parse_scenario(scaled(), "scaled.toml"))
    Vs, outs, final = numpy_layer(FACTOR)
    for hr, V, out in zip(comp.heads, Vs, outs, strict=True):
        assert (hr.d_k, hr.d_v) == (3, 2)
        np.testing.assert_allclose(hr.V, V, rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(hr.output, out, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(comp.output, final, rtol=1e-13, atol=1e-15)
    # and the scale is not a no-op: without it the output differs by exactly the factor
    plain = compute(parse_scenario(BASE, "plain.toml"))
    np.testing.assert_allclose(comp.heads[0].output, plain.heads[0].output * FACTOR, rtol=1e-13)


def test_a_head_sharing_its_kv_head_reads_the_scaled_values_once() -> None:
    comp = compute(parse_scenario(scaled(), "scaled.toml"))
    assert comp.heads[1].V is comp.heads[0].V  # computed (and scaled) once, by the first reader
    np.testing.assert_allclose(comp.heads[1].V, numpy_layer(FACTOR)[0][1], rtol=1e-13)


@pytest.mark.parametrize("decimals", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("factor", [FACTOR, 3.5, 0.125])
def test_every_line_checks_out_on_a_calculator(decimals: int, factor: float) -> None:
    comp = compute(parse_scenario(scaled(factor), "scaled.toml"))
    text = explanation_text(View(Trace(comp)), decimals)
    assert_holds(check_text(text))
    assert_holds(check_text(to_markdown(comp, decimals)))
    v_lines = [line for line in text.splitlines() if line.startswith("V[")]
    assert v_lines
    for line in v_lines:  # the factor is an operand like any other: shown to at least the page's decimals
        shown = re.search(r"\)·([\d.]+) = ", line)
        assert shown is not None, line
        assert abs(float(shown.group(1)) - factor) <= 10.0 ** -decimals, line  # within one unit of its last digit


@pytest.mark.parametrize("decimals", [1, 2, 3, 4])
def test_by_hand_each_step_checks_out(decimals: int) -> None:
    comp = compute_hand(compute(parse_scenario(scaled(), "scaled.toml")), decimals)
    assert_holds(check_text(explanation_text(View(Trace(comp)), decimals), whole=False))


def test_the_project_line_works_the_first_value_cell() -> None:
    comp = compute(parse_scenario(scaled(), "scaled.toml"))
    text = explanation_text(View(Trace(comp)), 3)
    # X[I] = [1, 0, 1, 0], W_V[:,0] = [1, 0, 2, 1], b_V[0] = 0.25: (3 + 0.25)·0.707 = 2.29775
    line = next(line for line in text.splitlines() if line.startswith("V[I,0]"))
    assert line.startswith("V[I,0] = (X[I]·W_V[:,0] + b_V[0])·0.707 = ")
    assert line.endswith(" = 3.250·0.707 = 2.298")


@pytest.mark.parametrize(("factor", "expected"), [
    ("0", "[value_scale] factor = 0; expected a finite number > 0"),
    ("-0.5", "[value_scale] factor = -0.5; expected a finite number > 0"),
    ("inf", "[value_scale] factor = inf; expected a finite number > 0"),
    ("nan", "[value_scale] factor = nan; expected a finite number > 0"),
    ('"0.7"', "[value_scale] factor must be a number > 0"),
    ("true", "[value_scale] factor must be a number > 0"),
])
def test_a_bad_factor_is_one_line(cli, write, factor: str, expected: str) -> None:
    assert_one_error_line(cli, write, scaled(factor), expected)


def test_a_missing_factor_and_transformers_name_are_one_line(cli, write) -> None:
    assert_one_error_line(cli, write, BASE + "\n[value_scale]\n", "[value_scale] is missing 'factor'")
    assert_one_error_line(cli, write, BASE + "\n[value_scale]\nattention_value_scale = 0.707\n",
                          "unknown key 'attention_value_scale' in [value_scale]; did you mean 'factor'?")


def test_the_check_line_names_the_scale(cli, write) -> None:
    run = cli("--check", str(write(scaled())))
    assert run.code == 0, run.err
    assert run.out.rstrip().endswith("values scaled by 0.707")


@pytest.mark.parametrize("factor", [FACTOR, 0.1 + 0.2, 2])
def test_toml_write_back_round_trips(factor: float) -> None:
    sc = parse_scenario(scaled(factor), "scaled.toml")
    text = to_toml(sc)
    assert "[value_scale]" in text
    again = parse_scenario(text, "again.toml")
    assert value_scale.TABLE.of(again) == value_scale.TABLE.of(sc) == factor
    assert to_toml(again).split("\n", 1)[1] == text.split("\n", 1)[1]  # the first line names the file
    np.testing.assert_array_equal(compute(again).output, compute(sc).output)


def test_without_the_table_nothing_changes() -> None:
    sc = parse_scenario(BASE, "plain.toml")
    assert value_scale.TABLE.of(sc) is None
    assert "[value_scale]" not in to_toml(sc)
    np.testing.assert_allclose(compute(sc).heads[0].V, numpy_layer(1.0)[0][0], rtol=1e-13)
