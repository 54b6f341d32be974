"""Modern attention (docs/scenario-format.md) against a loop reference, and the invariants each variant keeps."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv_tui import compute, load_scenario
from qkv_tui.core.rope_part import rotate
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.core.variants import Rope
from qkv_tui.core.variants.alibi import default_slopes
from qkv_tui.display.view import View
from qkv_tui.edges.export_markdown import to_markdown
from qkv_tui.kernels.alibi import Biased
from qkv_tui.kernels.rope import Rotated
from qkv_tui.kernels.sinks import Sunk
from qkv_tui.teach.handcalc import compute_hand
from qkv_tui.teach.trace import Trace

from .conftest import BASE, HEAD
from .test_calculator import assert_holds, check_text, explanation_text
from .test_errors_variants import HEAD4
from .variants_cases import ModernCase, modern_cases, reference

TOL = {"rtol": 1e-9, "atol": 1e-9}


def close(got: object, want: object) -> bool:
    return bool(np.allclose(np.asarray(got, dtype=float), np.asarray(want, dtype=float), **TOL))


@settings(max_examples=80, deadline=None)
@given(modern_cases())
def test_engine_matches_the_loop_reference(case: ModernCase) -> None:
    comp = compute(parse_scenario(case.toml, "generated.toml"))
    ref = reference(case)
    if case.norm is None:
        assert comp.norm is None
    else:
        assert comp.norm is not None and close(comp.norm.X_norm, ref["X_norm"])
    assert comp.scenario.positions == (None if ref["positions"] is None else tuple(ref["positions"]))
    for got, want in zip(comp.heads, ref["heads"], strict=True):
        for name in ("Q", "K", "V", "scores", "scaled", "weights", "output"):
            assert close(getattr(got, name), want[name]), name
        parted = {"Q_rot": got.read(Rotated, lambda r: r.Q_rot), "K_rot": got.read(Rotated, lambda r: r.K_rot),
                  "bias": got.read(Biased, lambda b: b.bias)}
        for name in ("Q_rot", "K_rot", "bias"):
            if want[name] is None:
                assert parted[name] is None, name
            else:
                assert close(parted[name], want[name]), name
        assert got.kv_head == want["kv_head"]
    assert close(comp.concat, ref["concat"])
    assert close(comp.output, ref["output"])


@settings(max_examples=60, deadline=None)
@given(modern_cases())
def test_invariants(case: ModernCase) -> None:
    comp = compute(parse_scenario(case.toml, "generated.toml"))
    allow = np.array(case.allow)
    for head in comp.heads:
        sums = head.weights.sum(axis=1)
        if head.part(Sunk) is None:
            assert head.part(Sunk) is None
            assert np.allclose(sums, 1.0, **TOL)
        else:
            assert head.part(Sunk) is not None
            sink_share = head.need(Sunk).sink_exp / head.row_sum  # what the dropped sink column took
            assert (sums <= 1.0 + 1e-12).all()
            assert (sums[sink_share > 1e-12] < 1.0).all()  # strictly less wherever the sink's share shows in float64
            assert np.allclose(sums + sink_share, 1.0, **TOL)
        assert (head.weights[~allow] == 0.0).all()  # exactly zero, not merely small
        assert np.isneginf(head.masked[~allow]).all()
        bias = head.need(Biased).bias if head.part(Biased) is not None else 0.0
        assert np.allclose(np.where(allow, head.masked, 0.0), np.where(allow, head.scaled + bias, 0.0), **TOL)
        if head.part(Rotated) is not None and head.part(Rotated) is not None:
            # rotation keeps every vector's length
            assert np.allclose(np.linalg.norm(head.need(Rotated).Q_rot, axis=1), np.linalg.norm(head.Q, axis=1), **TOL)
            assert np.allclose(np.linalg.norm(head.need(Rotated).K_rot, axis=1), np.linalg.norm(head.K, axis=1), **TOL)
    # heads sharing a K/V head read the very same arrays: computed once
    first: dict[int, object] = {}
    for head in comp.heads:
        if head.kv_head in first and comp.scenario.num_kv_heads is not None:
            assert head.K is first[head.kv_head]
        first.setdefault(head.kv_head, head.K)


@settings(max_examples=40, deadline=None)
@given(modern_cases(cross=False, rope=True), st.integers(1, 50))
def test_rope_scores_depend_only_on_distance(case: ModernCase, shift: int) -> None:
    """Positions shifted by a constant leave every score unchanged: q_m·k_n depends on m − n only."""
    assert case.rope is not None
    positions = case.rope["positions"]
    base = compute(parse_scenario(case.toml, "a.toml"))
    text = case.toml
    if "positions = " in text:
        text = text.replace(f"positions = [{', '.join(map(str, positions))}]",
                            f"positions = [{', '.join(str(p + shift) for p in positions)}]")
    else:
        text = text.replace("[rope]\n", f"[rope]\npositions = [{', '.join(str(p + shift) for p in positions)}]\n")
    moved = compute(parse_scenario(text, "b.toml"))
    assert moved.scenario.rope is not None and moved.scenario.rope.positions[0] == positions[0] + shift
    for a, b in zip(base.heads, moved.heads, strict=True):
        assert np.allclose(a.scores, b.scores, rtol=1e-9, atol=1e-8)


def test_rope_pairs_differ_by_layout() -> None:
    assert Rope(10000.0, "interleaved", (0,)).pairs(4) == [(0, 1), (2, 3)]
    assert Rope(10000.0, "half", (0,)).pairs(4) == [(0, 2), (1, 3)]
    v = np.array([[1.0, 2.0, 3.0, 4.0]])
    a = rotate(v, Rope(10000.0, "interleaved", (1,)), (1,))
    b = rotate(v, Rope(10000.0, "half", (1,)), (1,))
    assert not np.allclose(a, b)  # the same vector, two layouts, different numbers
    # pair 0 turns by exactly 1 radian at position 1 (θ_0 = 1): the worked cell
    assert math.isclose(a[0, 0], 1 * math.cos(1) - 2 * math.sin(1))
    assert math.isclose(b[0, 0], 1 * math.cos(1) - 3 * math.sin(1))


def test_rope_at_position_zero_changes_nothing() -> None:
    v = np.array([[1.0, -2.0, 0.5, 4.0]])
    for layout in ("interleaved", "half"):
        assert np.array_equal(rotate(v, Rope(10000.0, layout, (0,)), (0,)), v)


def test_alibi_default_slopes_are_the_papers() -> None:
    assert default_slopes(8) == tuple(2.0 ** -(h + 1) for h in range(8))
    assert default_slopes(2) == (2.0**-4, 2.0**-8)
    sc = parse_scenario(BASE + 'mask = "causal"\n[alibi]\n' + HEAD, "a.toml")
    head = compute(sc).heads[0]
    assert head.need(Biased).slope == 2.0**-8
    assert head.part(Biased) is not None
    assert head.need(Biased).bias.tolist() == [[0, 2**-8, 2 * 2**-8], [-(2**-8), 0, 2**-8], [-2 * 2**-8, -(2**-8), 0]]


def test_scaled_excludes_the_bias_and_masked_includes_it() -> None:
    head = compute(parse_scenario(BASE + 'mask = "causal"\n[alibi]\nslopes = [0.5]\n' + HEAD, "a.toml")).heads[0]
    assert head.scaled[2, 0] == head.scores[2, 0] / math.sqrt(3)
    assert head.masked[2, 0] == head.scaled[2, 0] + 0.5 * (0 - 2)
    assert np.isneginf(head.masked[0, 1])


def test_sliding_window_convention() -> None:
    """window W: itself and the W−1 tokens before it; indices, not rope positions."""
    text = BASE + '[mask]\nkind = "sliding"\nwindow = 2\n[rope]\nlayout = "half"\npositions = [0, 5, 9]\n' + HEAD4
    sc = parse_scenario(text, "a.toml")
    assert sc.allow.tolist() == [[True, False, False], [True, True, False], [False, True, True]]
    head = compute(sc).heads[0]
    assert head.weights[2, 0] == 0.0


def test_window_one_attends_only_itself() -> None:
    sc = parse_scenario(BASE + 'mask = { kind = "sliding", window = 1 }\n' + HEAD, "a.toml")
    assert np.array_equal(compute(sc).heads[0].weights, np.eye(3))


def test_sink_takes_its_share() -> None:
    head = compute(parse_scenario(BASE + HEAD + "sink = 0.0\n", "a.toml")).heads[0]
    plain = compute(parse_scenario(BASE + HEAD, "a.toml")).heads[0]
    assert head.need(Sunk).sink == 0.0 and head.part(Sunk) is not None
    # with the sink, each row's weights are the plain ones scaled by Σe^s / (Σe^s + e^sink)
    for i in range(3):
        e = np.exp(plain.masked[i])
        factor = e.sum() / (e.sum() + math.exp(0.0))
        assert np.allclose(head.weights[i], plain.weights[i] * factor, **TOL)
    # a sink far below every score changes nothing visible; far above, it takes almost everything
    low = compute(parse_scenario(BASE + HEAD + "sink = -1000.0\n", "a.toml")).heads[0]
    assert np.allclose(low.weights, plain.weights, **TOL)
    high = compute(parse_scenario(BASE + HEAD + "sink = 1000.0\n", "a.toml")).heads[0]
    assert (high.weights < 1e-300).all() and np.isfinite(high.weights).all()


def test_rms_norm_worked_cell() -> None:
    """The issue's cell: X̂[I,2] = 1 / √(0.5 + 1e-5) · 1.0 = 1.414 (I = [1, 0, 1, 0], mean square 0.5)."""
    comp = compute(parse_scenario(BASE + '[norm]\nkind = "rms"\n' + HEAD, "a.toml"))
    assert comp.norm is not None
    assert comp.norm.spread[0] == 0.5
    assert math.isclose(comp.norm.X_norm[0, 2], 1 / math.sqrt(0.5 + 1e-5))
    assert round(float(comp.norm.X_norm[0, 2]), 3) == 1.414


