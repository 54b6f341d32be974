"""Partial rotary and RoPE scaling (linear, llama3, YaRN): the frequencies against transformers' own
initialisers, the rotation against transformers' partial application (Phi-3/NeoX's rotate_half, GPT-J's
rotate_every_two) and a loop written here, and every place the scenario reaches: the Rotate stage's lines
(the calculator rule, pass-through included), errors, JSON, TOML, hand rounding and decoding."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv_tui import compute, load_scenario
from qkv_tui.core.scenario import ScenarioError, parse_scenario
from qkv_tui.display.view import View
from qkv_tui.edges.export_json import to_json
from qkv_tui.edges.export_markdown import to_markdown
from qkv_tui.edges.export_toml import to_toml
from qkv_tui.kernels.rope import Rotated
from qkv_tui.kernels.rope_scaling import inv_freq, rotated_dims
from qkv_tui.teach.decode import SCHEDULES, decode
from qkv_tui.teach.handcalc import compute_hand
from qkv_tui.teach.stepper import Position
from qkv_tui.teach.trace import Trace

from .test_calculator import assert_holds, check_text

SCALINGS = {
    "linear": {"type": "linear", "factor": 4.0},
    # wavelengths 6.3, 20, 63, 199 … against 32/4 = 8 and 32/1 = 32: every band is met
    "llama3": {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 32},
    "yarn": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8},
    "yarn_given": {"type": "yarn", "factor": 16.0, "original_max_position_embeddings": 64, "beta_fast": 8.0,
                   "beta_slow": 2.0, "attention_factor": 1.25, "truncate": False},
}


def _toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return json.dumps(v)


def scenario_text(d_k: int = 8, layout: str = "half", partial: float | None = 0.5, scaling: dict | None = None,
                  positions: tuple[int, ...] = (0, 5, 40), base: float = 100.0, mask: str | None = None) -> str:
    rng = np.random.default_rng(d_k * 7 + len(positions))
    n = len(positions)
    X = rng.integers(-2, 3, size=(n, 4)).tolist()
    W_Q, W_K = rng.integers(-2, 3, size=(4, d_k)).tolist(), rng.integers(-2, 3, size=(4, d_k)).tolist()
    W_V = rng.integers(-2, 3, size=(4, 3)).tolist()
    lines = [f"tokens = {json.dumps([f't{i}' for i in range(n)])}", f"X = {X}"]
    if mask:
        lines.append(f'mask = "{mask}"')
    lines += ["[rope]", f'layout = "{layout}"', f"base = {base}", f"positions = {list(positions)}"]
    if partial is not None:
        lines.append(f"partial = {partial}")
    if scaling is not None:
        lines.append("[rope.scaling]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in scaling.items()]
    lines += ["[[heads]]", f"W_Q = {W_Q}", f"W_K = {W_K}", f"W_V = {W_V}"]
    return "\n".join(lines) + "\n"


def comp_of(text: str):  # type: ignore[no-untyped-def]
    return compute(parse_scenario(text, "rope_x.toml"))


# --- the frequencies against transformers' own initialisers ----------------------------------------


def _transformers_inv_freq(head_dim: int, base: float, partial: float, fields: dict) -> tuple[np.ndarray, float]:
    pytest.importorskip("torch")
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    params = {"rope_type": fields["type"], "rope_theta": base, "partial_rotary_factor": partial,
              **{k: v for k, v in fields.items() if k != "type"}}
    config = LlamaConfig(hidden_size=4 * head_dim, num_attention_heads=4, head_dim=head_dim, rope_parameters=params,
                         max_position_embeddings=4096)
    freq, factor = ROPE_INIT_FUNCTIONS[fields["type"]](config, "cpu")
    return freq.double().numpy(), float(factor)


@pytest.mark.parametrize("partial", [1.0, 0.5, 0.25])
@pytest.mark.parametrize("head_dim", [8, 16, 64])
@pytest.mark.parametrize("name", list(SCALINGS))
def test_inv_freq_is_transformers(name: str, head_dim: int, partial: float) -> None:
    fields = SCALINGS[name]
    want, want_factor = _transformers_inv_freq(head_dim, 10000.0, partial, fields)
    got, factor = inv_freq(fields["type"], 10000.0, head_dim, partial_rotary_factor=partial,
                           **{k: v for k, v in fields.items() if k != "type"})
    assert got.shape == want.shape == (rotated_dims(head_dim, partial) // 2,)
    assert np.allclose(got, want, rtol=2e-6, atol=0)  # transformers computes in float32
    assert factor == pytest.approx(want_factor, rel=1e-12)


def test_yarn_default_attention_factor_and_scores_carry_it_squared() -> None:
    comp = comp_of(scenario_text(4, "interleaved", None, SCALINGS["yarn"], positions=(3, 3, 3)))
    a = 0.1 * math.log(4.0) + 1
    assert comp.scenario.rope is not None and comp.scenario.rope.attention_factor == pytest.approx(a)
    plain = comp_of(scenario_text(4, "interleaved", None, None, positions=(3, 3, 3)))
    # all at one position: the turn cancels in every score, so only a² is left
    assert np.allclose(comp.heads[0].scores, a * a * plain.heads[0].scores)


def test_the_importer_entry_point_takes_huggingface_fields() -> None:
    freq, factor = inv_freq("default", 10000.0, 8)
    assert np.allclose(freq, [1.0, 0.1, 0.01, 0.001]) and factor == 1.0
    freq, _ = inv_freq("linear", 10000.0, 8, factor=2.0, partial_rotary_factor=0.5)
    assert np.allclose(freq, [0.5, 0.005])
    with pytest.raises(ValueError):
        inv_freq("dynamic", 10000.0, 8, factor=2.0)


@pytest.mark.parametrize("scaling", [None, *SCALINGS])
def test_turn_scaled_is_the_engines_rotation(scaling: str | None) -> None:
    """What an importer turns earlier layers with: the same numbers as the Rotate stage's."""
    from qkv_tui.kernels.rope_scaling import turn_scaled

    positions = (0, 5, 40)
    fields = SCALINGS.get(scaling or "")
    comp = comp_of(scenario_text(8, "half", 0.5, fields, positions))
    thetas, a = inv_freq(fields["type"] if fields else "default", 100.0, 8, partial_rotary_factor=0.5,
                         **{k: v for k, v in (fields or {}).items() if k != "type"})
    got = turn_scaled(comp.heads[0].Q, "half", thetas, a, np.array(positions, dtype=float))
    assert np.array_equal(got, comp.heads[0].need(Rotated).Q_rot)


