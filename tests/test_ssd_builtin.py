"""The built-in scenarios/ssd.toml through the one driver: both forms of Mamba-2's state-space duality against a
NumPy computation written here from Dao and Gu 2024 (the recurrence, and the masked attention with L built as
cumulative products), the two forms agreeing, the gated grouped RMSNorm, the JSON's "ssd" field (contracts §15),
every arithmetic line on the calculator (exact and by hand), the TOML round trip, the views that refuse it in
one line, and the tables and shapes it refuses at load."""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qkv_tui import compute, load_scenario
from qkv_tui.core.scenario import ScenarioError, parse_scenario
from qkv_tui.core.ssd_part import SsdRecord
from qkv_tui.display.view import View
from qkv_tui.edges.export_json import to_json
from qkv_tui.edges.export_markdown import to_markdown
from qkv_tui.teach.handcalc import compute_hand
from qkv_tui.teach.summary import closing_summary
from qkv_tui.teach.trace import Trace

from .test_calculator import assert_holds, check_text, explanation_text

BUILTIN = Path(__file__).resolve().parents[1] / "scenarios" / "ssd.toml"
TEXT = BUILTIN.read_text(encoding="utf-8")


def _reference() -> list[dict[str, np.ndarray]]:
    """Every head both ways, from the file's own numbers (no qkv_tui code): x is X, one group, d = 1."""
    doc = tomllib.loads(TEXT)
    X = np.array(doc["X"], dtype=float)
    s = doc["ssd"]
    n, H = X.shape[0], s["num_heads"]
    d = X.shape[1] // H
    B, C, z = (np.array(s[k], dtype=float) for k in ("B", "C", "z"))
    raw = X @ np.array(s["W_dt"], dtype=float) + np.array(s["dt_bias"], dtype=float)
    dt_all = np.log1p(np.exp(raw))  # softplus (every input here is far below its threshold of 20)
    heads = []
    for h in range(H):
        x = X[:, h * d:(h + 1) * d]
        A, D, dt = s["A"][h], s["D"][h], dt_all[:, h]
        a = np.exp(dt * A)
        state = np.zeros((d, B.shape[1]))
        states, y_rec = [], []
        for t in range(n):
            state = a[t] * state + np.outer(dt[t] * x[t], B[t])
            states.append(state.copy())
            y_rec.append(state @ C[t] + D * x[t])
        L = np.array([[math.prod(a[j + 1:i + 1]) if j <= i else 0.0 for j in range(n)] for i in range(n)])
        y_att = (L * (C @ B.T)) @ (dt[:, None] * x) + D * x
        heads.append({"dt": dt, "a": a, "L": L, "states": np.array(states), "y_rec": np.array(y_rec), "y": y_att})
    y = np.concatenate([hd["y"] for hd in heads], axis=1)
    gated = y * (z / (1 + np.exp(-z)))  # one group: both heads' columns share the mean square
    normed = gated / np.sqrt((gated ** 2).mean(axis=1, keepdims=True) + 1e-5)
    for h, hd in enumerate(heads):
        hd["output"] = normed[:, h * d:(h + 1) * d]
    return heads


@pytest.fixture(scope="module")
def exported() -> dict[str, Any]:
    return json.loads(to_json(compute(load_scenario(BUILTIN))))  # type: ignore[no-any-return]


def test_both_forms_match_an_independent_numpy_computation() -> None:
    comp = compute(load_scenario(BUILTIN))
    for hr, want in zip(comp.heads, _reference(), strict=True):
        s = hr.need(SsdRecord).ssd
        np.testing.assert_allclose(s.dt, want["dt"], atol=1e-12)
        np.testing.assert_allclose(s.a, want["a"], atol=1e-12)
        np.testing.assert_allclose(s.L, want["L"], atol=1e-12)
        np.testing.assert_allclose(s.states, want["states"], atol=1e-12)
        np.testing.assert_allclose(s.y_recurrent, want["y_rec"], atol=1e-12)
        np.testing.assert_allclose(s.y_attention, want["y"], atol=1e-12)
        np.testing.assert_allclose(hr.output, want["output"], atol=1e-12)
        assert s.gap < 1e-12  # the duality: the recurrence and the masked attention agree cell by cell
    # L is the causal mask with its ones faded: 1 on the diagonal, 0 above, strictly between 0 and 1 below
    L = comp.heads[0].need(SsdRecord).ssd.L
    n = L.shape[0]
    assert np.all(np.diag(L) == 1) and np.all(L[np.triu_indices(n, 1)] == 0)
    below = L[np.tril_indices(n, -1)]
    assert np.all((below > 0) & (below < 1))
    assert not np.allclose(L, comp.heads[1].need(SsdRecord).ssd.L)  # the heads fade at their own rates


def test_json_carries_contracts_15s_fields(exported) -> None:
    ref = _reference()
    got = exported["ssd"]["heads"]
    assert [sorted(h) for h in got] == [["L", "a", "dt", "y"]] * 2
    for part, head, want in zip(got, exported["heads"], ref, strict=True):
        for key in ("dt", "a", "L", "y"):
            np.testing.assert_allclose(np.array(part[key], dtype=float), want[key], atol=1e-12, err_msg=key)
        assert np.array(part["L"]).shape == (3, 3) and np.array(part["y"]).shape == (3, 1)
        np.testing.assert_allclose(np.array(head["output"], dtype=float), want["output"], atol=1e-12)
    other = json.loads(to_json(compute(load_scenario("causal_mask"))))
    assert other["ssd"] is None and other["differential"] is None and other["indexer"] is None  # null where unused


