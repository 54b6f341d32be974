"""[linear] and [deltanet] (docs/scenario-format.md): both forms of linear attention against each other and a
loop, the gated delta rule against transformers' own torch_recurrent_gated_delta_rule, their one-line errors,
exports and views."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from qkv_tui import compute, load_scenario
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.display.state_view import state_frame
from qkv_tui.edges.export_json import to_json
from qkv_tui.edges.export_markdown import to_markdown
from qkv_tui.edges.export_toml import to_toml
from qkv_tui.kernels.deltanet import DeltaForward, decay_mask, deltanet_forward, gates
from qkv_tui.kernels.linear import LinearForward, LinearSpec, linear_forward
from qkv_tui.teach.handcalc import compute_hand
from qkv_tui.teach.trace import Trace

from .conftest import BASE, HEAD

CAUSAL = 'mask = "causal"\n'
RNG = np.random.default_rng(20)


def loop_linear(Q, K, V, feature, normalize):
    """Katharopoulos et al.'s eq. 4–6 written as plain loops."""
    def phi(x):
        return {"elu1": x + 1 if x > 0 else math.exp(x), "relu": max(x, 0.0), "identity": x}[feature]

    n, d_k = Q.shape
    out = np.zeros((n, V.shape[1]))
    for i in range(n):
        num = np.zeros(V.shape[1])
        den = 0.0
        for j in range(i + 1):
            w = sum(phi(Q[i, c]) * phi(K[j, c]) for c in range(d_k))
            num += w * V[j]
            den += w
        out[i] = num / den if normalize else num
    return out


@pytest.mark.parametrize("feature,normalize", [("elu1", True), ("elu1", False), ("relu", True), ("relu", False),
                                               ("identity", False)])
def test_both_forms_agree_with_a_loop(feature: str, normalize: bool) -> None:
    n, d_k, d_v = 7, 3, 2
    Q, K, V = RNG.normal(size=(n, d_k)), RNG.normal(size=(n, d_k)), RNG.normal(size=(n, d_v))
    if feature == "relu":  # every row keeps a positive product, or its denominator is 0
        Q, K = np.abs(Q) + 0.1, np.abs(K) + 0.1
    f = linear_forward(Q, K, V, np.tril(np.ones((n, n), dtype=bool)), LinearSpec(feature, normalize))
    ref = loop_linear(Q, K, V, feature, normalize)
    assert np.allclose(f.output, ref, rtol=1e-12, atol=1e-12)
    assert np.allclose(f.recurrent, ref, rtol=1e-12, atol=1e-12)
    # S_t is every past φ(k)vᵀ summed, z_t every past φ(k)
    assert np.allclose(f.S[-1], f.phi_K.T @ V)
    assert np.allclose(f.z[-1], f.phi_K.sum(axis=0))


def test_the_built_in_scenario_agrees_by_hand_too() -> None:
    comp = compute(load_scenario("linear"))
    lin = comp.heads[0].part(LinearForward)
    assert lin is not None and np.allclose(lin.recurrent, lin.output, rtol=1e-14)
    assert np.array_equal(comp.output, lin.output)  # Concat joins the quadratic form's output
    hand = compute_hand(comp, 3).heads[0].part(LinearForward)
    assert hand is not None
    assert np.abs(hand.recurrent - lin.output).max() < 0.01 and np.abs(hand.output - lin.output).max() < 0.01


def _torch_reference(Q, K, V, g, beta):
    torch = pytest.importorskip("torch")
    from transformers.models.qwen3_next.modeling_qwen3_next import torch_recurrent_gated_delta_rule

    def t(a):
        return torch.tensor(a, dtype=torch.float64)[None, :, None]

    out, S = torch_recurrent_gated_delta_rule(t(Q), t(K), t(V), torch.tensor(g)[None, :, None],
                                              torch.tensor(beta)[None, :, None], output_final_state=True,
                                              use_qk_l2norm_in_kernel=True)
    return out[0, :, 0].double().numpy(), S[0, 0].double().numpy()


def test_the_gated_delta_rule_is_transformers_own() -> None:
    n, d_k, d_v = 6, 4, 3
    Q, K, V = RNG.normal(size=(n, d_k)), RNG.normal(size=(n, d_k)), RNG.normal(size=(n, d_v))
    g, beta = -RNG.uniform(0, 2, n), RNG.uniform(0, 1, n)
    f = deltanet_forward(Q, K, V, g, beta)
    out, S = _torch_reference(Q, K, V, g, beta)
    # transformers' reference computes in float32 whatever it is given
    assert np.allclose(f.output, out, atol=2e-6) and np.allclose(f.S[-1], S, atol=2e-6)
    # and the state is attention over the corrections with a decaying causal mask
    assert np.allclose(((f.q @ f.k.T) * decay_mask(g)) @ f.delta, f.output, atol=1e-13)