def test_layer_norm_centres_and_scales() -> None:
    comp = compute(parse_scenario(BASE + '[norm]\nkind = "layer"\neps = 1e-12\n' + HEAD, "a.toml"))
    assert comp.norm is not None
    assert np.allclose(comp.norm.X_norm.mean(axis=1), 0.0)
    assert np.allclose(comp.norm.X_norm.var(axis=1), 1.0, atol=1e-9)


def test_norm_leaves_the_context_as_given() -> None:
    text = BASE + '[norm]\nkind = "rms"\ngamma = [2, 2, 2, 2]\n[context]\ntokens = ["a"]\nX = [[1, 2, 3, 4]]\n' + HEAD
    comp = compute(parse_scenario(text, "a.toml"))
    head = comp.heads[0]
    assert np.allclose(head.K, np.array([[1, 2, 3, 4]]) @ head.W_K)
    assert comp.norm is not None and np.allclose(head.Q, comp.norm.X_norm @ head.W_Q)
    assert comp.scenario.positions is None


def test_biases_add_to_every_row() -> None:
    text = BASE + HEAD + "b_Q = [1, 2, 3]\nb_K = [0.5, 0, 0]\nb_V = [0, 0, -1]\n[output]\nW_O = [[1], [1], [1]]\nb_O = [10]\n"
    comp = compute(parse_scenario(text, "a.toml"))
    head = comp.heads[0]
    X = comp.scenario.X
    assert np.array_equal(head.Q, X @ head.W_Q + np.array([1, 2, 3]))
    assert np.array_equal(head.K, X @ head.W_K + np.array([0.5, 0, 0]))
    assert np.array_equal(head.V, X @ head.W_V + np.array([0, 0, -1]))
    assert np.allclose(comp.output, comp.concat @ np.ones((3, 1)) + 10)


