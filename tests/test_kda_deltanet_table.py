"""[deltanet] with a gate per key channel (Kimi Delta Attention, contracts §15) through the one driver: the built-in
scenarios/kda.toml and a two-head scenario with g given, against a NumPy recurrence written here from the contract
(S ← diag(e^{g_t})·S; kv = Sᵀk; δ = (v − kv)·β; S ← S + kδᵀ; o = Sᵀq); equal channels give the gated delta rule's
outputs and the trace says so; JSON's g is n × d_k; TOML round trips; every arithmetic line on the calculator
(exact and by hand); [backward] and the worksheet refused in one line."""

from __future__ import annotations

import json
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

BUILTIN = Path(__file__).resolve().parents[1] / "scenarios" / "kda.toml"

GIVEN = """\
tokens = ["a", "b", "c", "d"]
X = [[1, 0, 1], [0, 1, 1], [1, 1, 0], [0.5, -1, 2]]
mask = "causal"

[[heads]]
W_Q = [[1, 0], [0, 1], [1, 1]]
W_K = [[1, 0.5], [0, 1], [-1, 1]]
W_V = [[1, 0, 2], [0, 1, 0], [1, 1, 1]]

[[heads]]
W_Q = [[0, 1], [1, 0], [0.5, 1]]
W_K = [[1, 0], [1, 1], [0, 1]]
W_V = [[0, 1, 1], [1, 0, 1], [0, 0, 1]]

[deltanet]
g = [[[-0.1, -1.5], [-0.7, -0.7]], [[-0.05, -2], [-0.3, -0.3]], [[0, -1], [-1, -1]], [[-0.2, -0.4], [-0.5, -0.5]]]
beta = [[1, 0.5], [0.5, 0.25], [0.75, 1], [0.2, 0.9]]
"""


def _l2(x: np.ndarray) -> np.ndarray:
    return x / np.sqrt((x * x).sum(axis=1, keepdims=True) + 1e-6)


def _recurrence(Q: np.ndarray, K: np.ndarray, V: np.ndarray, g: np.ndarray, beta: np.ndarray) -> tuple[np.ndarray, ...]:
    """One head, contracts §12/§15 in plain NumPy: returns (outputs n × d_v, states n × d_k × d_v)."""
    q, k = _l2(Q) / np.sqrt(Q.shape[1]), _l2(K)
    S = np.zeros((K.shape[1], V.shape[1]))
    outs, states = [], []
    for t in range(len(Q)):
        S = np.diag(np.exp(g[t])) @ S
        delta = (V[t] - S.T @ k[t]) * beta[t]
        S = S + np.outer(k[t], delta)
        states.append(S.copy())
        outs.append(S.T @ q[t])
    return np.array(outs), np.array(states)


def _softplus(a: np.ndarray) -> np.ndarray:
    return np.where(a > 20, a, np.log1p(np.exp(a)))


def _builtin_reference() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """kda.toml from its own numbers: g = −e^A_log·softplus((X·W_fa)·W_fb + dt_bias), then the recurrence."""
    doc = tomllib.loads(BUILTIN.read_text())
    X = np.array(doc["X"], dtype=float)
    dn = doc["deltanet"]
    head = doc["heads"][0]
    a = X @ np.array(dn["W_fa"], dtype=float) @ np.array(dn["W_fb"], dtype=float) + np.array(dn["dt_bias"][0])
    g = -np.exp(dn["A_log"][0]) * _softplus(a)  # (n, d_k)
    beta = np.array(dn["beta"], dtype=float)[:, 0]
    out, S = _recurrence(*(X @ np.array(head[w], dtype=float) for w in ("W_Q", "W_K", "W_V")), g, beta)
    return g, out, S


def test_builtin_matches_an_independent_recurrence() -> None:
    g, out, S = _builtin_reference()
    doc = json.loads(to_json(compute(load_scenario(BUILTIN))))
    head = doc["deltanet"]["heads"][0]
    np.testing.assert_allclose(np.array(head["g"]), g, atol=1e-12)
    np.testing.assert_allclose(np.array(head["S"]), S, atol=1e-12)
    np.testing.assert_allclose(np.array(head["output"]), out, atol=1e-12)
    np.testing.assert_allclose(np.array(doc["heads"][0]["output"]), out, atol=1e-12)
    # what the description promises: channel 0 keeps I's value, channel 1 forgets it before love overwrites it
    assert np.exp(g[:, 0]).min() > 0.95 and np.exp(g[:, 1]).max() < 0.12
    assert np.array(head["S"])[1][0][0] == pytest.approx(0.707107 * np.exp(g[1, 0]), abs=1e-6)


