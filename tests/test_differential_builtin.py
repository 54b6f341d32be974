"""The built-in scenarios/differential.toml through the one driver: its JSON against a NumPy computation written
here from contracts §14, its rows summing to 1 − λ, its negative cells, every arithmetic line on the calculator
(exact and by hand), its TOML round trip and the views that refuse it in one line ([backward] with it:
tests/test_differential_scenario_grads_torch.py)."""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path

import numpy as np
import pytest

from qkv_tui import compute, load_scenario
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.display.view import View
from qkv_tui.edges.export_json import to_json
from qkv_tui.edges.export_markdown import to_markdown
from qkv_tui.teach.handcalc import compute_hand
from qkv_tui.teach.trace import Trace

from .test_calculator import assert_holds, check_text, explanation_text

BUILTIN = Path(__file__).resolve().parents[1] / "scenarios" / "differential.toml"


def _softmax(s: np.ndarray, allow: np.ndarray) -> np.ndarray:
    s = np.where(allow, s, -np.inf)
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _reference() -> dict[str, object]:
    """Contracts §14 in NumPy, from the file's own numbers (no qkv_tui code)."""
    doc = tomllib.loads(BUILTIN.read_text())
    X = np.array(doc["X"], dtype=float)
    n = len(X)
    allow = np.tril(np.ones((n, n), dtype=bool))
    df = doc["differential"]
    init = df["lambda_init"]
    heads = []
    for h, head in enumerate(doc["heads"]):
        Q, K, V = (X @ np.array(head[w], dtype=float) for w in ("W_Q", "W_K", "W_V"))
        d = Q.shape[1] // 2
        lam = (math.exp(np.dot(df["lambda_q1"][h], df["lambda_k1"][h]))
               - math.exp(np.dot(df["lambda_q2"][h], df["lambda_k2"][h])) + init)
        s1, s2 = Q[:, :d] @ K[:, :d].T, Q[:, d:] @ K[:, d:].T
        p1, p2 = _softmax(s1 / math.sqrt(d), allow), _softmax(s2 / math.sqrt(d), allow)
        A = p1 - lam * p2
        mixed = A @ V
        normed = mixed / np.sqrt((mixed ** 2).mean(axis=1, keepdims=True) + 1e-5)
        heads.append({"lambda": lam, "scores": s1, "scores_2": s2, "weights_1": p1, "weights_2": p2,
                      "weights": A, "normed": normed, "output": (1 - init) * normed})
    return {"lambda_init": init, "heads": heads}


@pytest.fixture(scope="module")
def exported() -> dict[str, object]:
    return json.loads(to_json(compute(load_scenario(BUILTIN))))  # type: ignore[no-any-return]


def test_json_matches_an_independent_numpy_computation(exported) -> None:
    ref = _reference()
    got = exported["differential"]
    assert got["lambda_init"] == ref["lambda_init"]
    for h, want in enumerate(ref["heads"]):
        head, part = exported["heads"][h], got["heads"][h]
        assert part["lambda"] == pytest.approx(want["lambda"], abs=1e-12)
        for key in ("scores_2", "weights_1", "weights_2", "normed"):
            np.testing.assert_allclose(np.array(part[key], dtype=float), want[key], atol=1e-12, err_msg=key)
        # the head's own fields: the first map's scores, the map that multiplies V, the output after the factor
        np.testing.assert_allclose(np.array(head["scores"], dtype=float), want["scores"], atol=1e-12)
        np.testing.assert_allclose(np.array(head["weights"], dtype=float), want["weights"], atol=1e-12)
        np.testing.assert_allclose(np.array(head["output"], dtype=float), want["output"], atol=1e-12)


def test_rows_sum_to_one_minus_lambda_and_some_cells_are_negative(exported) -> None:
    all_weights = []
    for head, part in zip(exported["heads"], exported["differential"]["heads"]):
        weights = np.array(head["weights"], dtype=float)
        np.testing.assert_allclose(weights.sum(axis=1), 1 - part["lambda"], atol=1e-12)
        all_weights.append(weights)
    assert min(float(w.min()) for w in all_weights) < 0  # the built-in shows a negative cell, as it says


def test_the_trace_says_rows_sum_to_one_minus_lambda() -> None:
    page = to_markdown(compute(load_scenario(BUILTIN)), 3)
    assert "sums to 1 − λ = 1 − 0.200 = 0.800" in page and "sums to 1 − λ = 1 − 0.400 = 0.600" in page
    for stage in ("Score₂", "Scale₂", "Softmax₂", "· λ", "Subtract", "Sub-norm", "1 − λ_init"):
        assert stage in page


@pytest.mark.parametrize("decimals", [1, 2, 3, 5, 8])
def test_every_line_checks_out_exactly(decimals: int) -> None:
    comp = compute(load_scenario(BUILTIN))
    assert_holds(check_text(to_markdown(comp, decimals)))
    assert_holds(check_text(explanation_text(View(Trace(comp)), decimals)))


@pytest.mark.parametrize("decimals", [1, 2, 3, 4])
def test_every_line_checks_out_by_hand(decimals: int) -> None:
    comp = compute_hand(compute(load_scenario(BUILTIN)), decimals)
    assert_holds(check_text(explanation_text(View(Trace(comp)), decimals), whole=False))


def test_toml_write_back_round_trips(cli, tmp_path) -> None:
    run = cli(str(BUILTIN), "--export", "toml")
    assert run.code == 0, run.err
    again = parse_scenario(run.out, "again.toml")
    first = compute(load_scenario(BUILTIN))
    for a, b in zip(first.heads, compute(again).heads):
        np.testing.assert_array_equal(a.weights, b.weights)
        np.testing.assert_array_equal(a.output, b.output)


def test_check_names_it(cli) -> None:
    run = cli("--check", str(BUILTIN))
    assert run.code == 0 and "differential attention (λ_init 0.2, given)" in run.out


def test_the_page_refuses_cache_and_tiles_in_a_line_each() -> None:
    page = to_markdown(compute(load_scenario(BUILTIN)), 3)
    assert "No tiles for differential attention" in page and "No KV-cache replay for differential" in page
    assert "K_cache" not in page
