"""ALiBi as Press et al. define it: the paper code's default slopes, and a bias only over keys j ≤ i."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qkv_tui.core.cell_edit import EditError, InputCell, apply_edit
from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import ScenarioError, builtin_dir, load_scenario, parse_scenario
from qkv_tui.core.variants.alibi import default_slopes
from qkv_tui.kernels.alibi import Biased

from .conftest import BASE, HEAD
from .variants_cases import press_slopes


def test_default_slopes_for_three_heads_are_the_paper_codes() -> None:
    """Not 2^(−8(h+1)/3) = 0.157, 0.0248, 0.0039: the 2 slopes of 2 heads, then the first of 4 heads' odd ones."""
    assert default_slopes(3) == (0.0625, 0.00390625, 0.25)
    assert default_slopes(6) == (2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3)  # 4 heads' slopes, then 8 heads' 1st and 3rd
    assert all(math.isclose(a, 2 ** -(k + 0.5), rel_tol=1e-15) for k, a in enumerate(default_slopes(12)[8:]))  # 16 heads'


@pytest.mark.parametrize("count", range(1, 65))
def test_default_slopes_equal_the_paper_code_bit_for_bit(count: int) -> None:
    assert list(default_slopes(count)) == press_slopes(count)


@pytest.mark.parametrize("count", [1, 2, 4, 8, 16, 32, 64])
def test_powers_of_two_keep_the_papers_geometric_sequence(count: int) -> None:
    """For H a power of 2 the rule is unchanged: 2^(−8/H), 2^(−16/H), …, 2^(−8), exactly up to 8 heads
    (every slope a power of 2) and within float rounding beyond (the code multiplies, the formula raises)."""
    formula = [2.0 ** (-8.0 * (h + 1) / count) for h in range(count)]
    if count <= 8:
        assert list(default_slopes(count)) == formula
    assert all(math.isclose(a, b, rel_tol=1e-14) for a, b in zip(default_slopes(count), formula, strict=True))


def test_a_scenario_without_slopes_takes_the_default() -> None:
    text = BASE + 'mask = "causal"\n[alibi]\n' + HEAD * 3
    comp = compute(parse_scenario(text, "a.toml"))
    assert [h.need(Biased).slope for h in comp.heads] == [0.0625, 0.00390625, 0.25]
    bias = comp.heads[2].need(Biased).bias
    assert bias is not None and bias.tolist() == [[0.0, 0.25, 0.5], [-0.25, 0.0, 0.25], [-0.5, -0.25, 0.0]]


def test_without_a_causal_mask_the_shipped_alibi_is_refused() -> None:
    """The issue's example: with the mask removed, every row of the steep head read 0.186 | 0.307 | 0.506."""
    shipped = load_scenario("alibi")
    weights = compute(shipped).heads[0].weights
    assert weights[2, 2] > weights[2, 1] > weights[2, 0] and weights[1, 1] > weights[1, 0]  # nearer keys win
    text = (builtin_dir() / "alibi.toml").read_text(encoding="utf-8")
    assert 'mask = "causal"' in text
    with pytest.raises(ScenarioError, match=r"\[alibi\] needs a mask under which no query attends a later key"):
        parse_scenario(text.replace('mask = "causal"', 'mask = "none"'), "alibi.toml")


def test_the_app_refuses_to_open_a_later_key_under_alibi() -> None:
    sc = parse_scenario(BASE + 'mask = "causal"\n[alibi]\n' + HEAD, "a.toml")
    with pytest.raises(EditError, match="would attend a later key"):
        apply_edit(sc, InputCell("mask", None, 0, 2), "1")
    closed = apply_edit(sc, InputCell("mask", None, 2, 0), "0")  # closing an earlier key is fine
    assert not closed.allow[2, 0] and closed.mask_kind == "custom"
    assert np.array_equal(apply_edit(closed, InputCell("mask", None, 2, 0), "1").allow, sc.allow)
