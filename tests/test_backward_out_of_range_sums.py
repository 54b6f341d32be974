"""A [backward] whose gradients leave float64's range: --check accepts the file, so the app must show it.

dEmbed's line for dX[I,0] sums 1e307·100 + 1e307·(−100): each product is inf in float64, and inf + (−inf)
is nan. math.fsum raises on that (ValueError), and on a finite sum past the range (OverflowError), where
float arithmetic gives nan or ±inf; the line shows what float arithmetic gives, with a sentence saying why.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import pytest

from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.teach.arith import float_sum
from qkv_tui.teach.place import find_place
from qkv_tui.teach.trace import Trace
from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.panels import ExplainPanel

# dO far up in float64's range and W_V with ±100: dV·W_V's products overflow to +inf and −inf
HUGE = """\
title = "dEmbed sums -inf + inf"
tokens = ["I", "love"]
X = [[1, 0], [0, 1]]

[[heads]]
name = "head 1"
W_Q = [[1, 0], [0, 1]]
W_K = [[1, 0], [0, 1]]
W_V = [[100, -100], [1, 1]]

[backward]
dO = [[1e307, 1e307], [1e307, 1e307]]
"""


def test_float_sum_is_fsum_where_fsum_answers_and_float_arithmetic_where_it_raises() -> None:
    assert float_sum([0.1] * 10) == math.fsum([0.1] * 10) == 1.0
    assert math.isnan(float_sum([math.inf, -math.inf, 1.0]))
    assert float_sum([1e308, 1e308]) == math.inf  # fsum: "intermediate overflow"
    assert float_sum([-1e308, -1e308]) == -math.inf
    for raises in ([math.inf, -math.inf], [1e308, 1e308]):
        with pytest.raises((ValueError, OverflowError)):
            math.fsum(raises)


@pytest.mark.parametrize("hand", [None, 3])
def test_every_line_of_the_trace_is_built_and_dembed_says_nan(hand: int | None) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the kernels' own overflow, which is the point
        comp = compute(parse_scenario(HUGE, "huge.toml"))
        if hand is not None:
            from qkv_tui.teach.handcalc import compute_hand
            comp = compute_hand(comp, hand)
        trace = Trace(comp)
        lines = {}
        for i in range(len(trace)):
            op = trace._build(i)
            lines[op.arithmetic.partition(" = ")[0]] = op
    dx = lines["dX[I,0]"]
    assert dx.arithmetic.endswith("= nan")
    assert "1.000e+307·100 + 1.000e+307·(-100)" in dx.arithmetic or hand is not None
    assert any("inf + (−inf) is nan" in line for line in dx.details)


async def test_the_app_walks_dembed(tmp_path: Path) -> None:
    path = tmp_path / "huge.toml"
    path.write_text(HUGE, encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        comp = compute(parse_scenario(HUGE, "huge.toml"))
        app = QKVApp(str(path), computation=comp, place=find_place(Trace(comp), "dembed"))
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("right", "right", "left", "h", "right", "right", "h")
            await pilot.pause()
            assert "dX[" in app.query_one(ExplainPanel).plain
        assert app.return_code in (None, 0)
