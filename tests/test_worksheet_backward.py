"""The backward worksheet (edges/worksheet/backward/tables.py): blanks and key for the backward tables, only for
scenarios with [backward], every key line checking out on a calculator (tests/arith_check.py)."""

from __future__ import annotations

import pytest

from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import load_scenario
from qkv_tui.edges.worksheet.make import build

from .arith_check import check

# the trace's backward stages for one plain head: dQ and dK through dscores = dS / scale, then dX (the paths into X)
BACKWARD = ("target", "dO", "dV.0", "dP.0", "D.0", "dS.0", "dscores.0", "dQu.0", "dKu.0", "dW_Q.0", "dW_K.0", "dW_V.0",
            "dX_in")


@pytest.mark.parametrize("decimals", [2, 3, 4])
def test_learn_to_look_has_backward_blanks_that_check_out(decimals: int) -> None:
    ws = build(compute(load_scenario("learn_to_look")), "100%", decimals=decimals)
    # the SGD step's tables end the page after them (tests/test_worksheet_sgd_step.py)
    assert [t.key for t in ws.tables if t.stage != "sgd"][-len(BACKWARD):] == list(BACKWARD)
    backward = [b for b in ws.blanks if b.table in BACKWARD]
    assert backward and {b.table for b in backward} == set(BACKWARD) - {"target"}  # the target is given
    results = [(b.working, check(b.working)) for b in backward]
    assert not [w for w, ok in results if ok is False], [w for w, ok in results if ok is False][:5]
    assert sum(ok is True for _, ok in results) == len(backward)
    assert "## Backward" in ws.markdown()


def test_no_backward_tables_without_backward() -> None:
    ws = build(compute(load_scenario("i_love_ai")), "100%")
    assert not {t.key for t in ws.tables} & set(BACKWARD)
    assert "Backward" not in ws.markdown()
