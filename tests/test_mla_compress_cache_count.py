"""The Compress stage's words count the cache as the MLA cache view does (display/mla_cache.py, cache_line):
per token and per layer, multi-head attention's 2·n_h·d_h with d_h = d_nope as DeepSeek-V2's Table 1 counts
it, and not the dₖ = d_nope + d_rope the scale divides by. They read "2·num_heads·dₖ = 8" with dₖ = 2 while the
Scale stage divides by √4; the Markdown export carries the same words."""

from __future__ import annotations

import pytest

from qkv_tui import compute, load_scenario
from qkv_tui.edges.export_markdown import to_markdown
from qkv_tui.teach.trace import Trace


@pytest.mark.parametrize("name", ["mla", "mla_learns"])
def test_compress_counts_the_cache_per_token_and_layer_with_d_h(name: str) -> None:
    comp = compute(load_scenario(name))
    mla = comp.scenario.mla
    assert mla is not None
    cached, mha = mla.cache_per_token()
    assert mha == 2 * mla.num_heads * mla.d_nope and cached == mla.d_c + mla.d_rope
    d_k = mla.d_nope + mla.d_rope
    assert d_k != mla.d_nope  # the two widths differ here, so saying which one counts matters
    trace = Trace(comp)
    meaning = trace.meaning("compress", None)
    seg = trace.segment_for("c_KV_raw", None)
    assert seg is not None
    details = " ".join(trace.op(seg.start).details)
    markdown = to_markdown(comp, 3)
    for text in (meaning, details, markdown):
        assert "num_heads·dₖ" not in text
        assert "per token and per layer" in text.lower()
        assert f"d_c + d_rope = {mla.d_c} + {mla.d_rope} = {cached}" in text
        assert f"2·n_h·d_h = 2·{mla.num_heads}·{mla.d_nope} = {mha}" in text
        assert "DeepSeek-V2's Table 1" in text and "dₖ = d_nope + d_rope" in text
    assert f"d_nope = {mla.d_nope}" in meaning and f"dₖ = d_nope + d_rope = {d_k}" in meaning
    assert "d_h = d_nope" in details
    for text in (meaning, details):
        assert text in markdown or all(part in markdown for part in text.split("; "))
