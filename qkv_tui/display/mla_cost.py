"""The cost view's pages and lines of a scenario with [mla] (its ``cost_face``): why the latent is cached, and one
decode step expanded against absorbed (core/mla_cost.py's figures)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from qkv_tui.core.mla_cost import MlaDecode
from qkv_tui.core.scenario import Scenario
from qkv_tui.display.cost_view import num  # the view that loads this module on its first page of [mla]

if TYPE_CHECKING:
    from qkv_tui.display.side_view import Sources
    from qkv_tui.teach.cost import CostReport

PAGE = "mla"  # the page's name in the view's counter, after the flash page
MEANING = ("MLA at decode: the cache holds the latent c_KV. Expanded, each step multiplies every cached latent by W_UK"
           " and W_UV again; absorbed, W_UK folds into the query and W_UV into the output once per step, and the scores"
           " and the mix run on the latent itself (the Absorb stage).")


def cache_lines(sc: Scenario, r: CostReport) -> list[str]:
    """The cache page's word on the latent: how much smaller it is than the expanded K and V."""
    m = sc.mla
    assert m is not None
    full = m.num_heads * (m.d_qk + m.d_v)
    latent = m.cache_per_token()[0]
    return [f"why MLA: expanded, a layer would cache h·(d_nope + d_rope + d_v)·B = {m.num_heads}·"
            f"{m.d_qk + m.d_v}·{r.bytes_per_number} = {full * r.bytes_per_number} B a token;"
            f" the latent is (d_c + d_rope)·B = {latent}·{r.bytes_per_number} = {latent * r.bytes_per_number}"
            f" B: {full} / {latent} = {num(full / latent)} times smaller"]


def page(sources: Sources, r: CostReport) -> tuple[str, list[str]]:
    m = sources.comp.scenario.mla
    forms = r.forms
    assert m is not None and isinstance(forms, MlaDecode)
    keys, N = r.decode.A  # N, or the fewer keys a selection leaves each query (the indexer's top_k)
    rotary, width = m.rotary_width
    lines = [f"h = {m.num_heads}, d_c = {m.d_c}, d_nope = {m.d_nope}, {rotary} = {width}, d_v = {m.d_v}, {keys} = {N}",
             f"expanded: {forms.expanded.text()} FLOPs",
             f"absorbed: {forms.absorbed.text()} FLOPs"]
    e, a = forms.expanded.value, forms.absorbed.value
    lines.append(f"at {keys} = {N}: expanded / absorbed = {e} / {a} = {num(e / a)}")
    if forms.crossover:
        lines.append(f"crossover: absorbing costs no more from N = {forms.crossover} keys on (its two folds,"
                     f" 2·h·d_c·(d_nope + d_v) = {2 * m.num_heads * m.d_c * (m.d_nope + m.d_v)} FLOPs, are paid once a"
                     f" step; expanding pays 2·d_c·h·(d_nope + d_v) for every {'cached' if keys == 'N' else 'attended'}"
                     " token)")
    else:
        lines.append("crossover: none, expanding stays cheaper at every context for these sizes")
    return f"MLA at decode: expanded against absorbed, {keys} = {N}", lines
