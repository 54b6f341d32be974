"""[differential]'s backward stages (teach/stages/differential_backward.py): the trace walks d(1 − λ_init) … dRotate in
place of dMix … dRotate, every cell's value is the gradient core/gradients.py gives (itself checked against
torch.autograd in tests/test_differential_scenario_grads_torch.py), and every arithmetic line checks out on the
calculator, exact and by hand, with and without RoPE, a soft-cap, the sub-norm's gains and shared K/V heads."""

from __future__ import annotations

import numpy as np
import pytest

from qkv_tui import compute, load_scenario
from qkv_tui.core.gradients import gradients
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.display.view import View
from qkv_tui.edges.export_markdown import to_markdown
from qkv_tui.teach.handcalc import compute_hand
from qkv_tui.teach.trace import Trace

from .test_calculator import assert_holds, check_text, explanation_text
from .test_differential_builtin import BUILTIN

TARGET = "\n[backward]\ntarget = [[0, 0, 0, 0, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0, 0, 0], [0, 0, 0, 1, 0, 0, 0, 0]]\nsteps = 3\n"
ROPE = '\n[rope]\nlayout = "half"\nbase = 100\n'
GQA = '''
tokens = ["a", "b", "c", "d"]
X = [[1, 0, 1], [0, 1, 0], [1, 1, 0], [0, 1, 1]]
mask = "causal"
softcap = 2.5

[attention]
num_heads = 2
num_kv_heads = 1
W_Q = [[1, 0, 0.5, 0, 0, 1, 0, -0.5], [0, 1, 0, 0.5, 1, 0, 0.5, 0], [0.5, 0, 1, 0, 0, 0.5, 1, 0]]
W_K = [[1, 0, 0, 1], [0, 1, 1, 0], [0.5, 0.5, 0, 0]]
W_V = [[1, 0, 0, 1], [0, 1, 0, 0], [0, 0, 1, 1]]

[rope]
layout = "interleaved"
base = 100

[differential]
lambda_q1 = [[0.3, -0.2], [0.1, 0.4]]
lambda_k1 = [[0.5, 0.1], [-0.3, 0.2]]
lambda_q2 = [[0.2, 0.2], [0.4, -0.1]]
lambda_k2 = [[-0.1, 0.3], [0.2, 0.2]]
layer = 1
gamma = [1, 1.2, 0.8, 1.1]

[backward]
target = [[0, 0, 0, 0, 0, 0, 0, 0], [1, 0, 0, 0, 0, 1, 0, 0], [0, 0, 0, 1, 0, 0, 0, 0], [0, 1, 0, 0, 1, 0, 0, 0]]
'''
DIFF_BACK = ["ddiff_factor", "ddiff_subnorm", "ddiff_mix", "ddiff_subtract", "ddiff_lambda", "ddiff_softmax_1",
             "ddiff_scale_1", "ddiff_softmax_2", "ddiff_scale_2", "ddiff_score"]


def _scenarios() -> dict[str, str]:
    text = BUILTIN.read_text(encoding="utf-8")
    return {"builtin": text + TARGET, "rope": text + ROPE + TARGET, "gqa_cap_gains": GQA}


@pytest.mark.parametrize("name", ["builtin", "rope", "gqa_cap_gains"])
def test_the_trace_walks_the_differential_backward_in_place_of_the_one_map_stages(name: str) -> None:
    sc = parse_scenario(_scenarios()[name], f"{name}.toml")
    trace = Trace(compute(sc))
    keys = trace.stage_keys
    wanted = DIFF_BACK + (["drotate_blocks"] if sc.rope is not None else [])
    assert keys[keys.index("ddiff_factor"):keys.index("dproject")] == wanted
    for gone in ("dmix", "dsoftmax", "dscale", "dscore", "drotate"):
        assert gone not in keys
    g = gradients(trace.comp)
    for h, hg in enumerate(g.heads):  # the panes are the gradients, by name
        np.testing.assert_array_equal(trace.matrix("dV", h), hg.own.dV)
        np.testing.assert_array_equal(trace.matrix("dQ_t" if sc.rope is not None else "dQ_s", h), hg.dQ)
        np.testing.assert_array_equal(trace.matrix("dlambda_q1", h)[0], hg.own.dlambda_q1)
        np.testing.assert_array_equal(trace.matrix("dlam", h)[0, 0], hg.own.dlambda)
    for i in range(len(trace)):  # every cell's value is the matrix's own cell
        seg = trace.segment_at(i)
        if seg.stage in wanted:
            row, col = divmod(i - seg.start, seg.cols)
            op = trace.op(i)
            assert op.value == float(trace.matrix(seg.target, seg.head)[row, col]), (seg.target, op.arithmetic)


@pytest.mark.parametrize("name", ["builtin", "rope", "gqa_cap_gains"])
@pytest.mark.parametrize("decimals", [2, 3, 5])
def test_every_backward_line_checks_out_exactly(name: str, decimals: int) -> None:
    comp = compute(parse_scenario(_scenarios()[name], f"{name}.toml"))
    assert_holds(check_text(to_markdown(comp, decimals)))
    assert_holds(check_text(explanation_text(View(Trace(comp)), decimals)))


@pytest.mark.parametrize("name", ["builtin", "rope", "gqa_cap_gains"])
@pytest.mark.parametrize("decimals", [2, 3])
def test_every_backward_line_checks_out_by_hand(name: str, decimals: int) -> None:
    comp = compute_hand(compute(parse_scenario(_scenarios()[name], f"{name}.toml")), decimals)
    assert_holds(check_text(explanation_text(View(Trace(comp)), decimals), whole=False))


def test_the_built_in_without_backward_walks_no_backward_stage() -> None:
    assert not any(k.startswith("ddiff_") for k in Trace(compute(load_scenario(BUILTIN))).stage_keys)
