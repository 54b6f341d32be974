"""[differential] with a file's own ``scale``: the kernel divides both maps by it, so every label, title and
sentence of the Scale steps (the page, the worksheet, the app's panes and formula line, the backward's dScale)
says that number, never √d (a reviewer found `scaled₁[the,the] = 2 / 1` under "Divide map 1's scores by √d")."""

from __future__ import annotations

import re

import numpy as np

from qkv_tui import compute
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.display.view import View
from qkv_tui.edges.export_markdown import to_markdown
from qkv_tui.edges.worksheet.make import to_worksheet
from qkv_tui.kernels.differential import DiffForward
from qkv_tui.teach.stepper import Position, Stepper
from qkv_tui.teach.trace import Trace

from .test_differential_builtin import BUILTIN
from .test_differential_learns_builtin import BUILTIN as LEARNS


def _with_scale(text: str, scale: str) -> str:
    return text.replace('mask = "causal"', f'mask = "causal"\nscale = {scale}', 1)


def _page_without_description(md: str, description: str) -> str:
    return md.replace(" ".join(description.split()), "")


def test_the_kernel_divides_both_maps_by_the_files_scale() -> None:
    sc = parse_scenario(_with_scale(BUILTIN.read_text(encoding="utf-8"), "1"), "s.toml")
    comp = compute(sc)
    for h, head in enumerate(sc.heads):
        f = comp.heads[h].need(DiffForward)
        Q, K = np.asarray(sc.X) @ np.asarray(head.W_Q), np.asarray(sc.X) @ np.asarray(head.W_K)
        d = Q.shape[1] // 2
        assert f.divisor == 1.0
        np.testing.assert_allclose(f.map_1.scaled, Q[:, :d] @ K[:, :d].T)  # divided by 1, not √2
        np.testing.assert_allclose(f.map_2.scaled, Q[:, d:] @ K[:, d:].T)


def test_every_label_of_the_scale_steps_says_the_files_scale() -> None:
    sc = parse_scenario(_with_scale(BUILTIN.read_text(encoding="utf-8"), "1"), "s.toml")
    comp = compute(sc)
    md = _page_without_description(to_markdown(comp), sc.description)
    assert "√d" not in md.replace("in place of √d", "")  # the lead, the meanings, the details and the lines
    assert "(softmax(Q₁K₁ᵀ/1) − λ·softmax(Q₂K₂ᵀ/1))" in md
    assert "Divide map 1's scores by 1, the scale the scenario sets" in md
    assert re.search(r"scaled₁\[the,the\] = 2 / 1 = 2\.000\n      scale = 1, set by the scenario", md)
    assert "scaled₁ = scores₁ / 1, masked" in to_worksheet(comp)
    # the app: the pane's title and the formula line at Scale₁
    trace = Trace(comp)
    view = View(trace)
    pos = Stepper(trace).stage(Position(0, 0), trace.stage_keys.index("diff_scale_1") + 1)
    op = trace.op(pos.index, 3)
    assert view.title("scaled_1", 0, trace.matrix("scaled_1", 0)).startswith("scaled₁ = scores₁ / 1, masked")
    formula = "".join(text for text, _ in view.formula(op))
    assert "Q₁·K₁ᵀ/1" in formula and "Q₂·K₂ᵀ/1" in formula and "√d" not in formula
    assert "√d" not in op.arithmetic and "in place of √d = √2" in " ".join(op.details)
    assert "by 1" in trace.spec("diff_scale_1").meaning(trace, 0)


def test_the_backward_scale_says_the_files_scale() -> None:
    sc = parse_scenario(_with_scale(LEARNS.read_text(encoding="utf-8"), "1"), "s.toml")
    md = _page_without_description(to_markdown(compute(sc)), sc.description)
    assert "dscores₁[the,the] = dS₁[the,the] / 1 = " in md
    assert "/ √d" not in md


def test_without_a_scale_every_label_still_says_root_d() -> None:
    comp = compute(parse_scenario(BUILTIN.read_text(encoding="utf-8"), "s.toml"))
    md = to_markdown(comp)
    assert "(softmax(Q₁K₁ᵀ/√d) − λ·softmax(Q₂K₂ᵀ/√d))" in md and "scaled₁[the,the] = 2 / √2 = 1.414" in md
    assert "Divide map 1's scores by √d, d the half width" in md and "d = 2 (each map's half of dₖ = 4)" in md
