"""The built-in scenarios/dsa.toml through the one driver: the lightning indexer's scores, its selection and the
attention that follows, against a NumPy computation written here from DeepSeek-V3.2's formula (contracts §15);
top_k covering every visible key giving full attention exactly; every arithmetic line on the calculator (exact
and by hand); its TOML round trip and JSON field; the views that refuse it in one line, and [backward] refused."""

from __future__ import annotations

import json
import math
import re
import tomllib
from pathlib import Path

import numpy as np
import pytest

from qkv_tui import compute, load_scenario
from qkv_tui.core.indexer_part import Selection
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.display.view import View
from qkv_tui.edges.export_json import to_json
from qkv_tui.edges.export_markdown import to_markdown
from qkv_tui.teach.handcalc import compute_hand
from qkv_tui.teach.trace import Trace

from .test_calculator import assert_holds, check_text, explanation_text

BUILTIN = Path(__file__).resolve().parents[1] / "scenarios" / "dsa.toml"
TEXT = BUILTIN.read_text(encoding="utf-8")


def _reference(text: str = TEXT) -> dict[str, np.ndarray]:
    """I[t,s] = Σ_j w[t,j]·ReLU(q_I[t,j]·k_I[s]), w = X·W_w / √(H_I·d_I), top_k per row (ties to the earlier key),
    then one softmax head over the selected keys: from the file's own numbers, no qkv_tui code."""
    doc = tomllib.loads(text)
    X = np.array(doc["X"], dtype=float)
    n = len(X)
    causal = np.tril(np.ones((n, n), dtype=bool))
    ix = doc["indexer"]
    H, top_k = ix["num_heads"], ix["top_k"]
    W_q, W_k, W_w = (np.array(ix[k], dtype=float) for k in ("W_q", "W_k", "W_w"))
    d_I = W_k.shape[1]
    k = X @ W_k
    w = X @ W_w / math.sqrt(H * d_I)
    scores = np.zeros((n, n))
    for t in range(n):
        for s in range(n):
            scores[t, s] = sum(w[t, j] * max(float(X[t] @ W_q[:, j * d_I:(j + 1) * d_I] @ k[s]), 0.0) for j in range(H))
    scores[~causal] = -np.inf
    selected = np.zeros((n, n), dtype=bool)
    for t in range(n):
        visible = [s for s in range(n) if causal[t, s]]
        for s in sorted(visible, key=lambda s: (-scores[t, s], s))[:top_k]:
            selected[t, s] = True
    head = doc["heads"][0]
    Q, K, V = (X @ np.array(head[m], dtype=float) for m in ("W_Q", "W_K", "W_V"))
    logits = np.where(selected, Q @ K.T / math.sqrt(Q.shape[1]), -np.inf)
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    weights = e / e.sum(axis=1, keepdims=True)
    return {"scores": scores, "selected": selected, "weights": weights, "output": weights @ V}


def _with_top_k(k: int) -> str:
    return re.sub(r"(?m)^top_k = 2 ", f"top_k = {k} ", TEXT)


@pytest.fixture(scope="module")
def exported() -> dict[str, object]:
    return json.loads(to_json(compute(load_scenario(BUILTIN))))  # type: ignore[no-any-return]


def test_json_matches_an_independent_numpy_computation(exported) -> None:
    ref = _reference()
    got = exported["indexer"]
    scores = np.array([[-np.inf if v is None else v for v in row] for row in got["scores"]])
    np.testing.assert_allclose(scores, ref["scores"], atol=1e-12)
    assert got["selected"] == ref["selected"].tolist()
    head = exported["heads"][0]
    np.testing.assert_allclose(np.array(head["weights"], dtype=float), ref["weights"], atol=1e-12)
    np.testing.assert_allclose(np.array(head["output"], dtype=float), ref["output"], atol=1e-12)
    # the built-in drops a key in two rows, the query's own key among them, as its description says
    assert not ref["selected"][2, 0] and not ref["selected"][3, 3] and not ref["selected"][3, 0]


