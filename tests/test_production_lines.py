"""Every arithmetic line of the tiled and cache views checks out on a calculator, at every precision."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv_tui import compute, load_scenario
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.display.decode_view import decode_explanation
from qkv_tui.display.tiled_view import tiled_explanation
from qkv_tui.teach.decode import SCHEDULES, decode
from qkv_tui.teach.tiled import tiled

from .arith_check import check, checked
from .conftest import SCENARIOS, SOFTMAX_SCENARIOS
from .strategies import Case, cases


def tiled_lines(comp, decimals: int, tile: int | None = None) -> list[str]:
    lines = []
    for h in range(len(comp.heads)):
        th = tiled(comp, h, tile)
        for i in range(len(th)):
            ex = tiled_explanation(th, i, decimals)
            lines += [ex.arithmetic, *ex.details]
    return lines


def decode_lines(comp, decimals: int) -> list[str]:
    lines = []
    for mode in SCHEDULES:
        dec = decode(comp, mode)
        for h in range(len(comp.heads)):
            for i in range(dec.count):
                ex = decode_explanation(dec, i, h, decimals)
                lines += [ex.arithmetic, *ex.details]
    return lines


def test_the_checker_can_fail() -> None:
    assert check("p[I] = e^(S − m) = e^([0.577, 2.887] − 2.887) = [0.099, 1.000]")
    assert check("p[I] = e^(S − m) = e^([0.577, 2.887] − 2.887) = [0.101, 1.000]") is False
    assert check("ℓ[I] = ℓ + Σp = 0 + 0.099 + 1 = 1.101") is False
    assert check("weights[a] = softmax([0, 0]) = [0.500, 0.501]") is True  # within one unit
    assert check("weights[a] = softmax([0, 0]) = [0.500, 0.502]") is False
    assert check("O[I] = Õ/ℓ = [3, 3, 1]/3 = [1.000, 1.000, 0.335]") is False


@pytest.mark.parametrize("decimals", range(1, 9))
@pytest.mark.parametrize("path", SOFTMAX_SCENARIOS, ids=lambda p: p.stem)
def test_every_line_checks_out(path, decimals: int) -> None:
    comp = compute(load_scenario(path))
    lines = tiled_lines(comp, decimals) + decode_lines(comp, decimals)
    count, bad = checked(lines)
    assert not bad, "\n".join(bad[:10])
    assert count > 20


@settings(max_examples=40, deadline=None)
@given(cases(), st.integers(1, 8), st.integers(1, 4))
def test_generated_lines_check_out(case: Case, decimals: int, tile: int) -> None:
    comp = compute(parse_scenario(case.toml, "generated.toml"))
    count, bad = checked(tiled_lines(comp, decimals, tile) + decode_lines(comp, decimals))
    assert not bad, "\n".join(bad[:10])
    assert count > 0


@pytest.mark.parametrize("path", SOFTMAX_SCENARIOS, ids=lambda p: p.stem)
def test_markdown_sections_check_out(path) -> None:
    from qkv_tui.edges.export_markdown import to_markdown

    page = to_markdown(compute(load_scenario(path)))
    start, end = page.index("## KV cache: prefill, decode and a paged cache"), page.index("## Notes")
    ours = page[start:end]
    assert "## FlashAttention: tiled online softmax" in ours
    assert "✓ equal to the Mix stage within float64 rounding (every |diff| ≤ 1e-" in ours
    assert "block_table = [" in ours and "paging changes nothing: ✓" in ours
    count, bad = checked(ours.splitlines())
    assert not bad, "\n".join(bad[:10])
    assert count > 10


def test_markdown_sixteen_tokens_summarises_long_runs() -> None:
    from qkv_tui.edges.export_production import production_sections

    lines = production_sections(compute(load_scenario("sixteen_tokens")), 3)
    text = "\n".join(lines)
    assert "- tiles skipped (the mask forbids every cell): 6 of 16" in text
    assert "Chunked prefill in chunks of 4 (4 + 4 + 2 tokens, then decode): ✓" in text
    assert len(lines) < 250


# --- checks that do not move with the order of a sum, and hold for extreme valid inputs ------------------


def _ulps(values: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Each entry moved by up to k units in its last place, as another CPU's summation order may move it."""
    out = np.array(values, dtype=float)
    for _ in range(k):
        step = rng.choice([-np.inf, np.inf], size=out.shape)
        out = np.where(rng.random(out.shape) < 0.5, np.nextafter(out, step), out)
    return out


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_checks_read_the_same_when_results_move_by_a_few_ulps(path) -> None:
    # on an AMD machine the chunked sixteen_tokens step printed "max |diff| 4.4e-16" where ours print 0.0e+00
    from dataclasses import replace

    rng = np.random.default_rng(7)
    comp = compute(load_scenario(path))
    for mode in SCHEDULES:
        dec = decode(comp, mode)
        for h in range(len(comp.heads)):
            for i in range(dec.count):
                step = dec.steps[h][i]
                moved = replace(step, output=_ulps(step.output, 4, rng), reference=_ulps(step.reference, 4, rng),
                                paged_output=_ulps(step.paged_output, 4, rng))
                assert moved.check == step.check and moved.paged_check == step.paged_check
                assert step.check[0] and step.paged_check[0]
    for h in range(len(comp.heads)):
        th = tiled(comp, h)
        assert th.check(out=_ulps(th.output, 4, rng)) == th.check()
        for qb, rows in enumerate(th.blocks):
            end = th.block(qb)[1]
            assert th.check(rows, _ulps(end.out, 4, rng)) == th.check(rows, end.out)