# --- the rotation against transformers' partial application and a loop ------------------------------


def loop_rotate(M: np.ndarray, layout: str, thetas: list[float], positions: tuple[int, ...], a: float) -> np.ndarray:
    """Written apart from the kernels: pairs within the first r = 2·len(thetas) dims, the rest copied."""
    out = M.astype(float).copy()
    half = len(thetas)
    for row in range(M.shape[0]):
        for i in range(half):
            x, y = (2 * i, 2 * i + 1) if layout == "interleaved" else (i, i + half)
            c, s = math.cos(positions[row] * thetas[i]) * a, math.sin(positions[row] * thetas[i]) * a
            out[row, x] = M[row, x] * c - M[row, y] * s
            out[row, y] = M[row, x] * s + M[row, y] * c
    return out


@pytest.mark.parametrize("scaling", [None, *SCALINGS])
def test_partial_half_layout_is_phi3s_apply_rotary_pos_emb(scaling: str | None) -> None:
    torch = pytest.importorskip("torch")
    from transformers.models.phi3.modeling_phi3 import apply_rotary_pos_emb

    positions = (0, 5, 40)
    comp = comp_of(scenario_text(8, "half", 0.5, SCALINGS.get(scaling or ""), positions))
    rope, head = comp.scenario.rope, comp.heads[0]
    assert rope is not None and head.part(Rotated) is not None and head.part(Rotated) is not None
    freqs = np.outer(positions, rope.inv_freq(8))  # (n, r/2), as the rotary embedding's forward
    emb = np.concatenate([freqs, freqs], axis=-1)  # (n, r)
    cos = torch.tensor(np.cos(emb) * rope.attention_factor)[None]
    sin = torch.tensor(np.sin(emb) * rope.attention_factor)[None]
    q = torch.tensor(head.Q)[None, None]
    k = torch.tensor(head.K)[None, None]
    q_embed, k_embed = apply_rotary_pos_emb(q, k, cos, sin)
    assert np.allclose(q_embed[0, 0].numpy(), head.need(Rotated).Q_rot, rtol=1e-12, atol=1e-12)
    assert np.allclose(k_embed[0, 0].numpy(), head.need(Rotated).K_rot, rtol=1e-12, atol=1e-12)
    assert np.array_equal(head.need(Rotated).Q_rot[:, 4:], head.Q[:, 4:])  # the unrotated half is passed through exactly