def test_gqa_heads_share_k_and_v() -> None:
    comp = compute(load_scenario("gqa"))
    sc = comp.scenario
    assert sc.num_kv_heads == 2 and len(comp.heads) == 4
    assert [h.kv_head for h in comp.heads] == [0, 0, 1, 1]
    assert comp.heads[0].K is comp.heads[1].K and comp.heads[2].V is comp.heads[3].V
    assert not np.array_equal(comp.heads[0].K, comp.heads[2].K)


def test_mqa_is_one_kv_head() -> None:
    comp = compute(load_scenario("mqa"))
    assert comp.scenario.num_kv_heads == 1
    assert {h.kv_head for h in comp.heads} == {0}
    assert all(h.K is comp.heads[0].K for h in comp.heads)


@pytest.mark.parametrize("name", ["rope", "rope_layouts", "gqa", "mqa", "alibi", "sliding_window", "sink", "pre_norm"])
def test_builtin_modern_scenarios_load_and_describe_themselves(name: str) -> None:
    sc = load_scenario(name)
    assert len(sc.description) > 80  # says what to look at
    comp = compute(sc)
    for head in comp.heads:
        assert (head.weights[~sc.allow] == 0.0).all()


def test_rope_scenario_is_the_seed_plus_rope() -> None:
    seed = load_scenario("i_love_ai")
    sc = load_scenario("rope")
    assert np.array_equal(sc.X, seed.X) and sc.tokens == seed.tokens
    assert sc.rope is not None
    comp = compute(sc)
    head = comp.heads[0]
    # position 0 is not rotated: "I"'s Query and Key are the plain projections
    assert np.array_equal(head.Q_used[0], head.Q[0]) and np.array_equal(head.K_used[0], head.K[0])


def test_rope_layouts_scenario_gives_different_numbers() -> None:
    """rope_layouts' unpermuted head is rope in the other layout: the same Q and K, rotated by other pairings."""
    inter, half = load_scenario("rope"), load_scenario("rope_layouts")
    assert inter.rope is not None and half.rope is not None
    assert (inter.rope.layout, half.rope.layout) == ("interleaved", "half")
    assert [h.name for h in half.heads] == ["permuted", "unpermuted"]
    a, b = compute(inter).heads[0], compute(half).heads[1]
    assert np.array_equal(a.Q, b.Q) and np.array_equal(a.K, b.K)  # the same vectors
    assert a.part(Rotated) is not None and b.part(Rotated) is not None
    assert not np.allclose(a.need(Rotated).Q_rot[1:], b.need(Rotated).Q_rot[1:])  # rotated by different pairings
    assert np.array_equal(a.need(Rotated).Q_rot[0], b.need(Rotated).Q_rot[0])  # position 0 turns by nothing in either layout


