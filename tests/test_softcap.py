"""Soft-capped logits (docs/scenario-format.md, "softcap"): scaled ← c·tanh(scaled / c) before the bias and the mask.

Checked against a loop reference that shares nothing with the engine, against PyTorch's tanh written as
Gemma 2's eager attention writes it, on every displayed line with a calculator, and through every view
and export: hand rounding, decode, tiles, JSON, TOML, Markdown and the worksheet.
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv_tui import compute, load_scenario
from qkv_tui.core.cell_edit import InputCell, edit, input_cells, save_text
from qkv_tui.core.engine import Computation
from qkv_tui.core.scenario import builtin_dir, parse_scenario
from qkv_tui.display.decode_view import decode_explanation
from qkv_tui.display.tiled_view import tiled_explanation
from qkv_tui.display.view import View
from qkv_tui.edges.export_json import write_json
from qkv_tui.edges.export_markdown import to_markdown
from qkv_tui.edges.export_toml import to_toml
from qkv_tui.edges.worksheet.make import to_worksheet
from qkv_tui.kernels.alibi import Biased
from qkv_tui.kernels.sinks import Sunk
from qkv_tui.kernels.softcap import Capped
from qkv_tui.teach.decode import SCHEDULES, decode
from qkv_tui.teach.handcalc import compute_hand, round_to
from qkv_tui.teach.tiled import tiled
from qkv_tui.teach.trace import Trace

from .arith_check import checked
from .conftest import BASE, HEAD
from .error_table import assert_one_error_line
from .test_calculator import Report, assert_holds, check_line, check_text, explanation_text
from .variants_cases import ModernCase, modern_cases, reference

CAPS = st.sampled_from([0.5, 1.0, 2.0, 3.5, 5.0, 50.0])


@dataclass
class CappedCase:
    case: ModernCase
    toml: str
    caps: list[float | None]  # each query head's cap


@st.composite
def capped_cases(draw: st.DrawFn) -> CappedCase:
    """A scenario combining every variant, with a soft-cap at the top level, per head, or in [attention]."""
    case = draw(modern_cases())
    top = draw(st.one_of(st.none(), CAPS))
    lines = case.toml.splitlines()
    caps: list[float | None] = [top] * len(case.heads)
    if "[attention]" in lines:
        if top is None or draw(st.booleans()):  # [attention]'s own cap, over any top-level one
            own = draw(CAPS)
            lines.insert(lines.index("[attention]") + 1, f"softcap = {own!r}")
            caps = [own] * len(case.heads)
    else:
        for h in range(len(case.heads)):
            if draw(st.booleans()) or (top is None and h == 0):
                own = draw(CAPS)
                lines.insert(lines.index(f'name = "h{h}"') + 1, f"softcap = {own!r}")
                caps[h] = own
    text = "\n".join(([f"softcap = {top!r}"] if top is not None else []) + lines) + "\n"
    return CappedCase(case, text, caps)


def _comp(cc: CappedCase) -> Computation:
    return compute(parse_scenario(cc.toml, "capped.toml"))


def _loop_reference(cc: CappedCase) -> list[dict[str, Any]]:
    """capped = c·tanh(s/c) with math.tanh, then the bias, the mask, the softmax (with its sink) and V, by loops."""
    ref = reference(cc.case)
    out = []
    for h, head in enumerate(ref["heads"]):
        cap = cc.caps[h]
        sink = cc.case.heads[h]["sink"]
        scaled = head["scaled"]
        capped = [[s if cap is None else cap * math.tanh(s / cap) for s in row] for row in scaled]
        weights = []
        for i, row in enumerate(capped):
            logits = [x + (head["bias"][i][j] if head["bias"] is not None else 0.0) for j, x in enumerate(row)]
            kept = [x for j, x in enumerate(logits) if cc.case.allow[i][j]] + ([sink] if sink is not None else [])
            top = max(kept)
            e = [math.exp(x - top) if cc.case.allow[i][j] else 0.0 for j, x in enumerate(logits)]
            total = sum(e) + (math.exp(sink - top) if sink is not None else 0.0)
            weights.append([x / total for x in e])
        V = head["V"]
        output = [[sum(w[j] * V[j][c] for j in range(len(w))) for c in range(len(V[0]))] for w in weights]
        out.append({"capped": capped, "weights": weights, "output": output})
    return out


# --- the engine ---------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(capped_cases())
def test_engine_agrees_with_an_independent_loop(cc: CappedCase) -> None:
    comp = _comp(cc)
    for hr, want, cap in zip(comp.heads, _loop_reference(cc), cc.caps):
        assert hr.read(Capped, lambda c: c.softcap) == cap
        if cap is None:
            assert hr.part(Capped) is None
            continue
        assert hr.part(Capped) is not None
        assert np.allclose(hr.need(Capped).capped, want["capped"], rtol=1e-12, atol=1e-12)
        assert np.all(np.abs(hr.need(Capped).capped) <= cap)  # never past ±c
        assert np.allclose(hr.weights, want["weights"], rtol=1e-9, atol=1e-12)
        assert np.allclose(hr.output, want["output"], rtol=1e-9, atol=1e-9)
        logits = hr.need(Capped).capped + (hr.need(Biased).bias if hr.part(Biased) is not None else 0.0)
        assert np.array_equal(hr.masked, np.where(comp.allow, logits, -np.inf))  # capped + bias, −∞ where masked


torch = pytest.importorskip("torch", reason="PyTorch is in the test extra (pip install -e '.[test]')")


def _gemma2_eager(q: Any, k: Any, scale: float, cap: float, bias: Any, allow: Any, sink: float | None) -> Any:
    """Hugging Face's Gemma 2 eager attention: (q·kᵀ)·scaling, then /softcap, tanh, ·softcap, then the mask."""
    logits = (q @ k.T) * (1.0 / scale)
    logits = torch.tanh(logits / cap) * cap
    if bias is not None:
        logits = logits + bias
    logits = logits.masked_fill(~allow, float("-inf"))
    if sink is not None:  # as gpt-oss: one more column, dropped after the softmax
        logits = torch.cat([logits, torch.full((logits.shape[0], 1), sink, dtype=logits.dtype)], dim=1)
        return torch.softmax(logits, dim=-1)[:, :-1]
    return torch.softmax(logits, dim=-1)