def test_the_page_walks_every_stage_and_refuses_cache_and_tiles() -> None:
    page = to_markdown(compute(load_scenario(BUILTIN)), 3)
    for stage in ("· Steps", "· Recurrence", "· Mask L", "· Map", "· Attention", "· Agree", "· Gate", "· Norm"):
        assert stage in page, stage
    assert "· Score" not in page and "· Project" not in page and "· Softmax" not in page
    assert "No tiles for [ssd]" in page and "No KV-cache replay for [ssd]" in page
    assert "L[sat,the] = a[cat]·a[sat] = " in page and "ln(1 + e^" in page


@pytest.mark.parametrize("decimals", [1, 2, 3, 5, 8])
def test_every_line_checks_out_exactly(decimals: int) -> None:
    comp = compute(load_scenario(BUILTIN))
    report = check_text(to_markdown(comp, decimals))
    assert_holds(report)
    assert {"ln(", "e^", "·", "+", "−", "/", "√"} <= report.kinds  # softplus, the decays, the agreement, the norm
    assert_holds(check_text(explanation_text(View(Trace(comp)), decimals)))


@pytest.mark.parametrize("decimals", [1, 2, 3, 4])
def test_every_line_checks_out_by_hand(decimals: int) -> None:
    comp = compute_hand(compute(load_scenario(BUILTIN)), decimals)
    assert_holds(check_text(explanation_text(View(Trace(comp)), decimals), whole=False))


def test_toml_write_back_round_trips(cli) -> None:
    run = cli(str(BUILTIN), "--export", "toml")
    assert run.code == 0, run.err
    again = parse_scenario(run.out, "again.toml")
    first = compute(load_scenario(BUILTIN))
    for a, b in zip(first.heads, compute(again).heads, strict=True):
        np.testing.assert_array_equal(a.weights, b.weights)
        np.testing.assert_array_equal(a.output, b.output)
        np.testing.assert_array_equal(a.need(SsdRecord).ssd.L, b.need(SsdRecord).ssd.L)


def test_check_names_it(cli) -> None:
    run = cli("--check", str(BUILTIN))
    assert run.code == 0 and "state-space duality (2 heads, d_state 2)" in run.out


def test_the_worksheet_refuses_in_one_line(cli, tmp_path) -> None:
    run = cli(str(BUILTIN), "--export", "worksheet", "-o", str(tmp_path / "sheet.md"))
    assert run.code == 2 and run.out == ""
    lines = run.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "[ssd]" in lines[0], run.err


def _refused(text: str) -> str:
    with pytest.raises(ScenarioError) as err:
        parse_scenario(text, "bad.toml")
    message = err.value.message
    assert "\n" not in message
    return message


@pytest.mark.parametrize(("change", "says"), [
    (("", "\n[backward]\ntarget = [[0, 0], [0, 0], [0, 0]]\n"), "[ssd] cannot be used with [backward]"),
    (('mask = "causal"', 'mask = "none"'), '[ssd] needs mask = "causal", got \'none\''),
    (("W_V = [[0], [1]]", "W_V = [[0, 1], [1, 0]]"), "head 2's W_V has 2 columns; expected d = 1"),
    (("num_heads = 2", "num_heads = 1"), "[ssd] num_heads = 1, but the scenario has 2 heads"),
    (("", "\n[linear]\n"), "[ssd] cannot be used with [linear]"),
])
def test_what_it_cannot_combine_with_is_one_line(change: tuple[str, str], says: str) -> None:
    old, new = change
    text = TEXT.replace(old, new, 1) if old else TEXT + new
    if old == "num_heads = 2":  # one [ssd] head needs its own A, D and steps: only the count is wrong here
        text = text.replace("A = [-1.0, -0.5]", "A = [-1.0]").replace("D = [1, 0]", "D = [1]")
        text = text.replace("W_dt = [           # dt = softplus(X·W_dt + dt_bias): each token's own step\n  [1, 0],\n"
                            "  [0, -1],\n]", "W_dt = [[1], [0]]").replace("dt_bias = [0, 0.5]", "dt_bias = [0]")
        text = text.replace("[ssd]\nnum_heads = 1", "[ssd]\nnum_heads = 1\nx = [[1, 1], [2, 1], [1, 2]]")
    assert says in _refused(text)


def test_the_closing_summary_says_how_the_output_is_made_and_claims_no_row_sums() -> None:
    comp = compute(load_scenario(BUILTIN))
    lines = closing_summary(comp, 0, 120, 3)
    assert "(L ∘ C·Bᵀ)·(dt·x) + D·x" in lines[0] and "gated by SiLU(z)" in lines[0]
    assert lines[-1] == "Checks: the 3 masked weights are exactly 0."  # L ∘ C·Bᵀ's rows have no total to check


def test_the_cost_view_counts_a_state_not_a_cache() -> None:
    from qkv_tui.core.cost import kv_cache

    cache = kv_cache(load_scenario(BUILTIN), 2, 4096)
    (layer,) = cache.layers
    assert (layer.kind, cache.per_token, cache.at_context) == ("ssd", 0, 0)
    assert layer.state is not None and layer.state.value == 2 * (1 * 2) * 2  # heads · d·d_state · bytes
