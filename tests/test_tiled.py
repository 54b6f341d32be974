"""FlashAttention's tiled online softmax: equal to plain attention, each rescale as the recurrence says."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv_tui import compute, load_scenario
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.display.tiled_view import op_lines
from qkv_tui.teach.tiled import PHASES, tiled
from qkv_tui.teach.trace import Trace

from .conftest import SOFTMAX_SCENARIOS
from .strategies import Case, cases


def online_softmax_by_loops(q: list[float], keys: list[list[float]], values: list[list[float]], allowed: list[bool],
                            divisor: float, tile: int) -> list[tuple[float, float, list[float]]]:
    """Milakov & Gimelshein's recurrence with plain floats: (m, ℓ, Õ) after each tile that has an allowed key."""
    m, ell, acc = -math.inf, 0.0, [0.0] * len(values[0])
    states = []
    for start in range(0, len(keys), tile):
        cols = [j for j in range(start, min(start + tile, len(keys))) if allowed[j]]
        if not cols:
            states.append((m, ell, list(acc)))
            continue
        s = {j: sum(a * b for a, b in zip(q, keys[j])) / divisor for j in cols}
        new = max(m, max(s.values()))
        alpha = math.exp(m - new) if m != -math.inf else 0.0
        ell = alpha * ell + sum(math.exp(s[j] - new) for j in cols)
        acc = [alpha * a + sum(math.exp(s[j] - new) * values[j][c] for j in cols) for c, a in enumerate(acc)]
        m = new
        states.append((m, ell, acc))
    return states