def test_masked_where_the_causal_mask_hides_a_key_and_selected_is_false_there(exported) -> None:
    got = exported["indexer"]
    n = len(got["scores"])
    for t in range(n):
        for s in range(t + 1, n):
            assert got["scores"][t][s] is None and got["selected"][t][s] is False


def test_dropped_keys_weigh_exactly_zero_and_rows_sum_to_one() -> None:
    comp = compute(load_scenario(BUILTIN))
    sel = comp.heads[0].need(Selection)
    for hr in comp.heads:
        assert np.all(hr.weights[~sel.mask] == 0.0)  # exactly 0, not small
        assert np.all(np.isneginf(hr.masked[~sel.mask]))
        np.testing.assert_allclose(hr.weights.sum(axis=1), 1.0, atol=1e-15)
    assert np.array_equal(comp.allow, sel.mask) and not np.array_equal(comp.allow, comp.scenario.allow)


@pytest.mark.parametrize("top_k", [4, 7])
def test_top_k_covering_every_visible_key_is_full_attention_exactly(top_k: int) -> None:
    sparse = compute(parse_scenario(_with_top_k(top_k), "dsa_full.toml"))
    without = re.sub(r"(?ms)^\[indexer\].*\Z", "", TEXT)
    full = compute(parse_scenario(without, "no_indexer.toml"))
    assert sparse.heads[0].need(Selection).indexed.covers_all
    for a, b in zip(sparse.heads, full.heads, strict=True):
        np.testing.assert_array_equal(a.weights, b.weights)
        np.testing.assert_array_equal(a.output, b.output)
    np.testing.assert_array_equal(sparse.output, full.output)
    trace = Trace(sparse)
    assert "equals full attention" in trace.meaning("select", None)
    assert "this is full attention" in trace.meaning("scale", 0)
    page = to_markdown(sparse, 3)
    assert "so it keeps every one" in page and "beyond top_k" not in page


def test_the_trace_says_which_keys_each_query_drops() -> None:
    trace = Trace(compute(load_scenario(BUILTIN)))
    assert "not full attention" in trace.meaning("select", None)
    assert trace.stage_keys[:3] == ["embed", "index", "select"]  # before any head projects
    page = to_markdown(trace.comp, 3)
    assert "selected[down,down] = 0: its index score 0.000 ranks 4 of the 4 keys down sees, beyond top_k = 2" in page
    assert "row sat: 7.000 (sat) ≥ 3.500 (cat) ≥ 1.500 (the); keeps the top 2: sat, cat" in page
    assert 'indexer: "the" ranks 3 of the 3 keys "sat" may see, below top_k = 2: not selected, so masked' in page
    assert "term₂[the,the] = w[the,1]·ReLU(q_I₂[the]·k_I[the]) = 0.500·ReLU(-3) = 0.500·0 = 0.000" in page


def test_ties_go_to_the_earlier_key() -> None:
    # index head 2 alone, its weight 0 for every query: every visible score is 0, so each row keeps its first keys
    tied = re.sub(r"(?ms)^W_w = \[.*?^\]", "W_w = [[0, 0], [0, 0], [0, 0], [0, 0]]", TEXT)
    comp = compute(parse_scenario(tied, "tied.toml"))
    selected = comp.heads[0].need(Selection).mask
    assert selected.tolist() == [[True, False, False, False], [True, True, False, False],
                                 [True, True, False, False], [True, True, False, False]]
    assert "equal scores go to the earlier key" in to_markdown(comp, 3)


@pytest.mark.parametrize("decimals", [1, 2, 3, 5, 8])
def test_every_line_checks_out_exactly(decimals: int) -> None:
    comp = compute(load_scenario(BUILTIN))
    assert_holds(check_text(to_markdown(comp, decimals)))
    assert_holds(check_text(explanation_text(View(Trace(comp)), decimals)))