def test_given_gates_two_heads_match_the_recurrence_and_the_weights_unroll_it() -> None:
    sc = parse_scenario(GIVEN, "given.toml")
    doc = json.loads(to_json(compute(sc)))
    raw = tomllib.loads(GIVEN)
    X = np.array(raw["X"], dtype=float)
    g_all, beta_all = np.array(raw["deltanet"]["g"]), np.array(raw["deltanet"]["beta"])
    for h, head in enumerate(raw["heads"]):
        Q, K, V = (X @ np.array(head[w], dtype=float) for w in ("W_Q", "W_K", "W_V"))
        out, S = _recurrence(Q, K, V, g_all[:, h], beta_all[:, h])
        got = doc["deltanet"]["heads"][h]
        assert np.array(got["g"]).shape == (4, 2)  # contracts §15: n × d_k
        np.testing.assert_allclose(np.array(got["S"]), S, atol=1e-12)
        np.testing.assert_allclose(np.array(got["output"]), out, atol=1e-12)
        # the heads' weights A[t, s] = Σ_i q_t[i]·e^(G_t[i] − G_s[i])·k_s[i] times the corrections give the outputs
        q, k = np.array(got["q"]), np.array(got["k"])
        delta = np.array([(V[t] - (np.diag(np.exp(g_all[t, h])) @ (S[t - 1] if t else 0 * S[0])).T @ k[t])
                          * beta_all[t, h] for t in range(4)])
        np.testing.assert_allclose(np.array(doc["heads"][h]["weights"]) @ delta, out, atol=1e-12)
        G = np.cumsum(g_all[:, h], axis=0)
        want = np.array([[sum(q[t, i] * k[s, i] * np.exp(G[t, i] - G[s, i]) for i in range(2)) if s <= t else 0.0
                          for s in range(4)] for t in range(4)])
        np.testing.assert_allclose(np.array(doc["heads"][h]["weights"]), want, atol=1e-12)


def _equal_channels(g_heads: list[float]) -> str:
    rows = ", ".join("[" + ", ".join(f"[{g}, {g}]" for g in g_heads) + "]" for _ in range(4))
    return GIVEN.replace(GIVEN.split("\n")[-3], f"g = [{rows}]")


def test_equal_channels_give_the_gated_delta_rule_and_the_trace_says_so() -> None:
    per_channel = parse_scenario(_equal_channels([-0.4, -1.2]), "kda_equal.toml")
    one_gate = parse_scenario(GIVEN.replace(GIVEN.split("\n")[-3], "g = " + str([[-0.4, -1.2]] * 4)), "gdn.toml")
    a, b = compute(per_channel), compute(one_gate)
    for ha, hb in zip(a.heads, b.heads):
        np.testing.assert_array_equal(ha.output, hb.output)
    np.testing.assert_array_equal(a.output, b.output)
    view = View(Trace(a))
    text = explanation_text(view, 3) + to_markdown(a, 3)
    assert "this is Gated DeltaNet's rule (one gate a head)" in text
    assert "every channel's mask is the same here" in text
    differ = to_markdown(compute(parse_scenario(GIVEN, "given.toml")), 3)
    assert "Gated DeltaNet is the case where every channel's g is equal; here they differ" in differ