@settings(max_examples=60, deadline=None)
@given(cases(), st.data())
def test_tiled_equals_plain_attention_for_every_tile_size(case: Case, data: st.DataObject) -> None:
    comp = compute(parse_scenario(case.toml, "generated.toml"))
    sc = comp.scenario
    for h in range(len(comp.heads)):
        for tile in range(1, max(sc.n, sc.m) + 1):
            th = tiled(comp, h, tile)
            assert np.allclose(th.output, comp.heads[h].output, rtol=1e-9, atol=1e-9), (h, tile)
            assert th.matches
            # the walk block by block, with skipping, ends where the all-rows pass ends
            for qb in range(len(th.blocks)):
                _, end = th.block(qb)
                assert np.allclose(end.out, th.output[th.blocks[qb].start:th.blocks[qb].stop], rtol=1e-9, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(cases(), st.integers(1, 5))
def test_each_rescale_follows_the_recurrence(case: Case, tile: int) -> None:
    comp = compute(parse_scenario(case.toml, "generated.toml"))
    sc = comp.scenario
    for h, hr in enumerate(comp.heads):
        th = tiled(comp, h, tile)
        for qb, rows in enumerate(th.blocks):
            visits, end = th.block(qb)
            for r, i in enumerate(rows):
                want = online_softmax_by_loops(hr.Q[i].tolist(), hr.K.tolist(), hr.V.tolist(), sc.allow[i].tolist(),
                                               hr.scale, tile)
                for v in visits:
                    m, ell, acc = want[v.ktile]
                    assert v.m_new[r] == m or math.isclose(v.m_new[r], m, rel_tol=1e-12)
                    assert math.isclose(v.l_new[r], ell, rel_tol=1e-9, abs_tol=1e-12)
                    assert np.allclose(v.O_new[r], acc, rtol=1e-9, atol=1e-9)
                    # the rescale: α = e^(m_old − m_new) applied to the old ℓ and Õ, nothing else
                    if math.isfinite(v.m_old[r]):
                        assert math.isclose(v.alpha[r], math.exp(v.m_old[r] - v.m_new[r]), rel_tol=1e-12)
                        assert math.isclose(v.l_scaled[r], v.alpha[r] * v.l_old[r], rel_tol=1e-12, abs_tol=0)
                    else:
                        assert v.l_old[r] == 0 and not v.O_old[r].any()
                    assert v.alpha[r] <= 1.0
                m_final = want[-1][0]
                assert math.isclose(end.m[r], m_final, rel_tol=1e-12) or end.m[r] == m_final


def test_seed_numbers_tile_by_tile() -> None:
    th = tiled(compute(load_scenario("i_love_ai")), 0, 2)
    assert len(th) == 2 * (2 * 6 + 1)  # two query blocks, two tiles each, then O = Õ/ℓ
    first, second = th.block(0)[0]
    assert np.allclose(first.S[0], [1 / math.sqrt(3), 5 / math.sqrt(3)])
    assert first.m_old[0] == -math.inf and first.alpha[0] == 0.0  # nothing to rescale yet
    # AI's score 3/√3 = 1.732 is below the running max 2.887: α = 1, only ℓ and Õ grow
    assert second.alpha[0] == 1.0 and second.m_new[0] == first.m_new[0]
    assert np.allclose(th.block(0)[1].out[0], [1.0, 1.637, 0.070], atol=5e-4)  # the seed's out[I]
    assert [th.op(i).phase for i in range(13)] == [*PHASES, *PHASES, "normalise"]


def test_causal_tiles_above_the_diagonal_are_skipped() -> None:
    th = tiled(compute(load_scenario("causal_mask")), 0, 1)
    assert th.skipped == 3 and th.total_tiles == 9  # 1×1 tiles: the three cells above the diagonal
    assert len(th) == 6 * 6 + 3
    assert th.matches
    th2 = tiled(compute(load_scenario("causal_mask")), 0, 2)
    assert th2.needed.tolist() == [[True, False], [True, True]]
    assert th2.skipped_before(0, 1) == 1


def test_tile_size_is_a_scenario_setting(tmp_path) -> None:
    from .conftest import BASE, HEAD

    sc = parse_scenario(BASE + "[tiles]\nsize = 3\n" + HEAD, "t.toml")
    assert sc.production.tile == 3 and tiled(compute(sc), 0).tile == 3
    assert load_scenario("i_love_ai").production.tile == 2


def test_a_row_with_no_allowed_key_in_a_tile_says_so() -> None:
    text = ('tokens = ["t0", "t1", "t2", "t3"]\nX = [[1], [1], [1], [1]]\n'
            'mask = { kind = "custom", allow = [[1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 1], [0, 0, 0, 1]] }\n'
            "[[heads]]\nW_Q = [[1]]\nW_K = [[1]]\nW_V = [[2]]\n")
    comp = compute(parse_scenario(text, "c.toml"))
    th = tiled(comp, 0, 2)
    assert th.matches
    lines = [line for i in range(len(th)) for line in op_lines(th, th.op(i), 1)]
    assert "p = 0 for every key of this tile for t1: the mask allows t1 none of t0..t1" in lines
    assert "α[t1]: nothing to rescale, no key allowed to t1 so far" in lines
    assert not any("nan" in line or "− −∞" in line for line in lines)


P_LINE = re.compile(r"^p\[(?P<tok>.+?)\] = e\^\(S − m\) = e\^\((?P<S>\[.*?\]) − (?P<m>\S+)\) = e\^(?P<shift>\[.*?\])"
                    r" = (?P<p>\[.*?\])$")


def _items(text: str) -> list[str]:
    return text.strip("[]").split(", ")


@pytest.mark.parametrize("decimals", range(1, 9))
@pytest.mark.parametrize("path", SOFTMAX_SCENARIOS, ids=lambda p: p.stem)
def test_every_exponential_reads_as_the_trace_prints_it(path, decimals: int) -> None:
    # the same quantity, e^(s − max) of one cell, never reads differently on two screens: wherever the
    # running max is the row's max, the tiles view prints the trace's difference and exponential
    comp = compute(load_scenario(path))
    trace = Trace(comp)
    sc = comp.scenario
    same = 0
    for h in range(len(comp.heads)):
        th = tiled(comp, h)
        for i in range(len(th)):
            op = th.op(i)
            if op.phase != "exps":
                continue
            assert op.visit is not None
            # one p line (or "p = 0 for every key") per row of the block, in order
            per_row = [line for line in op_lines(th, op, decimals) if line.startswith("p")]
            for row, line in zip(op.end.rows, per_row):
                match = P_LINE.match(line)
                if match is None:
                    assert line.startswith("p = 0 for every key"), line
                    continue
                assert match["tok"] == sc.tokens[row]
                want = trace.softmax_row(h, row, decimals)
                if match["m"].strip("()") != want.top:
                    continue  # a running max below the row's: a number the trace never shows
                cols = list(op.visit.cols)
                assert _items(match["S"]) == [want.scaled[j] for j in cols], line
                assert _items(match["shift"]) == [want.shifted[j] for j in cols], line
                assert _items(match["p"]) == [want.exps[j] for j in cols], line
                same += 1
    assert same > 0


def test_the_old_exponential_is_gone() -> None:
    # the seed's AI row: e^(1.732 − 2.309) = e^-0.577, which a calculator gives as 0.562 (exactly, 0.5614)
    comp = compute(load_scenario("i_love_ai"))
    th = tiled(comp, 0, 2)
    lines = [line for i in range(len(th)) for line in op_lines(th, th.op(i), 3)]
    assert "p[AI] = e^(S − m) = e^([1.732] − 2.309) = e^[-0.577] = [0.562]" in lines
    assert "ℓ[AI] = ℓ + Σp = 1.315 + 0.562 = 1.877" in lines  # the trace's Σ = 1.877
    assert "O[AI] = Õ/ℓ = [1.877, 2.562, 0.315]/1.877 = [1.000, 1.365, 0.168]" in lines


def test_the_view_says_whose_algorithm_and_what_it_saves() -> None:
    from qkv_tui.display.tiled_view import MEANING
    from qkv_tui.teach.tiled import memory_line

    assert "one tile wide" not in MEANING["scores"]  # FlashAttention's extra memory is O(N), not one tile
    assert "FlashAttention's win is that traffic" in MEANING["scores"] and "O(N)" in MEANING["scores"]
    assert "One size B here stands for both B_r (query rows per block) and B_c (keys per tile)" in MEANING["scores"]
    assert ("FlashAttention-1 divided its O by ℓ after every tile" in MEANING["normalise"]
            and "keeps only L = m + log ℓ per row for the backward pass" in MEANING["normalise"])
    line = memory_line(16, 16, 4, 2)
    assert "one tile B_r×B_c = 4×4 = 16 on chip" in line and "L = m + log ℓ, 16 numbers (O(n)" in line


def test_values_near_the_largest_float_are_summed_scaled_and_say_so() -> None:
    # Õ = 1.5e308 + 1.5e308 overflowed; O = Õ/ℓ is 1.5e308, within float64
    import warnings

    from qkv_tui.display.tiled_view import tiled_explanation

    text = 'tokens = ["a", "b", "c"]\nX = [[1], [1], [1]]\n[[heads]]\nW_Q = [[1]]\nW_K = [[1]]\nW_V = [[1.5e308]]\n'
    comp = compute(parse_scenario(text, "big.toml"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for tile in (1, 2, 3):
            th = tiled(comp, 0, tile)
            assert th.shift == 3 and np.array_equal(th.output, comp.heads[0].output) and th.matches
            ex = tiled_explanation(th, len(th) - 1, 3)
            assert ex.details[-1].startswith("Õ sums V/8 (2^3)")
            assert "] = Õ/ℓ·8 = [" in ex.arithmetic and ex.arithmetic.endswith(" = [1.500e+308]")