def test_partial_interleaved_layout_is_gptjs_rotary_dim() -> None:
    torch = pytest.importorskip("torch")
    from transformers.models.gptj.modeling_gptj import apply_rotary_pos_emb

    positions = (0, 5, 40)
    comp = comp_of(scenario_text(8, "interleaved", 0.5, None, positions))
    rope, head = comp.scenario.rope, comp.heads[0]
    assert rope is not None and head.part(Rotated) is not None
    freqs = np.outer(positions, rope.inv_freq(8))  # (n, r/2)
    q = torch.tensor(head.Q)[None, :, None, :]  # (batch, seq, heads, d_k), as GPT-J holds it
    rotary_dim = 4
    q_rot = apply_rotary_pos_emb(q[..., :rotary_dim], torch.tensor(np.sin(freqs))[None], torch.tensor(np.cos(freqs))[None])
    got = torch.cat([q_rot, q[..., rotary_dim:]], dim=-1)[0, :, 0].numpy()
    assert np.allclose(got, head.need(Rotated).Q_rot, rtol=1e-12, atol=1e-12)


@st.composite
def rope_cases(draw: st.DrawFn) -> tuple[str, int, str, float | None, str | None, tuple[int, ...]]:
    d_k = draw(st.sampled_from([2, 4, 6, 8]))
    rs = [r for r in range(2, d_k + 1, 2)]
    r = draw(st.sampled_from(rs))
    partial = None if r == d_k and draw(st.booleans()) else (r + 0.5) / d_k if r < d_k else 1.0
    layout = draw(st.sampled_from(["interleaved", "half"]))
    scaling = draw(st.sampled_from([None, *SCALINGS]))
    n = draw(st.integers(1, 4))
    positions = tuple(draw(st.lists(st.integers(0, 200), min_size=n, max_size=n)))
    text = scenario_text(d_k, layout, partial, SCALINGS.get(scaling or ""), positions)
    return text, d_k, layout, partial, scaling, positions


@settings(max_examples=60, deadline=None)
@given(rope_cases())
def test_rotation_is_a_loop(case: tuple[str, int, str, float | None, str | None, tuple[int, ...]]) -> None:
    text, d_k, layout, partial, scaling, positions = case
    comp = comp_of(text)
    rope, head = comp.scenario.rope, comp.heads[0]
    assert rope is not None and head.part(Rotated) is not None and head.part(Rotated) is not None
    r = int(d_k * (partial or 1.0))
    assert rope.rotated(d_k) == r
    fields = SCALINGS.get(scaling or "")
    thetas, a = inv_freq(fields["type"] if fields else "default", 100.0, d_k, partial_rotary_factor=partial or 1.0,
                         **{k: v for k, v in (fields or {}).items() if k != "type"})
    assert np.allclose(loop_rotate(head.Q, layout, list(thetas), positions, a), head.need(Rotated).Q_rot, rtol=1e-9, atol=1e-9)
    assert np.allclose(loop_rotate(head.K, layout, list(thetas), positions, a), head.need(Rotated).K_rot, rtol=1e-9, atol=1e-9)
    # a rotation keeps each pair's length, times the attention factor
    norms = np.linalg.norm(head.need(Rotated).Q_rot[:, :r], axis=1)
    assert np.allclose(norms, a * np.linalg.norm(head.Q[:, :r], axis=1))


# --- the Rotate stage's lines ------------------------------------------------------------------------


def rotate_text(comp, decimals: int) -> str:  # type: ignore[no-untyped-def]
    view = View(Trace(comp))
    lines = []
    for i in range(len(view.trace)):
        seg = view.trace.segment_at(i)
        if seg.stage == "rotate":
            ex = view.explain(Position(i, seg.head or 0), decimals)
            lines += [ex.arithmetic, *ex.details]
    return "\n".join(lines)