@settings(max_examples=40, deadline=None)
@given(capped_cases())
def test_json_export_agrees_with_torch_tanh(cc: CappedCase) -> None:
    comp = _comp(cc)
    out = io.StringIO()
    write_json(comp.scenario, out)
    data = json.loads(out.getvalue())
    allow = torch.tensor(comp.allow)
    for h, head in enumerate(data["heads"]):
        cap = cc.caps[h]
        if cap is None:
            assert head["capped"] is None
            continue
        scaled = torch.tensor(head["scaled"], dtype=torch.float64)
        assert np.allclose(head["capped"], (torch.tanh(scaled / cap) * cap).numpy(), rtol=1e-12, atol=1e-12)
        q = torch.tensor(head["Q_rot"] if head["Q_rot"] is not None else head["Q"], dtype=torch.float64)
        kv = comp.heads[h]
        k = torch.tensor(kv.K_used, dtype=torch.float64)
        bias = None if head["bias"] is None else torch.tensor(head["bias"], dtype=torch.float64)
        weights = _gemma2_eager(q, k, head["scale"], cap, bias, allow, kv.read(Sunk, lambda s: s.sink))
        assert np.allclose(head["weights"], weights.numpy(), rtol=1e-9, atol=1e-12)


def test_json_field_sits_after_the_qk_norm_fields_and_is_null_without_a_cap() -> None:
    out = io.StringIO()
    write_json(load_scenario("softcap"), out)
    data = json.loads(out.getvalue())
    keys = list(data["heads"][0])
    assert keys[keys.index("b_V") + 1:keys.index("b_V") + 4] == ["Q_norm", "K_norm", "capped"]  # the agreed order
    assert data["heads"][0]["capped"][0][1] == pytest.approx(5 * math.tanh(10 / math.sqrt(3) / 5), abs=1e-12)
    assert data["heads"][0]["scaled"][0][1] == pytest.approx(10 / math.sqrt(3), abs=1e-12)  # scores / scale, uncapped
    plain = io.StringIO()
    write_json(load_scenario("i_love_ai"), plain)
    assert json.loads(plain.getvalue())["heads"][0]["capped"] is None


