"""The MLA cache view's count says which width it multiplies (d_h = d_nope, DeepSeek-V2 Table 1's
convention), that the counts are per token and per layer, and is not confused with the scale's
dₖ = d_nope + d_rope: it read "2·num_heads·dₖ = 8" with dₖ = 2 where the same screen divides by √4."""

from __future__ import annotations

from qkv_tui import compute, load_scenario
from qkv_tui.display.mla_cache import cache_line


def test_the_cache_line_names_its_widths() -> None:
    comp = compute(load_scenario("mla"))
    mla = comp.scenario.mla
    assert mla is not None and (mla.d_nope, mla.d_rope) == (2, 2)
    line = cache_line(comp)
    assert "2·num_heads·dₖ" not in line
    assert "per token and per layer d_c + d_rope = 2 + 2 = 4" in line
    assert "per token and per layer 2·n_h·d_h = 2·2·2 = 8" in line
    assert "DeepSeek-V2's Table 1" in line and "d_nope = 2" in line and "dₖ = d_nope + d_rope = 4" in line