@pytest.mark.parametrize("decimals", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("scaling", [None, *SCALINGS])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_every_rotate_line_checks_out(layout: str, scaling: str | None, decimals: int) -> None:
    comp = comp_of(scenario_text(8, layout, 0.5, SCALINGS.get(scaling or "")))
    text = rotate_text(comp, decimals)
    assert_holds(check_text(text))
    assert_holds(check_text(rotate_text(compute_hand(comp, decimals), decimals), whole=False))
    assert_holds(check_text(to_markdown(comp, decimals)))
    assert "Q'[t1,4] = Q[t1,4] = " in text and "(not rotated: partial 0.5)" in text
    if scaling is not None:
        assert "→ θ'₀ = " in text and f"{SCALINGS[scaling]['type']} scaling" in text
    if scaling in ("yarn", "yarn_given"):
        assert "\ncos·a = " in text and " | sin·a = " in text and "·a·cos(" in text


def test_pass_through_reads_its_one_operand() -> None:
    comp = load_and_compute("partial_rope")
    trace = Trace(comp)
    ops = [trace.op(i, 3) for i in range(len(trace)) if trace.segment_at(i).stage == "rotate"]
    passed = [op for op in ops if op.col is not None and op.col >= 2]
    assert passed and all(len(op.operands) == 1 and op.operands[0].col == op.col for op in passed)
    assert [op.arithmetic for op in passed[:2]] == ["Q'[I,2] = Q[I,2] = 1.000 (not rotated: partial 0.5)",
                                                   "Q'[I,3] = Q[I,3] = 0.000 (not rotated: partial 0.5)"]
    assert [trace.col_label("Q_rot", c) for c in range(4)] == ["0p0", "1p0", "2=", "3="]


def test_llama3_shows_each_band() -> None:
    comp = comp_of(scenario_text(8, "half", None, SCALINGS["llama3"]))
    text = rotate_text(comp, 3)
    assert "high frequency, kept" in text and "low frequency, divided" in text and "blended with w = " in text


def load_and_compute(name: str):  # type: ignore[no-untyped-def]
    return compute(load_scenario(name))


# --- errors --------------------------------------------------------------------------------------------

BASE = 'tokens = ["I", "love", "AI"]\nX = [[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]]\n'
HEAD4 = ("[[heads]]\nW_Q = [[1, 0, 1, 0], [0, 1, 0, 0], [1, 0, 0, 0], [0, 1, 1, 0]]\n"
         "W_K = [[0, 0, 1, 0], [1, 1, 0, 0], [0, 1, 0, 0], [1, 0, 1, 0]]\nW_V = [[1, 0], [0, 1], [1, 1], [0, 0]]\n")
ROPE = '[rope]\nlayout = "half"\n'
YARN = ROPE + '[rope.scaling]\ntype = "yarn"\nfactor = 2\noriginal_max_position_embeddings = 8\n'
LINEAR = ROPE + '[rope.scaling]\ntype = "linear"\n'

ERRORS = {
    "partial_zero": (ROPE + "partial = 0\n", "[rope] partial = 0; expected a share of d_k with 0 < partial ≤ 1"),
    "partial_above_one": (ROPE + "partial = 1.5\n", "[rope] partial = 1.5; expected a share of d_k with 0 < partial ≤ 1"),
    "partial_odd": (ROPE + "partial = 0.75\n", "[rope] partial = 0.75 turns r = int(0.75·4) = 3 of d_k = 4 dimensions;"
                    " expected a share whose r is even and at least 2 (dimensions turn in pairs), e.g. partial = 0.5 (r = 2)"),
    "partial_too_small": (ROPE + "partial = 0.25\n", "[rope] partial = 0.25 turns r = int(0.25·4) = 1 of d_k = 4"),
    "partial_string": (ROPE + 'partial = "half"\n', "[rope] partial must be a number, got a string"),
    "scaling_no_type": (ROPE + "[rope.scaling]\nfactor = 2\n", "[rope.scaling] is missing 'type'; expected type = \"linear\""),
    "scaling_unknown_type": (ROPE + '[rope.scaling]\ntype = "dynamic"\nfactor = 2\n',
                             "[rope.scaling] type = 'dynamic' is not allowed; expected one of: 'linear', 'llama3', 'yarn'"),
    "scaling_misspelt_type": (ROPE + '[rope.scaling]\ntype = "llama"\nfactor = 2\n', "did you mean 'llama3'?"),
    "scaling_missing_factor": (ROPE + '[rope.scaling]\ntype = "linear"\n',
                               "[rope.scaling] type = \"linear\" is missing 'factor'; expected factor"),
    "llama3_missing_field": (ROPE + '[rope.scaling]\ntype = "llama3"\nfactor = 8\nlow_freq_factor = 1\n'
                             "original_max_position_embeddings = 16\n",
                             "[rope.scaling] type = \"llama3\" is missing 'high_freq_factor'; expected factor,"
                             " low_freq_factor, high_freq_factor, original_max_position_embeddings"),
    "yarn_missing_context": (ROPE + '[rope.scaling]\ntype = "yarn"\nfactor = 8\n',
                             "[rope.scaling] type = \"yarn\" is missing 'original_max_position_embeddings'"),
    "field_of_another_type": (ROPE + '[rope.scaling]\ntype = "linear"\nfactor = 2\nbeta_fast = 16\n',
                              "[rope.scaling] beta_fast is not used by type = \"linear\" (it takes factor);"
                              " remove it, or use type = \"yarn\""),
    "unknown_field": (YARN + "beta_fats = 3\n",
                      "unknown key 'beta_fats' in [rope.scaling]; did you mean 'beta_fast'?"),
    "factor_zero": (LINEAR + "factor = 0\n", "[rope.scaling] factor = 0; expected a finite number > 0"),
    "factor_negative": (LINEAR + "factor = -2\n", "[rope.scaling] factor = -2; expected a finite number > 0"),
    "factor_bool": (LINEAR + "factor = true\n", "[rope.scaling] factor must be a number, got a boolean"),
    "llama3_bands_reversed": (ROPE + '[rope.scaling]\ntype = "llama3"\nfactor = 8\nlow_freq_factor = 4\nhigh_freq_factor = 1\n'
                              "original_max_position_embeddings = 16\n",
                              "[rope.scaling] high_freq_factor = 1 must be larger than low_freq_factor = 4"),
    "truncate_not_bool": (YARN + "truncate = 1\n",
                          "[rope.scaling] truncate must be true or false, got a number"),
    "scaling_not_table": (ROPE + 'scaling = "linear"\n', "[rope] scaling must be a table ([rope.scaling]), got a string"),
    "factor_in_rope": (ROPE + "factor = 8\n", "unknown key 'factor' in [rope]; did you mean 'scaling'? (factor is a field of"
                       " [rope.scaling]: write it under that header)"),
}


@pytest.mark.parametrize("name", list(ERRORS))
def test_errors_are_one_line(name: str) -> None:
    rope, message = ERRORS[name]
    with pytest.raises(ScenarioError) as info:
        parse_scenario(BASE + rope + HEAD4, "bad.toml")
    text = str(info.value)
    assert "\n" not in text and message in text, text


def test_partial_needs_one_d_k() -> None:
    narrow = HEAD4.replace("[[heads]]", '[[heads]]\nname = "narrow"').replace("[1, 0, 1, 0]", "[1, 0]") \
        .replace("[0, 1, 0, 0]", "[0, 1]").replace("[1, 0, 0, 0]", "[1, 0]").replace("[0, 1, 1, 0]", "[0, 1]") \
        .replace("[0, 0, 1, 0]", "[0, 0]").replace("[1, 1, 0, 0]", "[1, 1]").replace("[1, 0, 1, 0]", "[1, 0]")
    with pytest.raises(ScenarioError, match="needs every head to have the same d_k"):
        parse_scenario(BASE + ROPE + "partial = 0.5\n" + HEAD4 + narrow, "bad.toml")


# --- JSON, TOML, --check ---------------------------------------------------------------------------------


def test_json_rope_is_last_and_holds_the_scaled_frequencies() -> None:
    doc = json.loads(to_json(load_and_compute("rope_scaling")))
    assert list(doc)[-11:-9] == ["b_O", "rope"]  # then grad, train, mla, linear, deltanet and the later parts
    assert doc["rope"] == {"inv_freq": [1.0, 0.0025], "attention_factor": pytest.approx(0.1 * math.log(4) + 1),
                           "rotated_dims": 4}
    doc = json.loads(to_json(load_and_compute("partial_rope")))
    assert doc["rope"] == {"inv_freq": [1.0], "attention_factor": 1.0, "rotated_dims": 2}
    for plain in ("rope", "i_love_ai"):  # null without partial rotary or scaling
        assert json.loads(to_json(load_and_compute(plain)))["rope"] is None


@pytest.mark.parametrize("scaling", [None, *SCALINGS])
def test_toml_round_trip(scaling: str | None) -> None:
    comp = comp_of(scenario_text(8, "half", 0.5, SCALINGS.get(scaling or "")))
    again = comp_of(to_toml(comp.scenario))
    assert again.scenario.rope == comp.scenario.rope
    assert np.array_equal(again.heads[0].need(Rotated).Q_rot, comp.heads[0].need(Rotated).Q_rot)
    assert np.array_equal(again.output, comp.output)


def test_check_summary_names_partial_and_scaling() -> None:
    from qkv_tui.core.variants import summary_parts

    assert "rope interleaved partial 0.5" in summary_parts(load_scenario("partial_rope"))
    assert "rope interleaved yarn ×4" in summary_parts(load_scenario("rope_scaling"))


# --- hand rounding, decoding, editing ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["partial_rope", "rope_scaling"])
@pytest.mark.parametrize("decimals", [2, 3, 4])
def test_hand_rounding_turns_the_same_dims(name: str, decimals: int) -> None:
    comp = load_and_compute(name)
    hand = compute_hand(comp, decimals)
    exact, by_hand = comp.heads[0], hand.heads[0]
    assert by_hand.part(Rotated) is not None and exact.part(Rotated) is not None
    rope = comp.scenario.rope
    assert rope is not None
    r = rope.rotated(exact.d_k)
    assert np.array_equal(by_hand.need(Rotated).Q_rot[:, r:], by_hand.Q[:, r:])
    assert np.allclose(by_hand.need(Rotated).Q_rot, exact.need(Rotated).Q_rot, atol=8 * 10.0 ** -decimals)
    # by hand, a·cos is written down from the rounded cos and the rounded a
    if rope.attention_factor != 1.0:
        text = rotate_text(hand, decimals)
        assert f"·{round(rope.attention_factor, decimals):.{decimals}f} = " in text


@pytest.mark.parametrize("name", ["partial_rope", "rope_scaling"])
def test_decode_and_tiles_agree(name: str) -> None:
    from dataclasses import replace

    from qkv_tui.teach.tiled import tiled

    sc = load_scenario(name)
    sc = replace(sc, mask_kind="causal", allow=np.tril(np.ones((sc.n, sc.n), dtype=bool)))
    comp = compute(sc)
    for mode in SCHEDULES:
        for h, steps in enumerate(decode(comp, mode).steps):
            assert np.allclose(np.concatenate([s.output for s in steps]), comp.heads[h].output, rtol=1e-12, atol=1e-12)
    assert all(tiled(comp, 0, tile).matches for tile in (1, 2, 3))


def test_an_edit_keeps_partial_and_scaling_and_saves_only_the_number() -> None:
    from qkv_tui.core.cell_edit import edit, parse_address, save_text
    from qkv_tui.core.scenario import builtin_dir

    comp = load_and_compute("rope_scaling")
    cell, value = parse_address(comp.scenario, "X[I,0] = 2")
    assert cell is not None
    edited, again = edit(comp.scenario, cell, value)
    assert edited.rope == comp.scenario.rope
    assert not np.array_equal(again.heads[0].need(Rotated).Q_rot, comp.heads[0].need(Rotated).Q_rot)
    original = (builtin_dir() / "rope_scaling.toml").read_text(encoding="utf-8")
    saved = save_text(original, edited, [cell])
    assert "[rope.scaling]" in saved and parse_scenario(saved, "s.toml").rope == comp.scenario.rope