@settings(max_examples=40, deadline=None)
@given(modern_cases())
def test_toml_export_round_trips_every_variant(case: ModernCase) -> None:
    """--export toml writes every §7 key back: loading the export gives the very same numbers."""
    from qkv_tui.edges.export_toml import to_toml

    original = parse_scenario(case.toml, "a.toml")
    again = parse_scenario(to_toml(original), "exported.toml")
    a, b = compute(original), compute(again)
    assert again.summary() == original.summary()
    for ha, hb in zip(a.heads, b.heads, strict=True):
        assert ha.kv_head == hb.kv_head and ha.read(Sunk, lambda s: s.sink) == hb.read(Sunk, lambda s: s.sink)
        for name in ("Q", "K", "V", "Q_rot", "K_rot", "bias", "masked", "weights", "output"):
            x, y = (_parted(ha, name), _parted(hb, name)) if name in ("Q_rot", "K_rot", "bias") else (
                getattr(ha, name), getattr(hb, name))
            assert (x is None and y is None) or np.array_equal(x, y), name
    assert np.array_equal(a.output, b.output)


@settings(max_examples=30, deadline=None)
@given(modern_cases(), st.integers(1, 6), st.booleans())
def test_every_modern_line_checks_out_on_a_calculator(case: ModernCase, decimals: int, hand: bool) -> None:
    """Norm, + b, Rotate, + slope·(j − i) and the sink column: each '=' recomputes from the shown numbers."""
    comp = compute(parse_scenario(case.toml, "generated.toml"))
    if hand:
        comp = compute_hand(comp, decimals)
    assert_holds(check_text(explanation_text(View(Trace(comp)), decimals), whole=not hand))


BIAS_WITH_HIDDEN_DIGITS = """tokens = ["t0", "t1"]
X = [[0, 1, 0, 2], [1, 0, 0, 0]]
[norm]
kind = "rms"
[[heads]]
W_Q = [[1], [0], [0], [0]]
W_K = [[0], [1.27], [0], [-3]]
W_V = [[1], [0], [0], [0]]
b_K = [-1.45]
"""


def test_a_hand_sum_with_a_bias_of_more_digits_shows_them() -> None:
    """Found by the generated test: by hand, ``1.1 + (-5.4) + (-1.4) = -5.8`` hid the bias's -1.45."""
    comp = compute_hand(compute(parse_scenario(BIAS_WITH_HIDDEN_DIGITS, "bias.toml")), 1)
    text = explanation_text(View(Trace(comp)), 1)
    assert "(-1.45) = -5.8" in text
    assert_holds(check_text(text, whole=False))


@settings(max_examples=15, deadline=None)
@given(modern_cases(), st.integers(1, 6))
def test_modern_markdown_checks_out_on_a_calculator(case: ModernCase, decimals: int) -> None:
    assert_holds(check_text(to_markdown(compute(parse_scenario(case.toml, "generated.toml")), decimals)))


def test_trace_has_the_modern_stages() -> None:
    assert Trace(compute(load_scenario("pre_norm"))).stage_keys[:3] == ["embed", "norm", "project"]
    rope = Trace(compute(load_scenario("rope")))
    assert rope.stage_keys[1:4] == ["project", "rotate", "score"]
    op = next(rope.op(i) for i in range(len(rope)) if rope.op(i).arithmetic.startswith("Q'[love,1]"))
    assert op.arithmetic == "Q'[love,1] = Q[love,0]·sin(1·θ₀) + Q[love,1]·cos(1·θ₀) = 0·0.841 + 2·0.540 = 1.081"
    gqa = Trace(compute(load_scenario("gqa")))
    targets = [(s.head, s.target) for s in gqa.segments if s.stage == "project"]
    assert targets == [(0, "Q"), (0, "K"), (0, "V"), (1, "Q"), (2, "Q"), (2, "K"), (2, "V"), (3, "Q")]
    norm = Trace(compute(load_scenario("pre_norm")))
    assert norm.op(3).arithmetic == "X̂[I,0] = X[I,0] / √(ms + eps)·γ[0] = 1 / √(0.500 + 1e-05)·1 = 1.414"


def _parted(hr: Any, name: str) -> Any:
    """A head's RoPE or ALiBi array by its old field name (None where the head has no such part)."""
    if name == "bias":
        return hr.read(Biased, lambda b: b.bias)
    return hr.read(Rotated, lambda r: getattr(r, name))
