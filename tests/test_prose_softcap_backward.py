"""dScale's and dScore's words under a soft-cap give the formula that makes the numbers on screen (the issue:
"the gradient at the scaled scores is dS itself" stood before the cap, and dScore's dQ = dS·K / scale left
the cap's factor out). The formulas are checked here against the gradients, computed from the arrays."""

from __future__ import annotations

import math

import numpy as np

from qkv_tui.core.engine import compute
from qkv_tui.core.gradients import gradients
from qkv_tui.core.scenario import builtin_dir, parse_scenario
from qkv_tui.kernels.softcap import Capped
from qkv_tui.teach.trace import Trace

# softcap.toml's two heads (caps 5 and 50) with a dO, so the backward stages run
CAPPED = (builtin_dir() / "softcap.toml").read_text(encoding="utf-8") + """
[backward]
dO = [[1, 0, -1, 0.5, 0], [0, 1, 0, 0, -1], [0.5, 0, 0, 1, 0]]
"""


def test_under_a_cap_the_formulas_said_give_the_gradients() -> None:
    comp = compute(parse_scenario(CAPPED, "capped.toml"))
    trace = Trace(comp)
    g = gradients(comp)
    for h, hr in enumerate(comp.heads):
        c = hr.need(Capped).softcap
        assert c is not None
        scale_words, score_words = trace.meaning("dscale", h), trace.meaning("dscore", h)
        assert "the gradient at the capped scores is dS itself" in scale_words
        assert "the gradient at the scaled scores is dscaled = dS·(1 − tanh(s/c)·tanh(s/c))" in scale_words
        assert "scaled scores is dS itself" not in scale_words
        assert "dscores = dscaled / scale" in scale_words and "|s| ≪ c" in scale_words
        assert "dQ = dscaled·K / scale, where dscaled = dS ⊙ (1 − tanh²(scaled / c))" in score_words
        assert "dQ = dS·K / scale" not in score_words
        ab = g.heads[h].attend
        t = np.tanh(hr.scaled / c)  # (n, m)
        dscaled = ab.dS * (1 - t * t)
        assert np.allclose(ab.dscaled, dscaled)
        assert np.allclose(ab.dQ_used, dscaled @ hr.K_used / hr.scale)  # what dScore's words say
        assert not np.allclose(ab.dQ_used, ab.dS @ hr.K_used / hr.scale)  # the cap's factor matters here


def test_without_a_cap_dscore_keeps_ds_k_over_scale() -> None:
    text = CAPPED.replace('softcap = 5.0 ', '# ').replace('softcap = 50.0 ', '# ')
    comp = compute(parse_scenario(text, "uncapped.toml"))
    assert all(hr.part(Capped) is None for hr in comp.heads)
    trace = Trace(comp)
    assert "dQ = dS·K / scale" in trace.meaning("dscore", 0)
    assert "at the scaled scores is dS itself" in trace.meaning("dscale", 0)
    ab = gradients(comp).heads[0].attend
    assert np.allclose(ab.dQ_used, ab.dS @ comp.heads[0].K_used / comp.heads[0].scale)
    assert math.isfinite(float(ab.dQ_used.sum()))
