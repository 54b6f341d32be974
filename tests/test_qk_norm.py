"""[qk_norm]: RMSNorm of each query and key vector, per head or over every head's columns, against an
independent loop, PyTorch's own rms_norm, the hand computation, the exports and the editor."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv_tui import compute, load_scenario
from qkv_tui.core.cell_edit import InputCell, apply_edit, input_cells, save_text
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.edges.export_json import to_json
from qkv_tui.edges.export_toml import to_toml
from qkv_tui.kernels.qk_norm import QKNormed
from qkv_tui.kernels.rope import Rotated
from qkv_tui.teach.handcalc import compute_hand, round_to
from qkv_tui.teach.stages import REGISTRY
from qkv_tui.teach.trace import Trace

from .conftest import BASE, HEAD, ROOT

SPLIT = '''
[attention]
num_heads = 2
num_kv_heads = 1
W_Q = [[1, 0, 0, 1], [0, 1, 1, 0], [1, 0, 1, 1], [0, 2, 0, 0]]
W_K = [[0, 1], [1, 0], [0, 1], [1, 1]]
W_V = [[1, 0], [0, 1], [0, 0], [1, 1]]
'''


def rms_rows(M: np.ndarray, gamma: np.ndarray, eps: float) -> np.ndarray:
    """RMSNorm written out apart from the package: each row over its own length."""
    out = np.empty_like(M)
    for i, row in enumerate(M):
        root = math.sqrt(sum(x * x for x in row) / len(row) + eps)
        out[i] = [x / root * g for x, g in zip(row, gamma)]
    return out


def loop_attention(Q: np.ndarray, K: np.ndarray, V: np.ndarray, scale: float) -> np.ndarray:
    out = np.zeros((Q.shape[0], V.shape[1]))
    for i in range(Q.shape[0]):
        s = [sum(Q[i, c] * K[j, c] for c in range(Q.shape[1])) / scale for j in range(K.shape[0])]
        top = max(s)
        e = [math.exp(v - top) for v in s]
        for j in range(K.shape[0]):
            out[i] += e[j] / sum(e) * V[j]
    return out


def test_per_head_is_rms_norm_of_each_vector_and_torch_agrees() -> None:
    torch = pytest.importorskip("torch")
    sc = load_scenario("qk_norm")
    comp = compute(sc)
    qk = sc.qk_norm
    assert qk is not None and qk.over == "head"
    for h, hr in enumerate(comp.heads):
        Q, K = sc.X @ sc.heads[h].W_Q, sc.X @ sc.heads[h].W_K
        assert np.allclose(hr.need(QKNormed).Q_norm, rms_rows(Q, qk.gamma_q, qk.eps), rtol=1e-13, atol=0)
        assert np.allclose(hr.need(QKNormed).K_norm, rms_rows(K, qk.gamma_k, qk.eps), rtol=1e-13, atol=0)
        theirs = torch.nn.functional.rms_norm(torch.from_numpy(Q), (hr.d_k,), torch.from_numpy(np.array(qk.gamma_q)),
                                              qk.eps).numpy()
        assert np.allclose(hr.need(QKNormed).Q_norm, theirs, rtol=1e-13, atol=1e-15)
        expected = loop_attention(hr.need(QKNormed).Q_norm, hr.need(QKNormed).K_norm, hr.V, math.sqrt(hr.d_k))
        assert np.allclose(hr.output, expected, rtol=1e-12, atol=1e-14)
    # the seed-sized numbers the description promises
    first = comp.heads[0]
    assert np.allclose(first.scores[0], [0, 2, math.sqrt(2)], atol=2e-6)
    assert round(float(first.weights[0, 1]), 3) == 0.525
    assert np.all(np.abs(first.scores) <= first.d_k + 1e-9)  # |q̂·k̂| ≤ dₖ with γ = 1


def test_over_all_heads_normalises_the_whole_projection_like_olmo2() -> None:
    torch = pytest.importorskip("torch")
    sc = load_scenario("qk_norm_all")
    comp = compute(sc)
    qk = sc.qk_norm
    assert qk is not None and qk.over == "all"
    Q_all = np.concatenate([sc.X @ h.W_Q for h in sc.heads], axis=1)  # (n, H·d_k)
    K_all = np.concatenate([sc.X @ h.W_K for h in sc.heads], axis=1)
    q_hat = torch.nn.functional.rms_norm(torch.from_numpy(Q_all), (Q_all.shape[1],),
                                         torch.from_numpy(np.array(qk.gamma_q)), qk.eps).numpy()
    k_hat = rms_rows(K_all, qk.gamma_k, qk.eps)
    for h, hr in enumerate(comp.heads):
        cut = slice(h * hr.d_k, (h + 1) * hr.d_k)
        assert np.allclose(hr.need(QKNormed).Q_norm, q_hat[:, cut], rtol=1e-13, atol=1e-15)
        assert np.allclose(hr.need(QKNormed).K_norm, k_hat[:, cut], rtol=1e-13, atol=1e-15)
    assert np.allclose(comp.heads[0].need(QKNormed).Q_norm[0], [2 / math.sqrt(1.25 + 1e-6), 0], rtol=1e-12)
    assert np.allclose(comp.heads[1].need(QKNormed).Q_norm[0], [0, 1 / math.sqrt(1.25 + 1e-6)], rtol=1e-12)
    per_head = compute(load_scenario("qk_norm"))
    # the two placements differ
    assert not np.allclose(per_head.heads[1].need(QKNormed).Q_norm, comp.heads[1].need(QKNormed).Q_norm)


def test_with_rope_grouped_kv_heads_and_a_pre_norm() -> None:
    """X̂ first, then Q and K, normalised over every head (K over the one K/V head), then turned."""
    text = BASE + '[norm]\nkind = "rms"\n[rope]\nlayout = "half"\n[qk_norm]\nover = "all"\ngamma_q = [1, 2, 0.5, 1]\n' + SPLIT
    sc = parse_scenario(text, "qk.toml")
    comp = compute(sc)
    X_hat = rms_rows(sc.X, np.ones(4), 1e-5)
    qk = sc.qk_norm
    assert qk is not None
    q_hat = rms_rows(np.concatenate([X_hat @ h.W_Q for h in sc.heads], axis=1), qk.gamma_q, qk.eps)
    k_hat = rms_rows(X_hat @ sc.heads[0].W_K, qk.gamma_k, qk.eps)
    for h, hr in enumerate(comp.heads):
        assert np.allclose(hr.need(QKNormed).Q_norm, q_hat[:, 2 * h:2 * h + 2], rtol=1e-12)
        assert np.allclose(hr.need(QKNormed).K_norm, k_hat, rtol=1e-12)
        # RoPE turns the normalised vectors: half layout, one pair (0, 1), angle = position
        for i, p in enumerate(range(sc.n)):
            c, s = math.cos(p), math.sin(p)
            a, b = hr.need(QKNormed).Q_norm[i]
            assert np.allclose(hr.need(Rotated).Q_rot[i], [a * c - b * s, a * s + b * c], rtol=1e-12, atol=1e-15)
    assert comp.heads[1].need(QKNormed).K_norm is comp.heads[0].need(QKNormed).K_norm  # one K/V head: normalised once


@st.composite
def qk_cases(draw: st.DrawFn) -> str:
    n, d_model, heads, d_k = draw(st.integers(1, 4)), draw(st.integers(1, 4)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
    small = st.integers(-3, 3)

    def matrix(rows: int, cols: int) -> str:
        return json.dumps([[draw(small) for _ in range(cols)] for _ in range(rows)])

    over = draw(st.sampled_from(["head", "all"]))
    width = d_k if over == "head" else heads * d_k
    gains = json.dumps([draw(st.sampled_from([0.5, 1, 2, -1])) for _ in range(width)])
    return (f'tokens = {json.dumps([f"t{i}" for i in range(n)])}\nX = {matrix(n, d_model)}\n'
            f"[attention]\nnum_heads = {heads}\nW_Q = {matrix(d_model, heads * d_k)}\nW_K = {matrix(d_model, heads * d_k)}\n"
            f"W_V = {matrix(d_model, heads * 2)}\n[qk_norm]\nover = \"{over}\"\ngamma_q = {gains}\ngamma_k = {gains}\n")


@settings(max_examples=40, deadline=None)
@given(qk_cases())
def test_generated_scenarios_agree_with_the_loop(text: str) -> None:
    sc = parse_scenario(text, "generated.toml")
    comp = compute(sc)
    qk = sc.qk_norm
    assert qk is not None
    d_k = sc.heads[0].d_k
    Q_all = np.concatenate([sc.X @ h.W_Q for h in sc.heads], axis=1)
    K_all = np.concatenate([sc.X @ h.W_K for h in sc.heads], axis=1)
    for h, hr in enumerate(comp.heads):
        cut = slice(h * d_k, (h + 1) * d_k)
        if qk.over == "head":
            q_hat, k_hat = rms_rows(Q_all[:, cut], qk.gamma_q, qk.eps), rms_rows(K_all[:, cut], qk.gamma_k, qk.eps)
        else:
            q_hat, k_hat = rms_rows(Q_all, qk.gamma_q, qk.eps)[:, cut], rms_rows(K_all, qk.gamma_k, qk.eps)[:, cut]
        assert np.allclose(hr.need(QKNormed).Q_norm, q_hat, rtol=1e-12, atol=1e-12)
        assert np.allclose(hr.need(QKNormed).K_norm, k_hat, rtol=1e-12, atol=1e-12)
        assert np.allclose(hr.output, loop_attention(q_hat, k_hat, hr.V, math.sqrt(d_k)), rtol=1e-9, atol=1e-9)
        assert np.allclose(hr.weights.sum(axis=1), 1.0)
    # the trace has a QK-norm operation for each cell of Q̂, and of each K̂ once
    trace = Trace(comp)
    ops = [trace.op(i) for i in range(len(trace))]
    qk_ops = [op for op in ops if op.stage.key == "qk_norm"]
    assert len(qk_ops) == len(comp.heads) * sc.n * d_k * 2
    assert all(op.value == float(getattr(comp.heads[op.head].need(QKNormed), op.segment.target)[op.row, op.col]) for op in qk_ops)


def test_the_stage_sits_between_project_and_rotate() -> None:
    keys = [s.stage.key for s in REGISTRY]
    between = keys[keys.index("project") + 1:keys.index("qk_norm")]
    assert set(between) <= {"compress", "expand", "mla_rotate", "reuse"}  # [mla]'s, which refuses [qk_norm]; [shared_kv]'s
    assert keys.index("qk_norm") == keys.index("rotate") - 1
    trace = Trace(compute(load_scenario("qk_norm")))
    op = next(trace.op(i) for i in range(len(trace)) if trace.op(i).stage.key == "qk_norm")
    assert op.arithmetic == "Q̂[I,0] = Q[I,0] / √(ms + eps)·γ_q[0] = 2 / √(2.000 + 1e-06)·1 = 1.414"
    assert op.details == ("ms(Q[I]) = mean of squares = (2·2 + 0·0) / 2 = 2.000", "√(2.000 + 1e-06) = 1.414")
    assert "Gemma 3" in trace.meaning("qk_norm", 0) and "each head's dₖ columns on their own" in trace.meaning("qk_norm", 0)
    score = next(trace.op(i) for i in range(len(trace)) if trace.op(i).stage.key == "score")
    assert score.arithmetic.startswith("scores[I,I] = Q̂[I]·K̂[I] = ")
    everyone = Trace(compute(load_scenario("qk_norm_all")))
    first = next(everyone.op(i) for i in range(len(everyone)) if everyone.op(i).stage.key == "qk_norm")
    assert first.details[0] == "ms(Q[I], every head) = mean of squares = (2·2 + 0·0 + 0·0 + 1·1) / 4 = 1.250"


def test_by_hand_every_intermediate_is_rounded() -> None:
    comp = compute(load_scenario("qk_norm_all"))
    hand = compute_hand(comp, 2)
    for hr in hand.heads:
        assert hr.part(QKNormed) is not None
        assert np.array_equal(hr.need(QKNormed).Q_norm, round_to(hr.need(QKNormed).Q_norm, 2))
        assert np.array_equal(hr.need(QKNormed).Q_normed.root, round_to(hr.need(QKNormed).Q_normed.root, 2))
    assert np.allclose(hand.heads[0].need(QKNormed).Q_norm, comp.heads[0].need(QKNormed).Q_norm, atol=0.02)


def test_json_has_the_normalised_vectors_and_null_without() -> None:
    comp = compute(load_scenario("qk_norm"))
    doc = json.loads(to_json(comp))
    assert doc["heads"][0]["Q_norm"] == comp.heads[0].need(QKNormed).Q_norm.tolist()
    assert doc["heads"][1]["K_norm"] == comp.heads[1].need(QKNormed).K_norm.tolist()
    plain = json.loads(to_json(compute(load_scenario("i_love_ai"))))
    assert plain["heads"][0]["Q_norm"] is None and plain["heads"][0]["K_norm"] is None


@pytest.mark.parametrize("name", ["qk_norm", "qk_norm_all"])
def test_toml_export_round_trips(name: str) -> None:
    comp = compute(load_scenario(name))
    text = to_toml(comp.scenario)
    assert "[qk_norm]" in text and "eps = 1e-06" in text
    again = compute(parse_scenario(text, "again.toml"))
    for a, b in zip(comp.heads, again.heads):
        assert np.array_equal(a.need(QKNormed).Q_norm, b.need(QKNormed).Q_norm) and np.array_equal(a.output, b.output)


def test_the_gains_are_editable_and_saved_back() -> None:
    sc = load_scenario("qk_norm")
    cells = [c for c in input_cells(sc) if c.matrix in ("gamma_q", "gamma_k")]
    assert [c.label(sc) for c in cells] == ["gamma_q[0]", "gamma_q[1]", "gamma_k[0]", "gamma_k[1]"]
    edited = apply_edit(sc, InputCell("gamma_q", None, 0, 1), "3")
    assert edited.qk_norm is not None and edited.qk_norm.gamma_q.tolist() == [1, 3]
    assert np.allclose(compute(edited).heads[0].need(QKNormed).Q_norm[:, 1], 3 * compute(sc).heads[0].need(QKNormed).Q_norm[:, 1])
    original = (ROOT / "scenarios" / "qk_norm.toml").read_text(encoding="utf-8")
    saved = save_text(original, edited, [InputCell("gamma_q", None, 0, 1)])
    assert parse_scenario(saved, "saved.toml").qk_norm.gamma_q.tolist() == [1, 3]
    assert "# shared by both heads" in saved  # the file's comments are kept
    bare = BASE + '[qk_norm]\nover = "head"\n' + HEAD  # gains left at their default: the whole vector is written
    sc2 = parse_scenario(bare, "bare.toml")
    edited2 = apply_edit(sc2, InputCell("gamma_k", None, 0, 2), "0.5")
    assert "gamma_k = [1, 1, 0.5]" in save_text(bare, edited2, [InputCell("gamma_k", None, 0, 2)])


ERRORS = {
    "missing_over": (BASE + "[qk_norm]\neps = 1e-6\n" + HEAD, "[qk_norm] is missing 'over'; expected over = \"head\""),
    "bad_over": (BASE + '[qk_norm]\nover = "heads"\n' + HEAD,
                 "[qk_norm] over = 'heads' is not allowed; expected one of: 'head', 'all'; did you mean 'head'?"),
    "gamma_q_length": (BASE + '[qk_norm]\nover = "head"\ngamma_q = [1, 1]\n' + HEAD,
                       "[qk_norm] gamma_q has 2 numbers; expected 3 (one gain per column of a head, d_k = 3)"),
    "gamma_k_all_length": (BASE + '[qk_norm]\nover = "all"\ngamma_k = [1, 1, 1, 1]\n' + SPLIT,
                           "[qk_norm] gamma_k has 4 numbers; expected 2 (one gain per column of W_K,"
                           " num_kv_heads × d_k = 1 × 2)"),
    "gamma_nan": (BASE + '[qk_norm]\nover = "head"\ngamma_q = [1, nan, 1]\n' + HEAD,
                  "[qk_norm] gamma_q item 2 is nan; expected a finite number"),
    "all_needs_attention": (BASE + '[qk_norm]\nover = "all"\n' + HEAD,
                            "[qk_norm] over = \"all\" needs the heads in [attention] form"),
    "eps_zero": (BASE + '[qk_norm]\nover = "head"\neps = 0\n' + HEAD, "[qk_norm] eps = 0; expected a finite number > 0"),
    "typo": (BASE + '[qk_norm]\nover = "head"\ngama_q = [1, 1, 1]\n' + HEAD,
             "unknown key 'gama_q' in [qk_norm]; did you mean 'gamma_q'?"),
    "not_table": (BASE + 'qk_norm = "head"\n' + HEAD, "qk_norm must be a table ([qk_norm]), got a string"),
    "two_widths": (BASE + '[qk_norm]\nover = "head"\n' + HEAD
                   + "[[heads]]\nW_Q = [[1, 0], [0, 1], [1, 0], [0, 1]]\nW_K = [[1, 0], [0, 1], [1, 0], [0, 1]]\n"
                   + "W_V = [[1], [0], [0], [1]]\n",
                   "[qk_norm] needs every head to have the same d_k"),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_each_rule_is_one_clean_line(case: str, cli, write) -> None:
    text, expected = ERRORS[case]
    path = write(text)
    for mode in (("--check",), ("--export", "json"), ("--export", "worksheet")):
        run = cli(*mode, str(path))
        assert (run.code, run.out) == (2, ""), (mode, run.out)
        lines = run.err.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {path}: "), run.err
        assert expected in lines[0], lines[0]


def test_an_overflowing_normalised_vector_is_one_line(cli, write) -> None:
    text = BASE + '[qk_norm]\nover = "head"\ngamma_q = [1.5e308, 1, 1]\n' + HEAD  # Q[I] = [2, 0, 1]: 2 / 1.29 · γ
    run = cli("--check", str(write(text)))
    assert run.code == 2 and "values in Q_norm overflow float64 at row 1" in run.err and "gamma_q" in run.err, run.err
    products = BASE + '[qk_norm]\nover = "head"\ngamma_q = [1e200, 1, 1]\ngamma_k = [1e200, 1, 1]\n' + HEAD
    run = cli("--check", str(write(products)))
    assert run.code == 2 and "values in scores overflow" in run.err and "[qk_norm] gains" in run.err, run.err


def test_check_names_it() -> None:
    from qkv_tui.core.variants import summary_parts

    assert "qk-norm per head" in summary_parts(load_scenario("qk_norm"))
    assert "qk-norm over all heads" in summary_parts(load_scenario("qk_norm_all"))
