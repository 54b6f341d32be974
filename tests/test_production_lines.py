"""Every arithmetic line of the tiled and cache views checks out on a calculator, at every precision."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv_tui import compute, load_scenario
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.screen.decode_view import decode_explanation
from qkv_tui.screen.tiled_view import tiled_explanation
from qkv_tui.teach.decode import SCHEDULES, decode
from qkv_tui.teach.tiled import tiled

from .arith_check import check, checked
from .conftest import SCENARIOS
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
@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
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


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_markdown_sections_check_out(path) -> None:
    from qkv_tui.edges.export_markdown import to_markdown

    page = to_markdown(compute(load_scenario(path)))
    start, end = page.index("## KV cache: prefill, decode and a paged cache"), page.index("## Notes")
    ours = page[start:end]
    assert "## FlashAttention: tiled online softmax" in ours and "✓ equal to the Mix stage within float64 rounding (every |diff| ≤ 1e-" in ours
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