@pytest.mark.parametrize("decimals", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("source", ["builtin", "given"])
def test_every_line_checks_out_exactly(source: str, decimals: int) -> None:
    comp = compute(load_scenario(BUILTIN) if source == "builtin" else parse_scenario(GIVEN, "given.toml"))
    page = to_markdown(comp, decimals)
    assert "e^g[love,1]" in page or "e^g[b,1]" in page  # the decay carries the channel's index
    assert_holds(check_text(page))
    assert_holds(check_text(explanation_text(View(Trace(comp)), decimals)))


@pytest.mark.parametrize("decimals", [1, 2, 3, 4])
@pytest.mark.parametrize("source", ["builtin", "given"])
def test_every_line_checks_out_by_hand(source: str, decimals: int) -> None:
    comp = compute(load_scenario(BUILTIN) if source == "builtin" else parse_scenario(GIVEN, "given.toml"))
    assert_holds(check_text(explanation_text(View(Trace(compute_hand(comp, decimals))), decimals), whole=False))


@pytest.mark.parametrize("source", ["builtin", "given"])
def test_toml_write_back_round_trips(cli, tmp_path, source: str) -> None:
    path = BUILTIN
    if source == "given":
        path = tmp_path / "given.toml"
        path.write_text(GIVEN)
    run = cli(str(path), "--export", "toml")
    assert run.code == 0, run.err
    again = compute(parse_scenario(run.out, "again.toml"))
    first = compute(load_scenario(path))
    for a, b in zip(first.heads, again.heads):
        np.testing.assert_array_equal(a.output, b.output)
        np.testing.assert_array_equal(a.weights, b.weights)
    np.testing.assert_array_equal(first.output, again.output)


def test_check_names_it(cli) -> None:
    run = cli("--check", str(BUILTIN))
    assert run.code == 0 and "g per key channel from W_fa, W_fb, A_log and dt_bias (Kimi Delta Attention)" in run.out


def _one_error(run) -> str:
    assert run.code == 2 and run.out == ""
    lines = run.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), run.err
    return lines[0]


def test_backward_is_refused_in_one_line(cli, tmp_path) -> None:
    bad = tmp_path / "kda_backward.toml"
    bad.write_text(BUILTIN.read_text() + "\n[backward]\ntarget = [[1, 0], [0, 1], [1, 1]]\n")
    assert "a gate per key channel" in _one_error(cli("--check", str(bad)))


def test_the_worksheet_is_refused_in_one_line(cli) -> None:
    assert "a gate per key channel" in _one_error(cli(str(BUILTIN), "--export", "worksheet"))


def test_w_a_beside_a_channel_gate_is_one_line(cli, tmp_path) -> None:
    bad = tmp_path / "both.toml"
    bad.write_text(BUILTIN.read_text().replace("A_log = [0]", "A_log = [0]\nW_a = [[0], [0], [0], [0]]"))
    assert "W_a" in _one_error(cli("--check", str(bad)))


def test_the_state_view_decays_row_by_row() -> None:
    page = to_markdown(compute(load_scenario(BUILTIN)), 3)
    assert "S'[1] = S_prev[1]·e^g[1] = [0.707, 0.000]·0.119 = [0.084, 0.000]" in page
    assert "✓ the decaying-mask form Σ_s (Σ_i q[i]·e^(G_t[i] − G_s[i])·k_s[i])·δ_s gives the same row" in page


IO = """conv_q = [[0.5, -0.25], [1, 0.5]]
conv_k = [[0.25, 0.5], [1, -1]]
conv_v = [[-0.5, 0.5], [1, 1]]
"""


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1 + np.exp(-x))


@pytest.mark.parametrize("decimals", [2, 3])
def test_channel_gates_with_the_short_convolution(decimals: int) -> None:
    # the rule reads the convolved q, k, v as [deltanet]'s convolution gives them, channel gates or not
    comp = compute(parse_scenario(BUILTIN.read_text() + IO, "io.toml"))
    doc = tomllib.loads(BUILTIN.read_text() + IO)
    X = np.array(doc["X"], dtype=float)
    conv = []
    for w, key in (("W_Q", "conv_q"), ("W_K", "conv_k"), ("W_V", "conv_v")):
        P, taps = X @ np.array(doc["heads"][0][w], dtype=float), np.array(doc["deltanet"][key], dtype=float)
        mixed = np.array([taps[1] * P[t] + (taps[0] * P[t - 1] if t else 0) for t in range(len(P))])
        conv.append(_silu(mixed))
    g, _, _ = _builtin_reference()
    out, _ = _recurrence(*conv, g, np.ones(3))
    np.testing.assert_allclose(comp.heads[0].output, out, atol=1e-12)
    assert_holds(check_text(to_markdown(comp, decimals)))
    assert_holds(check_text(explanation_text(View(Trace(comp)), decimals)))
    assert_holds(check_text(explanation_text(View(Trace(compute_hand(comp, decimals))), decimals), whole=False))
