"""The calculator rule over every backward line (teach/stages/*.py's backward parts): every built-in given a
[backward] table, at 1–8 decimals, exact and by hand; and the backward stages' values are the gradients."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from qkv_tui import compute
from qkv_tui.core.scenario import Scenario, parse_scenario
from qkv_tui.teach.handcalc import compute_hand
from qkv_tui.teach.trace import Trace

from .test_calculator import assert_holds, check_text

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
# [linear] and [deltanet] have no backward pass yet (the loader refuses [backward] beside them); [mla]'s is checked
# by tests/test_backward_mla_torch.py and tests/test_backward_mla_lines.py
# [differential]'s backward is checked by tests/test_differential_backward_stages.py; [indexer] and [ssd] refuse one
NO_BACKWARD = ("[model]", "[mla]", "[linear]", "[deltanet]", "[differential]", "[indexer]", "[ssd]", "[shared_kv]")
BUILT_INS = sorted(p.stem for p in SCENARIOS.glob("*.toml") if not any(t in p.read_text() for t in NO_BACKWARD))
BACKWARD_STAGES = ("loss", "dwo", "dgate", "dmix", "dsoftmax", "dscale", "dscore", "drotate", "dqk_norm", "dproject",
                   "dembed", "dnorm")


def with_backward(name: str, key: str = "target") -> Scenario:
    text = (SCENARIOS / f"{name}.toml").read_text()
    if "[backward]" in text:
        return parse_scenario(text, f"{name}.toml")
    n, d_out = compute(parse_scenario(text, f"{name}.toml")).output.shape
    rows = np.random.default_rng(len(name)).normal(size=(n, d_out)).round(2)
    body = ",\n".join("  [" + ", ".join(repr(float(x)) for x in row) + "]" for row in rows)
    return parse_scenario(f"{text}\n[backward]\n{key} = [\n{body}\n]\n", f"{name}.toml")


def stage_text(trace: Trace, stages: tuple[str, ...], decimals: int) -> str:
    """Every arithmetic and detail line of the named stages' operations, in the trace's order."""
    lines = []
    for seg in trace.segments:
        if seg.stage not in stages:
            continue
        for i in range(seg.start, seg.stop):
            op = trace.op(i, decimals)
            lines += [op.arithmetic, *op.details]
    return "\n".join(lines)


def backward_text(trace: Trace, decimals: int) -> str:
    return stage_text(trace, BACKWARD_STAGES, decimals)


def assert_cells_are_gradients(trace: Trace, stages: tuple[str, ...]) -> None:
    """Every operation's value of the named stages is the cell of the matrix it fills (what the panes show)."""
    for seg in trace.segments:
        if seg.stage not in stages:
            continue
        values = trace.matrix(seg.target, seg.head)
        for i in range(seg.start, seg.stop):
            op = trace.op(i)
            assert op.value == pytest.approx(float(values[op.row, op.col or 0]), abs=1e-12), op.arithmetic


@pytest.mark.parametrize("decimals", range(1, 9))
@pytest.mark.parametrize("name", BUILT_INS)
def test_every_backward_line_checks_out(name: str, decimals: int) -> None:
    trace = Trace(compute(with_backward(name)))
    assert set(BACKWARD_STAGES) & set(trace.stage_keys)
    assert_holds(check_text(backward_text(trace, decimals)))


@pytest.mark.parametrize("name", ["i_love_ai", "gqa", "rope", "sink", "gated", "pre_norm"])
def test_from_dO_the_lines_check_out(name: str) -> None:
    trace = Trace(compute(with_backward(name, key="dO")))
    assert "loss" not in trace.stage_keys
    assert_holds(check_text(backward_text(trace, 3)))


@pytest.mark.parametrize("decimals", [1, 2, 3, 4])
@pytest.mark.parametrize("name", BUILT_INS)
def test_hand_rounded_backward_lines_check_out(name: str, decimals: int) -> None:
    comp = compute_hand(compute(with_backward(name)), decimals)
    assert_holds(check_text(backward_text(Trace(comp), decimals), whole=False))


@pytest.mark.parametrize("name", BUILT_INS)
def test_each_backward_cell_is_the_gradient(name: str) -> None:
    """Every operation's value is the cell of the matrix it fills (what the panes show)."""
    assert_cells_are_gradients(Trace(compute(with_backward(name))), BACKWARD_STAGES)


def test_no_backward_stage_without_backward() -> None:
    for name in BUILT_INS:
        if "[backward]" in (SCENARIOS / f"{name}.toml").read_text():  # learn_to_look, next_token_adamw
            continue
        trace = Trace(compute(parse_scenario((SCENARIOS / f"{name}.toml").read_text(), f"{name}.toml")))
        assert not set(BACKWARD_STAGES) & set(trace.stage_keys), name