def test_the_gates_are_qwen3_nexts() -> None:
    torch = pytest.importorskip("torch")
    X, W_a, W_b = RNG.normal(size=(5, 4)), RNG.normal(size=(4, 2)), RNG.normal(size=(4, 2))
    A_log, dt_bias = RNG.normal(size=2), RNG.normal(size=2)
    g, beta = gates(X, W_a, W_b, A_log, dt_bias)
    a, b = torch.tensor(X @ W_a), torch.tensor(X @ W_b)
    want_g = -torch.tensor(A_log).exp() * torch.nn.functional.softplus(a + torch.tensor(dt_bias))
    assert np.allclose(g, want_g.numpy(), rtol=1e-12) and np.allclose(beta, b.sigmoid().numpy(), rtol=1e-12)


def test_the_built_in_deltanet_scenario_is_the_reference() -> None:
    comp = compute(load_scenario("deltanet"))
    hr = comp.heads[0]
    dn = hr.part(DeltaForward)
    assert dn is not None
    g = np.array([-0.5, -0.5, -0.5])
    out, _ = _torch_reference(hr.Q, hr.K, hr.V, g, np.array([1.0, 0.5, 0.5]))
    assert np.allclose(dn.output, out, atol=2e-6) and np.array_equal(comp.output, dn.output)


WEIGHTS = '''
[deltanet]
W_a = [[0.5], [0], [-0.5], [1]]
W_b = [[1], [0], [0], [-1]]
A_log = [0.2]
dt_bias = [1.0]
'''


def test_computed_gates_run_every_stage_and_export() -> None:
    comp = compute(parse_scenario(BASE + CAUSAL + HEAD + WEIGHTS, "w.toml"))
    trace = Trace(comp)
    assert trace.stage_keys == ["embed", "project", "l2norm", "gates", "delta"]
    doc = json.loads(to_json(comp))
    head = doc["deltanet"]["heads"][0]
    assert len(head["S"]) == 3 and len(head["S"][0]) == 3 and len(head["S"][0][0]) == 3
    assert all(x <= 0 for x in head["g"]) and all(0 < b < 1 for b in head["beta"])
    assert doc["linear"] is None
    again = compute(parse_scenario(to_toml(comp.scenario), "again.toml"))
    assert np.array_equal(again.output, comp.output)


def test_json_fields_are_null_without_them() -> None:
    doc = json.loads(to_json(compute(load_scenario("i_love_ai"))))
    assert list(doc)[-6:-4] == ["linear", "deltanet"] and doc["linear"] is None and doc["deltanet"] is None


def test_linear_json_and_toml_round_trip() -> None:
    comp = compute(load_scenario("linear"))
    doc = json.loads(to_json(comp))
    head = doc["linear"]["heads"][0]
    assert set(head) == {"phi_Q", "phi_K", "S", "z", "output"}
    assert np.allclose(np.array(head["S"]), comp.heads[0].part(LinearForward).S)
    again = compute(parse_scenario(to_toml(comp.scenario), "again.toml"))
    assert np.array_equal(again.output, comp.output)


@pytest.mark.parametrize("name", ["linear", "deltanet"])
def test_every_state_cell_is_a_step(name: str) -> None:
    comp = compute(load_scenario(name))
    trace = Trace(comp)
    hr = comp.heads[0]
    state = trace.segment_for("lin_S" if name == "linear" else "dn_step", 0)
    assert state is not None
    per_token = hr.d_k * hr.d_v if name == "linear" else 2 * hr.d_k * hr.d_v + 3 * hr.d_v
    assert state.count == comp.scenario.n * per_token
    last = trace.op(state.stop - 1)
    texts = [trace.op(i).arithmetic for i in range(state.start, state.stop)]
    assert all(" = " in t for t in texts)
    if name == "deltanet":
        assert any("decaying causal mask" in d for d in last.details)
    else:
        rec = trace.segment_for("lin_o", 0)
        assert rec is not None
        details = trace.op(rec.stop - 1).details
        assert any(d.startswith("✓") for d in details) and any(d.startswith("memory while decoding:") for d in details)


@pytest.mark.parametrize("name", ["linear", "deltanet"])
def test_the_decode_view_carries_the_state(name: str) -> None:
    comp = compute(load_scenario(name))
    frame = state_frame(comp, 2, 0, 3)
    assert frame.explanation.stage_label == "state step 3/3"
    assert "carried: the state" in frame.explanation.details[-1]
    assert any(line.startswith("✓") for line in frame.explanation.details)
    page = to_markdown(comp)
    assert "## Decoding with a state" in page and "## KV cache" not in page


def test_a_zero_denominator_names_its_row(write, cli) -> None:
    text = BASE + CAUSAL + '''
[[heads]]
W_Q = [[1, 0], [0, 1], [1, 0], [0, 1]]
W_K = [[-1, 0], [0, -1], [-1, 0], [0, -1]]
W_V = [[1, 0], [0, 1], [1, 1], [0, 0]]
[linear]
feature = "relu"
'''
    run = cli("--check", str(write(text)))
    assert run.code == 2 and run.err.count("\n") == 1
    assert 'head 1: [linear]\'s denominator φ(q)ᵀz is 0 at row 1 ("I")' in run.err