def test_a_real_difference_is_still_caught() -> None:
    from dataclasses import replace

    comp = compute(load_scenario("i_love_ai"))
    step = decode(comp, "prefill").steps[0][1]
    wrong = replace(step, output=step.output + 1e-6)
    ok, text = wrong.check
    assert not ok and text.startswith("max |diff| 1.0e-06, beyond float64 rounding (≤ 1e-")
    th = tiled(comp, 0)
    assert not th.check(out=th.output + 1e-9)[0]


def test_cancelling_values_are_equal_within_rounding() -> None:
    # V = [1e10, −1e10, 0] with equal weights: 0 exactly, 1.3e-7 from a fused multiply-add. The old fixed
    # tolerance of 1e-12 printed "✗ DIFFERENT"; the rounding bound for values of 1e10 is about 1e-5.
    text = ('tokens = ["a", "b", "c"]\nX = [[1, 1e10], [1, -1e10], [1, 0]]\n'
            "[[heads]]\nW_Q = [[1, 0], [0, 0]]\nW_K = [[1, 0], [0, 0]]\nW_V = [[0], [1]]\n")
    comp = compute(parse_scenario(text, "cancel.toml"))
    for tile in (1, 2, 3):
        assert tiled(comp, 0, tile).matches
    for mode in SCHEDULES:
        assert all(s.matches for s in decode(comp, mode).steps[0])


@st.composite
def extreme_cases(draw: st.DrawFn) -> str:
    """Valid scenarios whose numbers reach towards float64's ends: scores up to 1e302, Values up to 8e307.

    X holds -1, 0 and 1; the weights carry the magnitudes, each matrix at its own power of ten.
    """
    n = draw(st.integers(1, 4))
    d_model, d_k, d_v = draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(1, 2))

    def weights(rows: int, cols: int, low: int, high: int) -> str:
        e = draw(st.one_of(st.sampled_from([low, high, high - 1]), st.integers(low, high)))  # the ends too
        cells = [[draw(st.sampled_from([0.0, 1.0, -1.0, 2.5, -4.0, 3.1])) * 10.0**e for _ in range(cols)]
                 for _ in range(rows)]
        return "[" + ", ".join("[" + ", ".join(repr(v) for v in row) + "]" for row in cells) + "]"

    X = [[draw(st.sampled_from([-1, 0, 1])) for _ in range(d_model)] for _ in range(n)]
    mask = draw(st.sampled_from(["", 'mask = "causal"\n']))
    return (f"tokens = {[f't{i}' for i in range(n)]!r}\n".replace("'", '"') + f"X = {X!r}\n" + mask
            + "[[heads]]\n" + f"W_Q = {weights(d_model, d_k, -150, 150)}\n"
            + f"W_K = {weights(d_model, d_k, -150, 150)}\n" + f"W_V = {weights(d_model, d_v, -300, 307)}\n")


@settings(max_examples=60, deadline=None)
@given(extreme_cases(), st.integers(1, 4), st.integers(1, 8))
def test_extreme_valid_inputs_check_out_without_overflow(text: str, tile: int, decimals: int) -> None:
    import warnings

    from qkv_tui.core.scenario import ScenarioError

    try:
        comp = compute(parse_scenario(text, "extreme.toml"))
    except ScenarioError:  # a draw the engine refuses (a product past float64): not a valid input
        return
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an overflow in the views is a RuntimeWarning: now an error
        th = tiled(comp, 0, tile)
        lines = tiled_lines(comp, decimals, tile)
        assert th.matches, th.check()
        assert any(line.startswith("✓ equal to the Mix stage within float64 rounding") for line in lines)
        assert not any("✗" in line or "nan" in line or "∞ −" in line for line in lines)
        for mode in SCHEDULES:
            dec = decode(comp, mode)
            for i in range(dec.count):
                ex = decode_explanation(dec, i, 0, decimals)
                check = next(line for line in ex.details if "paging changes nothing" in line)
                assert check.startswith("✓ equal to") and "paging changes nothing: ✓" in check, check
