"""The calculator rule over the cost view: every figure on its pages recomputes from the operands it prints
(products, sums of products, ratios, ceilings, intensities, ridges), on every page of a plain scenario, GQA,
MLA, linear attention, the delta rule and a sliding window, at two dtypes and contexts."""

from __future__ import annotations

import math
import re

import pytest

from qkv_tui.display import cost_view
from qkv_tui.display.modes import Modes
from qkv_tui.display.presenter import Presenter
from qkv_tui.teach.cost import choose
from tests.builtins import builtin

NUMBER = r"(\d+(?:\.\d+)?(?:e[+-]?\d+)?)"
SUM_OF_PRODUCTS = re.compile(r"((?:\d+(?:·\d+)*)(?: \+ [^=;:]*?\d+(?:·\d+)*)*) = (\d+)(?![\d.·])")
RATIO = re.compile(rf"(?<![\d·(]){NUMBER} / {NUMBER} = {NUMBER}(?![\d·])")
CEIL = re.compile(r"⌈(\d+) / (\d+)⌉ = (\d+)")
INTENSITY = re.compile(rf"\((\d+) \+ (\d+)\) / \((\d+) \+ (\d+)\) = {NUMBER}")
RIDGE = re.compile(rf"{NUMBER}e12 / {NUMBER}e12 = {NUMBER}")
MIN = re.compile(r"min\((\d+), (\d+)\)·(\d+) = (\d+)")


def close(got: float, shown: str) -> bool:
    """``shown`` is ``got`` as the view prints it (3 significant digits, or whole past 1000)."""
    return cost_view.num(got) == shown or math.isclose(got, float(shown), rel_tol=5e-3)


def pages(name: str, dtype: str, context: int) -> list[str]:
    choose(dtype, context)
    try:
        presenter = Presenter(builtin(name))
        modes = Modes()
        lines: list[str] = []
        for step in range(cost_view._steps(presenter, modes, 0)):
            ex = cost_view._frame(presenter, modes, step, 0).explanation
            lines += [ex.arithmetic, *ex.details]
        return lines
    finally:
        choose("bf16", 4096)


@pytest.mark.parametrize("name", ["i_love_ai", "gqa", "mla", "linear", "deltanet", "sliding_window", "two_heads"])
@pytest.mark.parametrize(("dtype", "context"), [("bf16", 4096), ("fp32", 3)])
def test_every_figure_recomputes_from_what_it_prints(name: str, dtype: str, context: int) -> None:
    checked = 0
    for line in pages(name, dtype, context):
        for m in INTENSITY.finditer(line):
            a, b, c, d = (int(g) for g in m.groups()[:4])
            assert close((a + b) / (c + d), m.group(5)), line
            checked += 1
        for m in RIDGE.finditer(line):
            assert close(float(m.group(1)) / float(m.group(2)), m.group(3)), line
            checked += 1
        for m in CEIL.finditer(line):
            assert -(-int(m.group(1)) // int(m.group(2))) == int(m.group(3)), line
            checked += 1
        for m in MIN.finditer(line):
            assert min(int(m.group(1)), int(m.group(2))) * int(m.group(3)) == int(m.group(4)), line
            checked += 1
        plain = INTENSITY.sub("", RIDGE.sub("", CEIL.sub("", MIN.sub("", line))))
        for m in RATIO.finditer(plain):
            assert close(float(m.group(1)) / float(m.group(2)), m.group(3)), line
            checked += 1
        for m in SUM_OF_PRODUCTS.finditer(RATIO.sub("", plain)):
            terms = re.findall(r"\d+(?:·\d+)*(?= \+|$)", m.group(1))
            assert sum(math.prod(int(f) for f in t.split("·")) for t in terms) == int(m.group(2)), line
            checked += 1
    assert checked > 20


def test_the_check_can_fail() -> None:
    assert close(3 / 7, "0.429") and not close(3 / 7, "0.44")
    line = "X 3·4·2 + W_Q 4·8·2 = 137"
    m = SUM_OF_PRODUCTS.search(line)
    assert m is not None
    terms = re.findall(r"\d+(?:·\d+)*(?= \+|$)", m.group(1))
    assert sum(math.prod(int(f) for f in t.split("·")) for t in terms) != int(m.group(2))