@pytest.mark.parametrize("decimals", [1, 2, 3, 4])
def test_every_line_checks_out_by_hand(decimals: int) -> None:
    comp = compute_hand(compute(load_scenario(BUILTIN)), decimals)
    assert_holds(check_text(explanation_text(View(Trace(comp)), decimals), whole=False))


def test_the_relu_steps_the_calculator_skips_hold() -> None:
    """``w·ReLU(d) = w·r``: the checker cannot read ReLU, so here r = max(d, 0) is checked for every term line."""
    page = to_markdown(compute(load_scenario(BUILTIN)), 3)
    number = r"([-\d.()]+)"
    found = re.findall(rf"= {number}·ReLU\({number}\) = {number}·{number} = ", page)
    assert len(found) == 2 * 16
    for w, d, w_again, r in found:
        assert w == w_again and float(r.strip("()")) == max(float(d.strip("()")), 0.0)


def test_toml_write_back_round_trips(cli) -> None:
    run = cli(str(BUILTIN), "--export", "toml")
    assert run.code == 0, run.err
    assert "[indexer]" in run.out
    again = compute(parse_scenario(run.out, "again.toml"))
    first = compute(load_scenario(BUILTIN))
    np.testing.assert_array_equal(first.heads[0].need(Selection).indexed.scores,
                                  again.heads[0].need(Selection).indexed.scores)
    for a, b in zip(first.heads, again.heads, strict=True):
        np.testing.assert_array_equal(a.weights, b.weights)
        np.testing.assert_array_equal(a.output, b.output)


def test_export_json_carries_the_indexer_field(cli) -> None:
    run = cli(str(BUILTIN), "--export", "json")
    assert run.code == 0, run.err
    doc = json.loads(run.out)
    assert set(doc["indexer"]) == {"scores", "selected"}
    assert len(doc["indexer"]["scores"]) == 4 and all(len(row) == 4 for row in doc["indexer"]["selected"])
    # the head's own softmax input: null (−∞) where the indexer dropped a key the causal mask lets through
    assert doc["heads"][0]["masked"][2][0] is None and doc["mask"][2][0] is True


def test_check_names_it(cli) -> None:
    run = cli("--check", str(BUILTIN))
    assert run.code == 0 and "sparse attention (indexer: 2 index heads, d_I 2, top-2)" in run.out


def test_the_page_refuses_cache_and_tiles_in_a_line_each() -> None:
    page = to_markdown(compute(load_scenario(BUILTIN)), 3)
    assert "No tiles for sparse attention" in page and "No KV-cache replay for sparse attention" in page
    assert "K_cache" not in page


def test_worksheet_is_refused_in_one_line(cli, tmp_path) -> None:
    run = cli(str(BUILTIN), "--export", "worksheet", "-o", str(tmp_path / "sheet.md"))
    assert run.code == 2 and run.out == ""
    lines = run.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "[indexer]" in lines[0], run.err


@pytest.mark.parametrize("table", [
    "[backward]\ntarget = [[0, 0], [0, 0], [0, 0], [0, 0]]\n",
    "[linear]\nfeature = \"elu1\"\n",
])
def test_tables_it_cannot_combine_with_are_refused_in_one_line(cli, tmp_path, table: str) -> None:
    bad = tmp_path / "dsa_bad.toml"
    bad.write_text(TEXT + "\n" + table, encoding="utf-8")
    run = cli("--check", str(bad))
    assert run.code == 2 and run.out == ""
    lines = run.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "[indexer] cannot be used with" in lines[0], run.err


def test_the_quiz_asks_select_without_giving_the_rank_away() -> None:
    from qkv_tui.teach.quiz import questions

    trace = Trace(compute(load_scenario(BUILTIN)))
    index = next(i for i in range(len(trace)) if trace.op(i).arithmetic.startswith("selected[down,the]"))
    (asked,) = questions(trace, index, 3)
    assert asked.value == 0.0 and "ranks" not in asked.arithmetic
    assert asked.arithmetic == ("selected[down,the] = ? (1 kept, 0 not; down sees 4 keys, keeps its top_k = 2 by I,"
                                " ties to the earlier key)")