ERRORS = {
    "no_causal": (BASE + HEAD + "[linear]\n", '[linear] needs mask = "causal"'),
    "identity_normalize": (BASE + CAUSAL + HEAD + '[linear]\nfeature = "identity"\n',
                           '[linear] feature = "identity" needs normalize = false'),
    "feature": (BASE + CAUSAL + HEAD + '[linear]\nfeature = "elu"\n',
                "[linear] feature = 'elu' is not allowed; expected one of: 'elu1', 'relu', 'identity'; did you mean 'elu1'?"),
    "normalize_string": (BASE + CAUSAL + HEAD + '[linear]\nnormalize = "yes"\n',
                         "[linear] normalize must be true or false, got a string"),
    "gqa": (BASE + CAUSAL + '''
[attention]
num_heads = 2
num_kv_heads = 1
W_Q = [[1, 0, 1, 0], [0, 1, 0, 0], [1, 0, 0, 1], [0, 1, 1, 0]]
W_K = [[0, 1], [1, 0], [0, 1], [1, 1]]
W_V = [[1], [0], [0], [1]]
[linear]
''', "[linear] does not share K/V heads (each head keeps its own state), but [attention] has num_kv_heads = 1"),
    "sink": (BASE + CAUSAL + HEAD + "sink = 1.0\n[linear]\n", "[linear] replaces the softmax, which a sink's logit"
             " belongs to, but head 1 has sink"),
    "unknown": (BASE + CAUSAL + HEAD + "[linear]\nfeatures = \"relu\"\n",
                "unknown key 'features' in [linear]; did you mean 'feature'?"),
    "deltanet_no_causal": (BASE + HEAD + "[deltanet]\ng = [[-1], [-1], [-1]]\nbeta = [[1], [1], [1]]\n",
                           '[deltanet] needs mask = "causal"'),
    "deltanet_g_rows": (BASE + CAUSAL + HEAD + "[deltanet]\ng = [[-1], [-1]]\nbeta = [[1], [1], [1]]\n",
                        "[deltanet] g has 2 rows; expected 3, one per token"),
    "deltanet_g_positive": (BASE + CAUSAL + HEAD + "[deltanet]\ng = [[-1], [0.5], [-1]]\nbeta = [[1], [1], [1]]\n",
                            "[deltanet] g row 2, column 1 is 0.5; expected g <= 0"),
    "deltanet_no_g": (BASE + CAUSAL + HEAD + "[deltanet]\nbeta = [[1], [1], [1]]\n",
                      "[deltanet] is missing 'W_a'; expected g = [[...]] (n × num_heads)"),
    "deltanet_no_beta": (BASE + CAUSAL + HEAD + "[deltanet]\ng = [[-1], [-1], [-1]]\n", "[deltanet] is missing 'beta'"),
    "deltanet_both": (BASE + CAUSAL + HEAD + "[deltanet]\ng = [[-1], [-1], [-1]]\nA_log = [0]\nbeta = [[1], [1], [1]]\n",
                      "[deltanet] has both g and A_log"),
    "deltanet_w_a_rows": (BASE + CAUSAL + HEAD
                          + "[deltanet]\nW_a = [[1]]\nA_log = [0]\ndt_bias = [0]\nW_b = [[1], [1], [1], [1]]\n",
                          "[deltanet] W_a has 1 rows; expected d_model = 4"),
    "both_tables": (BASE + CAUSAL + HEAD + "[linear]\n[deltanet]\ng = [[-1], [-1], [-1]]\nbeta = [[1], [1], [1]]\n",
                    "[deltanet] and [linear] both replace every head's softmax"),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_one_clean_line(case: str, cli, write) -> None:
    text, expected = ERRORS[case]
    path = write(text)
    run = cli("--check", str(path))
    assert run.code == 2, run.out
    lines = run.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: ") and expected in lines[0], run.err


@pytest.mark.parametrize("source", ["linear", "deltanet", BASE + CAUSAL + HEAD + WEIGHTS,
                                    BASE + CAUSAL + HEAD + '[linear]\nfeature = "relu"\nnormalize = false\n'],
                         ids=["linear", "deltanet", "deltanet_weights", "relu_unnormalised"])
def test_worksheets_answer_keys_check_out(source: str) -> None:
    from qkv_tui.edges.worksheet.make import build

    from .test_calculator import assert_holds, check_text

    comp = compute(load_scenario(source) if "\n" not in source else parse_scenario(source, "w.toml"))
    page = build(comp, "100%", 0, 3).markdown()
    assert_holds(check_text(page[page.index("## Answer key"):], whole=False))
    assert "Softmax, row by row" not in page and "divide every score" not in page


@pytest.mark.parametrize("name", ["linear", "deltanet"])
def test_an_edit_recomputes_the_state(name: str) -> None:
    from qkv_tui.core.cell_edit import InputCell, edit

    sc = load_scenario(name)
    edited, comp = edit(sc, InputCell("X", None, 1, 0), "2")
    assert edited.X[1, 0] == 2 and (edited.linear is not None or edited.deltanet is not None)
    lin = comp.heads[0].part(LinearForward)
    S = lin.S if lin is not None else comp.heads[0].need(DeltaForward).S
    assert S.shape[0] == 3 and not np.array_equal(comp.output, compute(sc).output)
