"""The output gate (Qwen3-Next, Qwen3.5; Qiu et al. 2025): out_h ← out_h ⊙ σ(X̂·W_G_h), a Gate stage after Mix.

The engine is checked against a loop written here and against torch.sigmoid; every gate line against the
calculator of test_calculator (and its σ(…) arguments as dot products); the rules fail with one line; the
exports, the hand rounding, the decode and tiles views and the editor honour the gate.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv_tui import compute, load_scenario
from qkv_tui.core.cell_edit import InputCell, apply_edit, input_cells, parse_address, save_text
from qkv_tui.core.engine import Computation
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.display.tiled_view import tiled_explanation
from qkv_tui.edges.export_json import to_json
from qkv_tui.edges.export_markdown import to_markdown
from qkv_tui.edges.export_toml import to_toml
from qkv_tui.kernels.gate import Gated
from qkv_tui.teach.decode import SCHEDULES, decode
from qkv_tui.teach.handcalc import compute_hand
from qkv_tui.teach.quiz import questions
from qkv_tui.teach.tiled import tiled
from qkv_tui.teach.trace import Trace

from .conftest import BASE, HEAD
from .error_table import assert_one_error_line
from .test_calculator import assert_holds, check_text

GATED = load_scenario("gated")

# the [attention] form: two heads of d_v = 3, one wide W_G of 2 × 3 columns
SPLIT = '''
[attention]
num_heads = 2
W_Q = [[1, 0, 1, 0], [0, 1, 0, 0], [1, 0, 0, 1], [0, 1, 1, 0]]
W_K = [[0, 0, 1, 1], [1, 1, 0, 0], [0, 1, 0, 1], [1, 0, 1, 0]]
W_V = [[1, 0, 0, 1, 0, 0], [0, 1, 0, 0, 1, 0], [0, 0, 1, 0, 0, 1], [1, 1, 0, 1, 1, 0]]
'''
WIDE_GATE = "[gate]\nW_G = [[0.5, -1, 0, 1, 0, 0.25], [0, 1, 2, -1, 0.5, 0], [1, 0, -0.5, 0, 1, 0], [-1, 0.5, 0, 0, 0, 1]]\n"
HEAD_GATE = "W_G = [[0.5, -1, 0], [0, 1, 2], [1, 0, -0.5], [-1, 0.5, 0]]\n"


def loop_gate(comp: Computation, h: int) -> tuple[np.ndarray, np.ndarray]:
    """σ(X̂·W_G) and out ⊙ it, a cell at a time."""
    hr = comp.heads[h]
    X = comp.X_in
    assert hr.part(Gated) is not None
    n, d_v = hr.output.shape
    g = np.zeros((n, d_v))
    gated = np.zeros((n, d_v))
    for i in range(n):
        for j in range(d_v):
            z = math.fsum(float(X[i, c]) * float(hr.need(Gated).W_G[c, j]) for c in range(X.shape[1]))
            g[i, j] = 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0  # e^−z past float64: shut
            gated[i, j] = float(hr.output[i, j]) * g[i, j]
    return g, gated


def check_engine(comp: Computation) -> None:
    for h, hr in enumerate(comp.heads):
        assert hr.part(Gated) is not None and hr.part(Gated) is not None
        g, gated = loop_gate(comp, h)
        np.testing.assert_allclose(hr.need(Gated).gate, g, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(hr.need(Gated).gated, gated, rtol=1e-12, atol=1e-15)
    # Concat joins the gated outputs, W_O reads them
    np.testing.assert_array_equal(comp.concat, np.concatenate([hr.need(Gated).gated for hr in comp.heads], axis=1))  # type: ignore[misc]


def test_the_engine_gates_every_head_as_a_loop_does() -> None:
    comp = compute(GATED)
    check_engine(comp)
    gated = comp.heads[1]
    gate = gated.need(Gated).gate
    assert f"{gate[0, 0]:.3f}" == "0.119" and f"{gate[1, 0]:.3f}" == "0.881"  # the description's numbers
    # the output stays the head's output before the gate
    assert np.array_equal(gated.output, gated.weights @ gated.V)


def test_the_engine_agrees_with_torch_sigmoid() -> None:
    own = "W_G = [[1, -2, 0.5], [0, 1, 1], [3, 0, -1], [0.25, 0.5, 0]]\n"
    for text in (BASE + "[norm]\nkind = \"rms\"\n" + SPLIT + WIDE_GATE, BASE + HEAD + own):
        comp = compute(parse_scenario(text, "t.toml"))
        for hr in comp.heads:
            assert hr.part(Gated) is not None and hr.part(Gated) is not None
            want = torch.sigmoid(torch.tensor(np.asarray(comp.X_in)) @ torch.tensor(np.asarray(hr.need(Gated).W_G)))
            np.testing.assert_allclose(hr.need(Gated).gate, want.numpy(), rtol=1e-12, atol=1e-15)
            np.testing.assert_allclose(hr.need(Gated).gated, hr.output * want.numpy(), rtol=1e-12, atol=1e-15)


def test_without_a_gate_nothing_changes() -> None:
    comp = compute(load_scenario("two_heads"))
    assert all(h.part(Gated) is None and h.part(Gated) is None and h.part(Gated) is None for h in comp.heads)
    assert "gate" not in Trace(comp).stage_keys
    np.testing.assert_array_equal(comp.concat, np.concatenate([h.output for h in comp.heads], axis=1))


# --- the Gate stage's lines ----------------------------------------------------------------------


def gate_lines(trace: Trace, decimals: int) -> list[str]:
    lines = []
    for run in trace.runs:
        if run.stage != "gate":
            continue
        for i in range(run.start, run.stop):
            op = trace.op(i, decimals)
            lines += [op.arithmetic, *op.details]
    return lines


def check_sigma_arguments(line: str) -> None:
    """Inside σ(…) the logit is a dot product that checks out, and e^ is raised to minus the logit shown."""
    if not line.startswith("g["):
        return
    sides = line.split(" = ")
    inner = [s[2:-1] for s in sides if s.startswith("σ(")][1:]  # after the symbolic σ(X[i]·W_G[:,j])
    assert inner, line
    if len(inner) > 1:
        assert_holds(check_text("z = " + " = ".join(inner)))
    z = inner[-1]
    power = next((s for s in sides if s.startswith("1 / (1 + e^")), None)
    if power is not None:
        exponent = power.removeprefix("1 / (1 + e^").removesuffix(")")
        assert float(exponent) == -float(z), line


@pytest.mark.parametrize("decimals", [1, 2, 3, 5])
@pytest.mark.parametrize("hand", [False, True])
def test_every_gate_line_checks_out_on_a_calculator(decimals: int, hand: bool) -> None:
    for text in (None, BASE + SPLIT + WIDE_GATE, BASE + "[norm]\nkind = \"layer\"\n" + HEAD + HEAD_GATE):
        sc = GATED if text is None else parse_scenario(text, "t.toml")
        comp = compute(sc)
        trace = Trace(compute_hand(comp, decimals) if hand else comp)
        lines = gate_lines(trace, decimals)
        assert lines and any(line.startswith("g[") for line in lines) and any(line.startswith("gated[") for line in lines)
        report = check_text("\n".join(lines))
        assert_holds(report)
        assert {"e^", "/", "·", "+"} <= report.kinds
        for line in lines:
            check_sigma_arguments(line)


def test_a_gate_past_float64_is_shut_and_says_so() -> None:
    sc = parse_scenario(BASE + HEAD + "W_G = [[-1000, 1000, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]]\n", "t.toml")
    comp = compute(sc)
    check_engine(comp)
    for hand in (False, True):
        trace = Trace(compute_hand(comp, 3) if hand else comp)
        op = trace.op(next(r for r in trace.runs if r.stage == "gate").start)
        assert op.arithmetic == "g[I,0] = σ(X[I]·W_G[:,0]) = σ(1·(-1000) + 0·0 + 1·0 + 0·0) = σ(-1000) = 0.000"
        assert op.details == ("e^1000 is past float64: the gate is shut",)
        assert_holds(check_text("\n".join(gate_lines(trace, 3))))


def test_the_stage_reads_as_the_spec_writes_it() -> None:
    trace = Trace(compute(GATED))
    assert trace.stage_keys == ["embed", "project", "score", "scale", "softmax", "mix", "gate", "concat"]
    run = next(r for r in trace.runs if r.stage == "gate" and r.head == 1)
    op = trace.op(run.start)
    assert op.arithmetic == "g[the,0] = σ(X[the]·W_G[:,0]) = σ(1·(-2) + 0·2) = σ(-2) = 1 / (1 + e^2) = 1 / 8.389 = 0.119"
    assert op.details == ("e^2 = 7.389; 1 + 7.389 = 8.389",)
    gated = trace.op(run.start + 6)
    assert gated.arithmetic == "gated[the,0] = out[the,0]·g[the,0] = 1.000·0.119 = 0.119"
    assert "sink" in trace.meaning("gate", 1) and "Qiu et al." in trace.meaning("gate", 1)
    concat = trace.op(next(r for r in trace.runs if r.stage == "concat").start)
    assert concat.arithmetic == "concat[the] = [sink head gated[the] | gated head gated[the]] = [0.376, 0.000 | 0.119, 0.000]"


hypothesis_settings = settings(max_examples=40, deadline=None, derandomize=True)
small = st.floats(-3, 3, allow_nan=False).map(lambda x: round(x, 2))


@st.composite
def gated_scenarios(draw: st.DrawFn) -> str:
    n, d_model, d_v = draw(st.integers(1, 4)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
    heads = draw(st.integers(1, 2))

    def grid(rows: int, cols: int, values: st.SearchStrategy[float] = small) -> str:
        return "[" + ", ".join("[" + ", ".join(repr(draw(values)) for _ in range(cols)) + "]" for _ in range(rows)) + "]"

    text = f"tokens = {json.dumps([f't{i}' for i in range(n)])}\nX = {grid(n, d_model)}\n"
    text += draw(st.sampled_from(["", 'mask = "causal"\n']))
    if draw(st.booleans()):
        text += '[norm]\nkind = "rms"\n'
    gate_values = st.floats(-40, 40, allow_nan=False).map(lambda x: round(x, 1))  # wide enough to shut a gate
    if draw(st.booleans()):
        text += f"[attention]\nnum_heads = {heads}\nW_Q = {grid(d_model, heads)}\nW_K = {grid(d_model, heads)}\n"
        text += f"W_V = {grid(d_model, heads * d_v)}\n[gate]\nW_G = {grid(d_model, heads * d_v, gate_values)}\n"
    else:
        for _ in range(heads):
            text += f"[[heads]]\nW_Q = {grid(d_model, 2)}\nW_K = {grid(d_model, 2)}\nW_V = {grid(d_model, d_v)}\n"
            text += f"W_G = {grid(d_model, d_v, gate_values)}\n"
            if draw(st.booleans()):
                text += f"sink = {draw(small)}\n"
    return text


@hypothesis_settings
@given(gated_scenarios(), st.integers(1, 4), st.booleans())
def test_generated_gates_agree_with_a_loop_and_check_out(text: str, decimals: int, hand: bool) -> None:
    sc = parse_scenario(text, "t.toml")
    comp = compute(sc)
    check_engine(comp)
    trace = Trace(compute_hand(comp, decimals) if hand else comp)
    lines = gate_lines(trace, decimals)
    report = check_text("\n".join(lines))
    assert not report.failures, report.failures[:3]
    for line in lines:
        check_sigma_arguments(line)
    # the TOML export loads back to the same gate
    again = compute(parse_scenario(to_toml(sc), "again.toml"))
    for a, b in zip(comp.heads, again.heads):
        assert np.array_equal(a.need(Gated).W_G, b.need(Gated).W_G) and np.array_equal(a.need(Gated).gated, b.need(Gated).gated)  # type: ignore[arg-type]


# --- the rules ---------------------------------------------------------------------------------

ERRORS = {
    "missing_on_a_head": (BASE + HEAD + HEAD_GATE + HEAD,
                          "[[heads]] #2 has no W_G but [[heads]] #1 has one; a gate is on every head or none"),
    "rows": (BASE + HEAD + "W_G = [[1, 0, 0], [0, 1, 0]]\n",
             "[[heads]] #1 W_G has 2 rows; expected d_model = 4 (the gate reads X̂, what the Query projection reads)"),
    "columns": (BASE + HEAD + "W_G = [[1], [0], [0], [1]]\n",
                "[[heads]] #1 W_G has 1 columns; expected the head's d_v = 3 (one gate per output column)"),
    "nan": (BASE + HEAD + "W_G = [[1, 0, 0], [0, nan, 0], [0, 0, 1], [1, 1, 1]]\n",
            "[[heads]] #1 W_G row 2, column 2 is nan; expected a finite number"),
    "ragged": (BASE + HEAD + "W_G = [[1, 0, 0], [0, 1], [0, 0, 1], [1, 1, 1]]\n", "[[heads]] #1 W_G is ragged"),
    "table_with_heads": (BASE + HEAD + HEAD_GATE + "[gate]\nW_G = [[1]]\n",
                         "[gate] is the [attention] form of the output gate; with [[heads]] tables write W_G"),
    "wide_columns": (BASE + SPLIT + "[gate]\nW_G = [[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 1]]\n",
                     "[gate] W_G has 3 columns; expected num_heads × d_v = 2 × 3"),
    "wide_rows": (BASE + SPLIT + "[gate]\nW_G = [[1, 0, 0, 1, 0, 0]]\n", "[gate] W_G has 1 rows; expected d_model = 4"),
    "wide_missing": (BASE + SPLIT + "[gate]\n", "[gate] is missing 'W_G'"),
    "wide_typo": (BASE + SPLIT + "[gate]\nW_g = [[1]]\n", "unknown key 'W_g' in [gate]; did you mean 'W_G'?"),
    "wide_inf": (BASE + SPLIT
                 + "[gate]\nW_G = [[1, 0, 0, 1, 0, 0], [0, 1, 0, 0, 1, 0], [0, 0, inf, 0, 0, 1], [1, 1, 0, 1, 1, 0]]\n",
                 "[gate] W_G row 3, column 3 is inf; expected a finite number"),
    "not_a_table": (BASE + 'gate = "on"\n' + SPLIT, "gate must be a table ([gate]), got a string"),
    "in_attention": (BASE + SPLIT + "W_G = [[1]]\n",
                     "key 'W_G' is not allowed in [attention]: W_G belongs in a [[heads]] table or [gate]"),
    "overflow": (BASE + HEAD + "W_G = [[1e308, 0, 0], [0, 0, 0], [1e308, 0, 0], [0, 0, 0]]\n",
                 "head 1: values in the gate's X̂·W_G overflow float64 at row 1 (\"I\"); expected smaller X or W_G"),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_check_reports_one_clean_line(case: str, cli, write) -> None:
    assert_one_error_line(cli, write, *ERRORS[case])


@pytest.mark.parametrize("text", [BASE + HEAD + HEAD_GATE, BASE + SPLIT + WIDE_GATE])
def test_check_names_the_gate(text: str, cli, write) -> None:
    run = cli("--check", str(write(text)))
    assert run.code == 0, run.err
    assert run.out.startswith("ok: ") and run.out.rstrip().endswith("output gate")


# --- the exports -----------------------------------------------------------------------------


def test_json_has_the_gate_and_the_gated_output_after_the_biases() -> None:
    comp = compute(GATED)
    doc = json.loads(to_json(comp))
    for h, head in enumerate(doc["heads"]):
        keys = list(head)
        assert keys[-2:] == ["gate", "gated_output"] and keys.index("b_V") < keys.index("gate")
        np.testing.assert_array_equal(head["gate"], comp.heads[h].need(Gated).gate)
        np.testing.assert_array_equal(head["gated_output"], comp.heads[h].need(Gated).gated)
        np.testing.assert_array_equal(head["output"], comp.heads[h].output)  # before the gate
    np.testing.assert_array_equal(doc["concat"], np.concatenate([doc["heads"][h]["gated_output"] for h in (0, 1)], axis=1))
    plain = json.loads(to_json(compute(load_scenario("two_heads"))))
    assert all(h["gate"] is None and h["gated_output"] is None for h in plain["heads"])


def test_the_streamed_json_equals_the_one_in_memory(cli) -> None:
    run = cli("--export", "json", "gated")
    assert run.code == 0 and json.loads(run.out) == json.loads(to_json(compute(GATED)))


@pytest.mark.parametrize("text", [BASE + HEAD + HEAD_GATE + HEAD + HEAD_GATE, BASE + SPLIT + WIDE_GATE],
                         ids=["heads", "attention"])
def test_toml_round_trip(text: str) -> None:
    sc = parse_scenario(text, "t.toml")
    out = to_toml(sc)
    assert ("[gate]" in out) == (sc.num_heads_split is not None)
    again = parse_scenario(out, "t.toml")
    assert to_toml(again) == out
    a, b = compute(sc), compute(again)
    for x, y in zip(a.heads, b.heads):
        assert np.array_equal(x.need(Gated).W_G, y.need(Gated).W_G) and np.array_equal(x.need(Gated).gate, y.need(Gated).gate)  # type: ignore[arg-type]
    assert np.array_equal(a.output, b.output)


def test_the_markdown_page_works_the_gate() -> None:
    md = to_markdown(compute(GATED))
    section = md.split("### 7 · Gate\n")[2].split("\n## ")[0]  # the gated head's
    assert "| W_G " in section and "| g " in section and "| gated " in section
    assert "    g[the,0] = σ(X[the]·W_G[:,0]) = σ(1·(-2) + 0·2) = σ(-2) = 1 / (1 + e^2) = 1 / 8.389 = 0.119" in section
    assert_holds(check_text(md))


# --- hand rounding, decode, tiles, editing, the quiz -------------------------------------------


@pytest.mark.parametrize("decimals", [1, 2, 3])
def test_by_hand_every_step_is_written_down_rounded(decimals: int) -> None:
    comp = compute(parse_scenario(BASE + "[norm]\nkind = \"rms\"\n" + SPLIT + WIDE_GATE, "t.toml"))
    hand = compute_hand(comp, decimals)
    for hr in hand.heads:
        assert hr.part(Gated) is not None and hr.part(Gated) is not None and hr.part(Gated) is not None
        assert hand.norm is not None
        X = hand.norm.X_norm
        for i in range(X.shape[0]):
            for j in range(hr.d_v):
                W_G = hr.need(Gated).W_G
                z = round(sum(round(float(X[i, c]) * float(W_G[c, j]), decimals) for c in range(X.shape[1])), decimals)
                e = round(math.exp(-z), decimals)
                g = round(1 / round(1 + e, decimals), decimals)
                assert float(hr.need(Gated).gate[i, j]) == pytest.approx(g, abs=1e-12)
                assert float(hr.need(Gated).gated[i, j]) == pytest.approx(round(float(hr.output[i, j]) * g, decimals), abs=1e-12)
    np.testing.assert_array_equal(hand.concat, np.concatenate([h.need(Gated).gated for h in hand.heads], axis=1))  # type: ignore[misc]


@pytest.mark.parametrize("mode", SCHEDULES)
def test_decode_gates_each_new_token_as_the_trace_does(mode: str) -> None:
    comp = compute(GATED)
    dec = decode(comp, mode)
    for h, hr in enumerate(comp.heads):
        for step in dec.steps[h]:
            (gated,) = step.after  # the gate's record for the step's own tokens, its only part after the map
            assert isinstance(gated, Gated)
            np.testing.assert_allclose(gated.gate, hr.need(Gated).gate[step.start:step.stop], rtol=1e-12)
            np.testing.assert_allclose(gated.gated, hr.need(Gated).gated[step.start:step.stop], rtol=1e-12)


def test_the_decode_view_says_the_gate_is_the_new_tokens_own() -> None:
    from qkv_tui.display.decode_view import decode_explanation

    ex = decode_explanation(decode(compute(GATED), "tokens"), 1, 1, 3)
    text = "\n".join(ex.details)
    assert "g[cat] = σ(X[cat]·W_G) = [0.881, 0.881]; the gate reads the new token's own X row" in text
    assert "gated[cat] = out ⊙ g = [0.330, 0.670]·[0.881, 0.881] = [0.291, 0.590]" in text


def test_the_tiles_view_says_the_gate_comes_after_the_tiles() -> None:
    th = tiled(compute(GATED), 1)
    ex = tiled_explanation(th, len(th) - 1, 3)
    assert any("the output gate applies after the tiles' final O" in d for d in ex.details)
    plain = tiled(compute(load_scenario("two_heads")), 0)
    assert not any("gate" in d for d in tiled_explanation(plain, len(plain) - 1, 3).details)


def test_w_g_cells_are_inputs_that_edit_and_save() -> None:
    sc = parse_scenario(BASE + SPLIT + WIDE_GATE, "t.toml")
    cells = [c for c in input_cells(sc) if c.matrix == "W_G"]
    assert len(cells) == 2 * 4 * 3
    cell, value = parse_address(sc, "W_G[1,2] (head 2) = 3")
    assert cell == InputCell("W_G", 1, 1, 2) and value == " 3"
    new = apply_edit(sc, cell, value)
    assert new.heads[1].W_G is not None and float(new.heads[1].W_G[1, 2]) == 3.0
    assert compute(new).heads[1].part(Gated) is not None
    text = save_text(BASE + SPLIT + WIDE_GATE, new, [cell])
    saved = parse_scenario(text, "saved.toml")
    assert saved.heads[1].W_G is not None and float(saved.heads[1].W_G[1, 2]) == 3.0
    assert re.search(r"W_G = \[\[0\.5, -1, 0, 1, 0, 0\.25\], \[0, 1, 2, -1, 0\.5, 3\]", text)
    # the [[heads]] form writes into the head's own table
    per_head = BASE + HEAD + HEAD_GATE
    sc2 = parse_scenario(per_head, "t.toml")
    cell2, value2 = parse_address(sc2, "W_G[0,0] = -4")
    assert cell2 is not None
    saved2 = parse_scenario(save_text(per_head, apply_edit(sc2, cell2, value2), [cell2]), "s.toml")
    assert saved2.heads[0].W_G is not None and float(saved2.heads[0].W_G[0, 0]) == -4.0


def test_the_quiz_asks_for_a_gate() -> None:
    trace = Trace(compute(GATED))
    run = next(r for r in trace.runs if r.stage == "gate")
    asked = questions(trace, run.start, 3)
    assert asked and asked[0].kind == "value"
    gated = questions(trace, run.start + 6, 3)
    assert gated and gated[0].kind == "value"
