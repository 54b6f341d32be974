"""The calculator rule over every backward line of [mla] scenarios (mla_rotate, mla_expand, mla_compress's
backward parts, and the shared ones above them), at 1–8 decimals, exact and by hand; the stages' values are the
gradients; and the Markdown export and the Train view carry the latent layer."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings

from qkv_tui import compute, load_scenario
from qkv_tui.core.gradients import gradients
from qkv_tui.core.scenario import Scenario, parse_scenario
from qkv_tui.edges.export_json import to_json
from qkv_tui.edges.export_markdown import to_markdown
from qkv_tui.kernels.mla_backward import MlaBack
from qkv_tui.teach.handcalc import compute_hand
from qkv_tui.teach.trace import Trace
from qkv_tui.teach.train_walk import TrainRun

from .test_backward_lines import stage_text
from .test_backward_mla_torch import FULL, Case, cases, scenario_text
from .test_backward_mla_torch import with_backward as generated
from .test_calculator import assert_holds, check_text

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
BACKWARD_STAGES = ("loss", "dwo", "dmix", "dsoftmax", "dscale", "dscore", "dmla_rotate", "dk_r", "dexpand", "dcompress",
                   "dembed", "dnorm")
MLA_STAGES = ("dmla_rotate", "dk_r", "dexpand", "dcompress")


def mla_with_backward(key: str = "target") -> Scenario:
    text = (SCENARIOS / "mla.toml").read_text()
    # a given dO is used as the file writes it, by hand too: one decimal, so lines at 1 decimal read it whole
    rows = np.random.default_rng(4).normal(size=(3, 4)).round(2 if key == "target" else 1)
    body = ",\n".join("  [" + ", ".join(repr(float(x)) for x in row) + "]" for row in rows)
    return parse_scenario(f"{text}\n[backward]\n{key} = [\n{body}\n]\n", "mla.toml")


def backward_text(trace: Trace, decimals: int, stages: tuple[str, ...] = BACKWARD_STAGES) -> str:
    return stage_text(trace, stages, decimals)


def sources() -> list[tuple[str, Scenario]]:
    return [("mla_learns", load_scenario("mla_learns")), ("mla+target", mla_with_backward()),
            ("mla+dO", mla_with_backward("dO")), ("full", generated(scenario_text(FULL, places=1), seed=2)),
            ("latent queries, no rope", generated(scenario_text(Case(3, 3, 2, 2, 1, 2, 2, 2, True, False, True, "layer",
                                                                     None, 1.5, False, 12), places=1), seed=4))]


@pytest.mark.parametrize("decimals", range(1, 9))
@pytest.mark.parametrize("which", range(5))
def test_every_mla_backward_line_checks_out(which: int, decimals: int) -> None:
    trace = Trace(compute(sources()[which][1]))
    assert set(MLA_STAGES[1:]) <= set(trace.stage_keys)
    assert "dproject" not in trace.stage_keys  # the heads' multiplied-through weights do not train
    assert_holds(check_text(backward_text(trace, decimals)))


@pytest.mark.parametrize("decimals", [1, 2, 3, 4])
@pytest.mark.parametrize("which", range(5))
def test_hand_rounded_mla_backward_lines_check_out(which: int, decimals: int) -> None:
    """By hand (h) each step is worked from the written-down numbers before it, as test_backward_lines checks."""
    comp = compute_hand(compute(sources()[which][1]), decimals)
    assert_holds(check_text(backward_text(Trace(comp), decimals), whole=False))


@settings(max_examples=25, deadline=None)
@given(cases())
def test_generated_mla_backward_lines_check_out(case: Case) -> None:
    trace = Trace(compute(generated(scenario_text(case), seed=case.seed)))
    assert_holds(check_text(backward_text(trace, 3, (*MLA_STAGES, "dembed"))))


def test_the_stages_values_are_the_gradients() -> None:
    sc = generated(scenario_text(FULL), seed=2)
    trace = Trace(compute(sc))
    m = gradients(trace.comp).part(MlaBack)
    assert m is not None
    mla = sc.mla
    assert mla is not None
    for h in range(mla.num_heads):
        np.testing.assert_array_equal(trace.matrix("dq_R_back", h), m.dq_R_raw[h])
        np.testing.assert_array_equal(trace.matrix("dW_UK_h", h), m.dW_UK[:, h * mla.d_nope:(h + 1) * mla.d_nope])
        np.testing.assert_array_equal(trace.matrix("dW_UQ_h", h), m.dW_UQ[:, h * mla.d_qk:(h + 1) * mla.d_qk])  # type: ignore[index]
    for name, value in (("dk_R_sum", m.dk_R), ("dk_R_back", m.dk_R_raw), ("dc_KV_d", m.dc_KV), ("dc_KV_n", m.dc_KV_raw),
                        ("dW_DKV", m.dW_DKV), ("dW_KR", m.dW_KR), ("dW_DQ", m.dW_DQ), ("dX_in", m.dX)):
        np.testing.assert_array_equal(trace.matrix(name, None), value, err_msg=name)
    # every operation's value is the cell of its matrix
    for seg in trace.segments:
        if seg.stage in MLA_STAGES:
            M = trace.matrix(seg.target, seg.head)
            for i in range(seg.start, seg.stop):
                op = trace.op(i, 3)
                assert op.value == M[op.row, op.col], (seg.target, op.row, op.col)


def test_the_shared_rotary_key_says_its_gradient_is_a_sum() -> None:
    trace = Trace(compute(load_scenario("mla_learns")))
    assert "SUM over the heads" in trace.meaning("dk_r", None)
    seg = trace.segment_for("dk_R_sum", None)
    assert seg is not None
    line = trace.op(seg.start, 3).arithmetic
    assert line == "dk_R'[I,0] = dK[I,2] of head 1 + dK[I,2] of head 2 = 0.098 + 0.098 = 0.196"


def test_json_grad_mla_fields() -> None:
    data = json.loads(to_json(compute(load_scenario("mla_learns"))))
    grad = data["grad"]
    assert list(grad)[-5:] == ["mla", "linear", "deltanet", "dgamma_q", "dgamma_k"]
    assert list(grad["mla"]) == ["dW_DKV", "dW_UK", "dW_UV", "dW_KR", "dW_Q", "dW_DQ", "dW_UQ", "dgamma_kv", "dgamma_q",
                                 "dc_KV", "dk_R"]
    assert grad["mla"]["dW_DQ"] is None and grad["mla"]["dgamma_kv"] is None and grad["kv_heads"] is None
    head = grad["heads"][1]
    assert head["dW_K"] is None and head["dW_V"] is None
    assert np.allclose(head["dW_Q"], np.array(grad["mla"]["dW_Q"])[:, 4:8])
    assert np.allclose(np.array(grad["heads"][0]["dK_rot"])[:, 2:] + np.array(head["dK_rot"])[:, 2:], grad["mla"]["dk_R"])
    losses = [s["loss"] for s in data["train"]]
    assert len(losses) == 7 and all(b < a for a, b in itertools.pairwise(losses))
    assert round(losses[0], 3) == 0.459 and round(losses[-1], 3) == 0.063
    assert round(data["train"][6]["weights"][0][2][0], 3) == 0.813
    plain = json.loads(to_json(compute(load_scenario("learn_to_look"))))
    assert plain["grad"]["mla"] is None


def test_train_view_lists_the_latent_weights() -> None:
    run = TrainRun(load_scenario("mla_learns"))
    names = [p.name for p in run.params(0)]
    assert names[:3] == ["W_Q", "W_UK", "W_KR"] or {"W_Q", "W_UK", "W_KR"} <= set(names)
    assert "W_K" not in names and "W_K (head 1)" not in names
    moved = {m.param for m in run.moves(1)}
    assert moved <= {"W_Q", "W_UK", "W_KR"} and moved


def test_markdown_carries_the_backward_stages() -> None:
    text = to_markdown(compute(load_scenario("mla_learns")))
    for name in ("dRotate", "dk_R", "dExpand", "dCompress", "dEmbed"):
        assert name in text, name
