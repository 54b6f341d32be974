"""A worksheet of a scenario with [value_scale]: the factor is printed among the inputs, the V table is the scaled
V, and the answer key's V lines work (X·W_V + b_V)·s to the engine's V; the cells after it read that V."""

from __future__ import annotations

import re

import numpy as np

from qkv_tui import compute
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.edges.worksheet.make import build

from .test_value_scale import FACTOR, scaled
from .test_worksheet import answer_of, evaluate, number, unit

KEY_LINE = re.compile(r"^- \((\d+)\) (V|output|final)\[(\w+),(\d+)\] = (.*)$")


def test_the_key_works_the_scaled_values_and_the_output_reads_them() -> None:
    comp = compute(parse_scenario(scaled(), "scaled.toml"))
    page = build(comp, "100%", 0).markdown()
    assert "The value scale: V is multiplied by it after the projection" in page
    assert f"V = {FACTOR:g}·(X·W_V + b_V)" in page
    labels = comp.scenario.key_labels
    seen = {"V": 0, "output": 0, "final": 0}
    for line in page.splitlines():
        m = KEY_LINE.match(line)
        if m is None:
            continue
        _, name, label, col, working = m.groups()
        answer = answer_of(working)
        steps = working.split(" = ")
        if name == "V":
            assert steps[0].endswith(f")·{FACTOR:g}"), line
            exact = float(comp.heads[0].V[labels.index(label), int(col)])
            assert abs(number(answer) - exact) <= unit(answer) + 1e-9, (line, exact)
        if name == "final":  # worked from the page's rounded numbers, so within a few units of the engine's
            exact = float(comp.output[comp.scenario.labels.index(label), int(col)])
            assert abs(number(answer) - exact) <= 0.005 * max(1.0, abs(exact)), (line, exact)
        for step in steps[1:-1]:
            if not re.search(r"[A-Za-z_]\[", step):
                assert abs(evaluate(step) - number(answer)) <= unit(answer) + 1e-9, (line, step)
        seen[name] += 1
    assert seen["V"] == comp.heads[0].V.size  # the shared K/V head prints its V once
    assert seen["output"] > 0 and seen["final"] == comp.output.size


def test_without_the_scale_the_page_has_no_factor() -> None:
    base = scaled().split("\n[value_scale]")[0]
    page = build(compute(parse_scenario(base, "plain.toml")), "100%", 0).markdown()
    assert "value scale" not in page
    assert "V = X·W_V + b_V" in page
    np.testing.assert_array_equal(compute(parse_scenario(base, "plain.toml")).heads[0].V,
                                  compute(parse_scenario(scaled(1), "one.toml")).heads[0].V)
