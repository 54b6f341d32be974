"""The Train view's Δloss line is a plain difference: its shown numbers subtract to its shown result exactly.

learn_to_look's step 1 read "Δloss = 1.159 − 1.772 = -0.612", where 1.159 − 1.772 is −0.613 (the change was
worked from the unrounded losses and accepted within one unit, the rule for lines with products); a line
that only adds or subtracts must hold as written, so the losses get the digits that make it."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest

from qkv_tui.core.scenario import load_scenario
from qkv_tui.core.training import steps
from qkv_tui.display.train_view import _loss_line
from qkv_tui.teach.arith import agrees

LINE = re.compile(r"Δloss = (\S+) − (\S+) = (\S+); step (\d+)")


def places(text: str) -> int:
    return len(text.partition(".")[2])


def holds(line: str) -> bool:
    """At the change's own decimals the subtraction is exact; with guard digits the change is its rounding
    (the page's rule for a plain sum, teach/arith.py's agrees)."""
    match = LINE.match(line)
    assert match is not None, line
    now_text, before_text, change_text = (t.strip("()") for t in match.groups()[:3])
    calculated = Decimal(now_text) - Decimal(before_text)
    same = places(now_text) == places(before_text) == places(change_text)
    return agrees(float(calculated), change_text, exact=same)


def test_learn_to_look_step_1_subtracts_as_written() -> None:
    losses: list[float | None] = [1.7717391123591217, 1.159373324324151]
    line = _loss_line(losses, 1, 3)
    assert holds(line), line


@pytest.mark.parametrize("decimals", [1, 2, 3, 5])
def test_every_step_of_the_shipped_runs(decimals: int) -> None:
    for name in ("learn_to_look", "mla_learns", "deltanet_learns"):
        losses: list[float | None] = [step.loss for step in steps(load_scenario(name))]
        for k in range(1, len(losses)):
            line = _loss_line(losses, k, decimals)
            assert holds(line), (name, decimals, line)