def test_the_builtin_caps_the_sharp_head_and_barely_moves_the_seed() -> None:
    comp = compute(load_scenario("softcap"))
    sharp, seed = comp.heads
    assert (sharp.need(Capped).softcap, seed.need(Capped).softcap) == (5.0, 50.0)  # the head's own cap over the top level's
    assert sharp.part(Capped) is not None and seed.part(Capped) is not None
    assert round(float(sharp.need(Capped).capped[0, 1]), 3) == 4.097 and round(float(sharp.weights[0, 1]), 3) == 0.722
    assert round(float(seed.need(Capped).capped[0, 1]), 3) == 2.884 and round(float(seed.weights[0, 1]), 3) == 0.706


# --- the rules ------------------------------------------------------------------------------------

SPLIT = '[attention]\nnum_heads = 1\nW_Q = [[1, 0, 1], [0, 1, 0], [1, 0, 0], [0, 1, 1]]\n' \
        'W_K = [[0, 0, 1], [1, 1, 0], [0, 1, 0], [1, 0, 1]]\nW_V = [[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0]]\n'
ERRORS = {
    "zero": (BASE + "softcap = 0\n" + HEAD, "softcap = 0; expected a finite number > 0 (the cap c in c·tanh(s/c))"),
    "negative": (BASE + "softcap = -50.0\n" + HEAD, "softcap = -50.0; expected a finite number > 0"),
    "inf": (BASE + "softcap = inf\n" + HEAD, "softcap = inf; expected a finite number > 0"),
    "nan": (BASE + "softcap = nan\n" + HEAD, "softcap = nan; expected a finite number > 0"),
    "string": (BASE + 'softcap = "50"\n' + HEAD, "softcap must be a number > 0 (the cap c in c·tanh(s/c)), got a string"),
    "bool": (BASE + "softcap = true\n" + HEAD, "softcap must be a number > 0 (the cap c in c·tanh(s/c)), got a boolean"),
    "huge": (BASE + "softcap = 1" + "0" * 400 + "\n" + HEAD,
             "softcap is an integer of about 401 digits, too large; expected a finite number > 0"),
    "head": (BASE + HEAD + "softcap = 0.0\n", "[[heads]] #1 softcap = 0.0; expected a finite number > 0"),
    "head_list": (BASE + HEAD + "softcap = [50]\n", "[[heads]] #1 softcap must be a number > 0"),
    "attention": (BASE + SPLIT + "softcap = -1\n", "[attention] softcap = -1; expected a finite number > 0"),
    "typo": (BASE + "soft_cap = 50\n" + HEAD, "unknown key 'soft_cap'; did you mean 'softcap'?"),
    "in_mask": (BASE + '[mask]\nkind = "none"\nsoftcap = 50\n' + HEAD, "key 'softcap' is not allowed in [mask]"),
    "scale_from_alone": (BASE + 'scale_from = "1/attention_multiplier"\n' + HEAD,
                         "scale_from needs scale beside it: it says where the scenario's scale comes from"),
    "scale_from_number": (BASE + "scale = 16\nscale_from = 256\n" + HEAD, "scale_from must be a string, got a number (256)"),
    "scale_from_empty": (BASE + 'scale = 16\nscale_from = " "\n' + HEAD, "scale_from is empty; expected a short text"),
    "scale_from_long": (BASE + f'scale = 16\nscale_from = "{"x" * 81}"\n' + HEAD,
                        "scale_from has 81 characters; expected a short text of at most 80"),
    "scale_from_newline": (BASE + 'scale = 16\nscale_from = "a\\nb"\n' + HEAD, "scale_from contains a new line"),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_check_reports_one_clean_line(case: str, cli, write) -> None:
    assert_one_error_line(cli, write, *ERRORS[case])


def test_check_summary_names_the_caps_and_the_scale_origin(cli, write) -> None:
    run = cli("--check", "softcap")
    assert run.code == 0 and "softcap 5/50" in run.out, run.out
    path = write(BASE + 'scale = 16\nscale_from = "√query_pre_attn_scalar = √256 (Gemma 2)"\nsoftcap = 50\n' + HEAD)
    run = cli("--check", str(path))
    assert run.code == 0, run.err
    assert "scale 16, softcap 50, scale from √query_pre_attn_scalar = √256 (Gemma 2)" in run.out


def test_a_huge_scaled_score_is_capped_not_refused() -> None:
    # 1e300 / 1 is finite: tanh of it is 1, so the logit is exactly c and the softmax has nothing to overflow
    sc = parse_scenario(BASE + "scale = 1\nsoftcap = 30\n" + HEAD.replace("W_Q = [[1, 0, 1]", "W_Q = [[1e300, 0, 1]"),
                        "huge.toml")
    hr = compute(sc).heads[0]
    assert hr.part(Capped) is not None and float(hr.need(Capped).capped.max()) == 30.0


# --- the calculator rule --------------------------------------------------------------------------


def _capped_lines(comp: Computation, decimals: int) -> list[str]:
    trace = Trace(comp)
    return [line for i in range(len(trace)) if trace.op(i).segment.target == "capped"
            for line in (trace.op(i, decimals).arithmetic,)]


@pytest.mark.parametrize("line", [
    "capped[I,love] = 50·tanh(1.414/50) = 50·tanh(0.02828) = 1.414",
    "capped[I,love] = 5·tanh(5.774/5) = 5·tanh(1.155) = 4.097",
    "capped[a,b] = 5·tanh(2.309/5) + 0.25·(1 − 2) = 5·tanh(0.4618) + (-0.250) = 2.158 + (-0.250) = 1.908",
])
def test_the_checker_reads_tanh(line: str) -> None:
    report = Report()
    check_line(line, report)
    assert not report.failures and "tanh" in report.kinds


@pytest.mark.parametrize("line", [
    "capped[I,love] = 50·tanh(1.414/50) = 50·tanh(0.028) = 1.414",  # s/c without the digits its factor needs
    "capped[I,love] = 5·tanh(5.774/5) = 5·tanh(1.155) = 4.099",
])
def test_the_checker_rejects_false_tanh_lines(line: str) -> None:
    report = Report()
    check_line(line, report)
    assert report.failures


@pytest.mark.parametrize("decimals", range(1, 9))
def test_every_soft_cap_line_of_the_builtin_checks_out(decimals: int) -> None:
    comp = compute(load_scenario("softcap"))
    lines = _capped_lines(comp, decimals)
    assert len(lines) == 18
    report = check_text("\n".join(lines))
    assert_holds(report)
    assert "tanh" in report.kinds
    hand = compute_hand(comp, decimals)
    assert_holds(check_text("\n".join(_capped_lines(hand, decimals)), whole=False))


@settings(max_examples=40, deadline=None)
@given(capped_cases(), st.integers(1, 8), st.booleans())
def test_generated_soft_cap_explanations_check_out(cc: CappedCase, decimals: int, hand: bool) -> None:
    comp = _comp(cc)
    if hand:
        comp = compute_hand(comp, decimals)
    assert_holds(check_text(explanation_text(View(Trace(comp)), decimals), whole=not hand))


@settings(max_examples=25, deadline=None)
@given(capped_cases(), st.integers(1, 8))
def test_generated_markdown_checks_out(cc: CappedCase, decimals: int) -> None:
    assert_holds(check_text(to_markdown(_comp(cc), decimals)))


def test_the_cell_shows_its_real_arithmetic() -> None:
    trace = Trace(compute(load_scenario("softcap")))
    texts = {trace.op(i).arithmetic for i in range(len(trace))}
    assert "capped[I,love] = 5·tanh(5.774/5) = 5·tanh(1.155) = 4.097" in texts
    assert "capped[I,love] = 50·tanh(2.887/50) = 50·tanh(0.05774) = 2.884" in texts
    assert "scaled[I,love] = 10 / √3 = 5.774" in texts  # the division is its own operation, before the cap


def test_with_alibi_and_a_mask_the_bias_and_mask_come_after_the_cap(write) -> None:
    text = BASE + 'softcap = 2\nmask = "causal"\n[alibi]\nslopes = [0.25]\n' + HEAD
    trace = Trace(compute(load_scenario(write(text))))
    ops = [trace.op(i) for i in range(len(trace)) if trace.op(i).segment.stage == "scale"]
    scaled = [op for op in ops if op.segment.target == "scaled"]
    capped = [op for op in ops if op.segment.target == "capped"]
    assert all("masked" not in op.arithmetic and "+" not in op.arithmetic for op in scaled)
    assert capped[3].arithmetic == ("capped[love,I] = 2·tanh(1.732/2) + 0.25·(0 − 1) = 2·tanh(0.866) + (-0.250)"
                                    " = 1.399 + (-0.250) = 1.149")
    # 1.042 + (-0.500) would give 0.542, not the exact 0.541: the line takes a guard digit
    assert capped[6].arithmetic == ("capped[AI,I] = 2·tanh(1.1547/2) + 0.25·(0 − 2) = 2·tanh(0.5774) + (-0.5000)"
                                    " = 1.0415 + (-0.5000) = 0.541")
    assert capped[1].arithmetic.endswith(", masked → −∞")
    assert_holds(check_text("\n".join(op.arithmetic for op in capped)))


# --- hand rounding, decode, tiles ----------------------------------------------------------------


@pytest.mark.parametrize("decimals", [1, 2, 3, 5])
def test_by_hand_the_cap_is_written_down_rounded_from_the_rounded_scaled_score(decimals: int) -> None:
    hand = compute_hand(compute(load_scenario("softcap")), decimals)
    for hr in hand.heads:
        assert hr.part(Capped) is not None and hr.part(Capped) is not None
        want = round_to(hr.need(Capped).softcap * np.tanh(hr.scaled / hr.need(Capped).softcap), decimals)
        assert np.array_equal(hr.need(Capped).capped, want)
        assert np.array_equal(hr.masked, hr.need(Capped).capped)  # no bias, no mask: the softmax reads the capped table


@settings(max_examples=30, deadline=None)
@given(capped_cases())
def test_decode_and_tiles_agree_with_the_trace(cc: CappedCase) -> None:
    comp = _comp(cc)
    dec = decode(comp, "tokens")
    for h, hr in enumerate(comp.heads):
        assert np.allclose(dec.reference[h], np.concatenate([s.output for s in dec.steps[h]]), rtol=1e-9, atol=1e-9)
        if dec.own_mask:  # the cache keeps the scenario's mask: decoding gives the Mix stage's numbers
            assert np.allclose(np.concatenate([s.output for s in dec.steps[h]]), hr.output, rtol=1e-9, atol=1e-9)
        assert np.allclose(tiled(comp, h, 2).output, hr.output, rtol=1e-9, atol=1e-9)


def test_decode_and_tiles_lines_check_out() -> None:
    comp = compute(parse_scenario(_causal_softcap(), "c.toml"))
    for decimals in (1, 3, 6):
        lines = []
        for h in range(len(comp.heads)):
            th = tiled(comp, h)
            lines += [line for i in range(len(th)) for line in (tiled_explanation(th, i, decimals).arithmetic,)]
            for mode in SCHEDULES:
                dec = decode(comp, mode)
                for i in range(dec.count):
                    ex = decode_explanation(dec, i, h, decimals)
                    lines += [ex.arithmetic, *ex.details]
        count, bad = checked(lines)
        assert not bad, "\n".join(bad[:5])
        assert any("tanh" in line for line in lines) and count > 20
        assert all(np.allclose(s.output, comp.heads[s.head].output[s.start:s.stop])
                   for h in range(len(comp.heads)) for s in decode(comp).steps[h])


def _causal_softcap() -> str:
    return (builtin_dir() / "softcap.toml").read_text(encoding="utf-8").replace(
        'softcap = 50.0    #', 'mask = "causal"\nsoftcap = 50.0    #', 1)


# --- write-back: TOML, edits, the worksheet ------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(capped_cases())
def test_toml_round_trip_keeps_every_cap(cc: CappedCase) -> None:
    comp = _comp(cc)
    again = compute(parse_scenario(to_toml(comp.scenario), "again.toml"))
    assert [h.read(Capped, lambda c: c.softcap) for h in again.heads] == cc.caps
    for a, b in zip(comp.heads, again.heads):
        assert (a.part(Capped) is None) == (b.part(Capped) is None)
        assert a.part(Capped) is None or np.array_equal(a.need(Capped).capped, b.need(Capped).capped)
        assert np.array_equal(a.weights, b.weights)


def test_toml_writes_one_cap_at_the_top_and_the_others_per_head() -> None:
    text = to_toml(load_scenario("softcap"))
    assert text.count("softcap = ") == 2  # the heads differ: each [[heads]] table holds its own
    same = to_toml(parse_scenario(BASE + "softcap = 50.0\n" + HEAD + HEAD, "same.toml"))
    assert same.count("softcap = 50") == 1 and same.index("softcap") < same.index("[[heads]]")
    split = to_toml(parse_scenario(BASE + SPLIT + "softcap = 7.5\n", "split.toml"))
    assert split.index("softcap = 7.5") > split.index("[attention]")
    origin = to_toml(parse_scenario(BASE + 'scale = 16\nscale_from = "1/attention_multiplier"\n' + HEAD, "o.toml"))
    assert 'scale_from = "1/attention_multiplier"' in origin
    assert parse_scenario(origin, "o2.toml").scale_from == "1/attention_multiplier"


def test_editing_a_cap_recomputes_and_saves_it() -> None:
    sc = load_scenario("softcap")
    cell = InputCell("softcap", 0)
    assert cell in input_cells(sc) and InputCell("softcap", 1) in input_cells(sc)
    edited, comp = edit(sc, cell, "2")
    assert comp.heads[0].need(Capped).softcap == 2.0 and comp.heads[1].need(Capped).softcap == 50.0
    assert comp.heads[0].part(Capped) is not None and float(comp.heads[0].need(Capped).capped.max()) < 2
    with open(builtin_dir() / "softcap.toml", encoding="utf-8") as f:
        saved = save_text(f.read(), edited, [cell])
    again = parse_scenario(saved, "saved.toml")
    assert [h.softcap for h in again.heads] == [2.0, 50.0]
    with pytest.raises(Exception, match="expected a number > 0"):
        edit(sc, cell, "0")


def test_editing_an_inherited_cap_gives_that_head_its_own() -> None:
    sc = load_scenario("softcap")
    edited, _ = edit(sc, InputCell("softcap", 1), "20")
    with open(builtin_dir() / "softcap.toml", encoding="utf-8") as f:
        saved = save_text(f.read(), edited, [InputCell("softcap", 1)])
    again = parse_scenario(saved, "saved.toml")
    assert [h.softcap for h in again.heads] == [5.0, 20.0]


def test_worksheet_works_the_capped_table_from_the_printed_scaled_one() -> None:
    comp = compute(load_scenario("softcap"))
    page = to_worksheet(comp, "100%")
    assert "capped = 5·tanh(scaled / 5)" in page and "weights = softmax(capped)" in page
    assert "capped[I,love] = 5·tanh(scaled[I,love] / 5) = 5·tanh(5.774/5) = 5·tanh(1.155) = 4.097" in page


# --- the importers ------------------------------------------------------------------------------


def test_an_importers_layer_caps_its_earlier_attention_as_the_engine_does() -> None:
    from qkv_tui.importers.stack import Attention, Layer, Norm, attention_forward

    rng = np.random.default_rng(7)
    d, n = 4, 3
    att = Attention(rng.normal(size=(d, 4)) * 3, rng.normal(size=(d, 4)) * 3, rng.normal(size=(d, 4)),
                    np.eye(4), None, None, None, None, num_heads=2, num_kv_heads=2)
    norm = Norm("rms", np.ones(d), None, 1e-6)
    x = rng.normal(size=(n, d))
    capped = Layer(norm, att, norm, lambda v: v, None, None, softcap=2.0)
    plain = Layer(norm, att, norm, lambda v: v, None, None)
    got = attention_forward(capped, None, x)
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    want = []
    for h in range(2):
        q, k, v = x @ att.W_Q[:, 2 * h:2 * h + 2], x @ att.W_K[:, 2 * h:2 * h + 2], x @ att.W_V[:, 2 * h:2 * h + 2]
        logits = np.where(i >= j, 2.0 * np.tanh(q @ k.T / math.sqrt(2) / 2.0), -np.inf)
        w = np.exp(logits - logits.max(axis=1, keepdims=True))
        want.append((w / w.sum(axis=1, keepdims=True)) @ v)
    assert np.allclose(got, np.concatenate(want, axis=1), rtol=1e-12, atol=1e-12)
    assert not np.allclose(got, attention_forward(plain, None, x))


# --- where the scale comes from -----------------------------------------------------------------


def test_the_scale_stage_quotes_where_the_scale_comes_from() -> None:
    origin = "1/attention_multiplier = 1/0.015625 (Granite)"
    comp = compute(parse_scenario(BASE + f'scale = 64\nscale_from = "{origin}"\n' + HEAD, "granite.toml"))
    trace = Trace(comp)
    assert f"Divide every score by 64, the scale this scenario sets ({origin})." in trace.meaning("scale", 0)
    op = next(trace.op(i) for i in range(len(trace)) if trace.op(i).segment.stage == "scale")
    assert f"the scenario sets scale = 64 ({origin}) instead of √dₖ = √3" in op.details
    assert f"Divide by 64 (set by the scenario: {origin})." in to_markdown(comp, 3)
    plain = Trace(compute(parse_scenario(BASE + "scale = 64\n" + HEAD, "plain.toml")))
    assert "Divide every score by 64, the scale this scenario sets. " in plain.meaning("scale", 0)


def test_a_scale_of_1_says_where_it_comes_from_too() -> None:
    text = BASE + 'scale = 1\nscale_from = "1 (Gemma 4: QK-norm keeps the scores small)"\n' + HEAD
    meaning = Trace(compute(parse_scenario(text, "gemma4.toml"))).meaning("scale", 0)
    assert meaning.startswith("Divide every score by 1, the scale this scenario sets (1 (Gemma 4: QK-norm keeps the"
                              " scores small)) (the scores pass through undivided).")


def test_the_quiz_asks_a_capped_cell_from_its_scaled_score() -> None:
    from qkv_tui.teach.quiz import withheld

    trace = Trace(compute(load_scenario("softcap")))
    index = next(i for i in range(len(trace)) if trace.op(i).arithmetic.startswith("capped[I,love]"))
    assert withheld(trace, index, 3) == "capped[I,love] = 5·tanh(5.774/5) = ?"
