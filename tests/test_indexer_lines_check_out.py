"""Every line the Index and Select stages show re-computes from the numbers it shows (tests/test_calculator.py's
checker), exactly and by hand, beyond the built-in: the index turned by position (both layouts), the index key
LayerNorm-ed, X normalised first, several heads sharing K/V heads, and W_q reading [mla]'s query latent."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from qkv_tui import compute
from qkv_tui.core.indexer_part import Selection
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.display.view import View
from qkv_tui.edges.export_markdown import to_markdown
from qkv_tui.teach.handcalc import compute_hand
from qkv_tui.teach.trace import Trace

from .test_calculator import assert_holds, check_text, explanation_text

DSA = (Path(__file__).resolve().parents[1] / "scenarios" / "dsa.toml").read_text(encoding="utf-8")
RNG = np.random.default_rng(31)


def _rows(M: np.ndarray) -> str:
    return "[" + ", ".join("[" + ", ".join(repr(float(v)) for v in row) + "]" for row in M) + "]"


def _turned(layout: str) -> str:
    """The built-in with [norm], [rope], GQA heads, and an indexer whose 2 first dims turn and whose key is
    LayerNorm-ed: decimals everywhere."""
    X = RNG.normal(size=(4, 4)).round(2)
    text = re.sub(r"(?ms)^X = \[.*?^\]", f"X = {_rows(X)}", DSA)
    text = re.sub(r"(?ms)^\[\[heads\]\].*?(?=^\[indexer\])", "", text)
    text = text.replace("rope_dims = 0", "rope_dims = 2").replace('rope_layout = "half"', f'rope_layout = "{layout}"')
    text = text.replace("k_norm = false", "k_norm = { gamma = [1.5, 0.5], beta = [0.25, -0.5], eps = 1e-6 }")
    wq, wk, wv = (RNG.normal(size=(4, 6)).round(1) for _ in range(3))
    return text + f"""
[norm]
kind = "rms"

[rope]
layout = "half"
base = 100.0

[attention]
num_heads = 3
num_kv_heads = 1
W_Q = {_rows(wq)}
W_K = {_rows(wk[:, :2])}
W_V = {_rows(wv[:, :2])}
"""


def _latent() -> str:
    """[mla] with W_DQ: the indexer's W_q reads c_Q (d_cq = 3 rows), as the models do."""
    text = re.sub(r"(?ms)^\[\[heads\]\].*?(?=^\[indexer\])", "", DSA)
    text = re.sub(r"(?ms)^W_q = \[.*?^\]", f"W_q = {_rows(RNG.normal(size=(3, 4)).round(1))}", text)
    m = lambda r, c: _rows(RNG.normal(size=(r, c)).round(1))
    return text + f"""
[mla]
num_heads = 2
d_nope = 2
d_rope = 2
d_v = 2
W_DKV = {m(4, 2)}
W_KR = {m(4, 2)}
W_UK = {m(2, 4)}
W_UV = {m(2, 4)}
W_DQ = {m(4, 3)}
W_UQ = {m(3, 8)}
q_norm = true

[rope]
layout = "interleaved"
"""


CASES = {"turned half": _turned("half"), "turned interleaved": _turned("interleaved"), "latent": _latent()}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("decimals", [2, 3, 5])
def test_every_line_checks_out_exactly(name: str, decimals: int) -> None:
    comp = compute(parse_scenario(CASES[name], f"{name}.toml"))
    assert comp.heads[0].part(Selection) is not None
    assert_holds(check_text(to_markdown(comp, decimals)))
    assert_holds(check_text(explanation_text(View(Trace(comp)), decimals)))


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("decimals", [1, 2, 3, 4])
def test_every_line_checks_out_by_hand(name: str, decimals: int) -> None:
    comp = compute_hand(compute(parse_scenario(CASES[name], f"{name}.toml")), decimals)
    assert_holds(check_text(explanation_text(View(Trace(comp)), decimals), whole=False))
    # by hand the selection is made from the scores as written down, and every head attends it
    sel = comp.heads[0].need(Selection)
    for hr in comp.heads:
        assert np.all(hr.weights[~sel.mask] == 0.0)


def test_the_latent_case_names_c_q_as_what_w_q_reads() -> None:
    trace = Trace(compute(parse_scenario(CASES["latent"], "latent.toml")))
    assert "q_I = c_Q·W_q" in trace.meaning("index", None)
    turned = Trace(compute(parse_scenario(CASES["turned half"], "turned.toml")))
    meaning = turned.meaning("index", None)
    assert "LayerNorm-ed (k_norm" in meaning and "first 2 dimensions turned by position (half pairs)" in meaning
