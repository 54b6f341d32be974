"""What a fused kernel keeps (O and L = m + ln ℓ per row) and P rebuilt from L: the tiles view's two pages after
the forward's tiles, and the built-in fused_kernel that answers "why can't I get the attention matrix?"."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv_tui import compute, load_scenario
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.display.fused_view import fused_explanation
from qkv_tui.display.modes import Modes
from qkv_tui.display.presenter import Presenter
from qkv_tui.kernels.sinks import Sunk
from qkv_tui.teach.fused import fused
from qkv_tui.teach.handcalc import compute_hand
from qkv_tui.teach.stepper import Position
from qkv_tui.teach.tiled import tiled
from qkv_tui.ui.app import QKVApp

from .builtins import builtin
from .conftest import SOFTMAX_SCENARIOS
from .strategies import Case, cases
from .test_calculator import assert_holds, check_text, close

EACH = [pytest.param(p, id=p.stem) for p in SOFTMAX_SCENARIOS]
L_LINE = re.compile(r"^L\[[^\]]+\] = m \+ ln ℓ = (\S+) \+ ln\((\S+)\) = (\S+)$")


def _independent_logsumexp(comp, head: int) -> np.ndarray:
    """torch.logsumexp over each row's allowed logits (and the sink's, which has no Value but joins the sum)."""
    hr = comp.heads[head]
    sink = hr.read(Sunk, lambda s: s.sink)
    out = []
    for i in range(comp.scenario.n):
        row = [float(x) for x, a in zip(hr.masked[i], comp.scenario.allow[i]) if a]
        row += [] if sink is None else [float(sink)]
        out.append(torch.logsumexp(torch.tensor(row, dtype=torch.float64), 0).item() if row else -math.inf)
    return np.array(out)


@pytest.mark.parametrize("path", EACH)
def test_L_is_the_rows_logsumexp_and_P_from_it_is_the_traces_weights(path) -> None:
    comp = builtin(path)
    for head in range(len(comp.heads)):
        fu = fused(tiled(comp, head))
        ref = _independent_logsumexp(comp, head)
        assert np.array_equal(np.isinf(fu.L), np.isinf(ref))
        fin = np.isfinite(ref)
        np.testing.assert_allclose(fu.L[fin], ref[fin], rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(fu.P, comp.heads[head].weights, rtol=1e-12, atol=1e-15)
        assert not fu.P[~comp.scenario.allow].any()  # a masked cell comes back exactly 0


def _page_text(comp, head: int, decimals: int) -> str:
    th = tiled(comp, head)
    fu = fused(th)
    lines = []
    for page in (0, 1):
        ex = fused_explanation(fu, page, len(th), len(th) + 2, decimals)
        lines += [ex.arithmetic, *ex.details]
    return "\n".join(lines)


def _check_L_lines(text: str) -> int:
    """ln is not on the shared calculator's keys: each L line recomputed here, m + ln ℓ from the shown m and ℓ."""
    count = 0
    for line in text.splitlines():
        found = L_LINE.match(line)
        if found:
            m, ell, res = found.groups()
            assert close(float(m) + math.log(float(ell)), res), line
            count += 1
    return count


@pytest.mark.parametrize("decimals", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("path", EACH)
def test_the_new_lines_check_out_on_a_calculator(path, decimals: int) -> None:
    comp = builtin(path)
    text = _page_text(comp, 0, decimals)
    report = check_text(text)
    assert_holds(report)
    assert "e^" in report.kinds  # the P lines were recomputed, not skipped as symbolic
    assert _check_L_lines(text) == min(comp.scenario.n, 4) - int(np.isinf(fused(tiled(comp, 0)).L[:4]).sum())
    assert "✓ equal to the trace's softmax weights" in text


@pytest.mark.parametrize("decimals", [2, 3, 4])
@pytest.mark.parametrize("path", EACH)
def test_the_new_lines_check_out_by_hand(path, decimals: int) -> None:
    comp = compute_hand(builtin(path), decimals)
    text = _page_text(comp, 0, decimals)
    report = check_text(text, whole=False)
    assert not report.failures, "\n".join(report.failures[:10])
    assert report.checked > 0
    _check_L_lines(text)


def test_fused_kernel_worked_by_hand() -> None:
    comp = compute(load_scenario("fused_kernel"))
    np.testing.assert_array_equal(comp.heads[0].masked, [[1, 0, 1], [0, 2, 1], [1, 1, 2]])  # X·Xᵀ/√4
    e = math.e
    fu = fused(tiled(comp, 0))
    np.testing.assert_allclose(fu.L, [math.log(2 * e + 1), 2 + math.log(1 + e**-2 + e**-1),
                                      2 + math.log(2 * e**-1 + 1)], rtol=1e-14)
    np.testing.assert_allclose(fu.P[0], [e / (2 * e + 1), 1 / (2 * e + 1), e / (2 * e + 1)], rtol=1e-14)
    text = _page_text(comp, 0, 3)
    assert "L[the] = m + ln ℓ = 1 + ln(2.368) = 1.862" in text  # ℓ = 1 + e⁻¹ + 1
    assert "P[the] = e^(S − L) = e^([1.000, 0.000, 1.000] − 1.862) = e^[-0.862, -1.862, -0.862]" \
           " = [0.422, 0.155, 0.422]" in text
    # keeping P (3·3 numbers, 2 bytes each at bf16) against rebuilding it (2·3·3·4 FLOPs and 9 exponentials)
    assert "numbers: N² = 3·3 = 9; bytes at bf16: 9·2 = 18" in text
    assert "FLOPs: 2·n·m·d_k = 2·3·3·4 = 72; and one exponential a cell, exponentials: N² = 3·3 = 9" in text
    assert "output_attentions" in comp.scenario.description and "eager" in comp.scenario.description


def test_the_pages_sit_between_the_forward_and_the_backward() -> None:
    for name in ("fused_kernel", "learn_to_look"):
        p = Presenter(compute(load_scenario(name)))
        forward = len(tiled(p.comp, 0))
        kept = p.frame(Position(0, 0), Modes(view="tiles", side_step=forward)).explanation
        rebuilt = p.frame(Position(0, 0), Modes(view="tiles", side_step=forward + 1)).explanation
        assert kept.arithmetic.startswith("L[") and rebuilt.arithmetic.startswith("P[")
        after = p.frame(Position(0, 0), Modes(view="tiles", side_step=forward + 2)).explanation
        assert ("backward" in after.stage_label) == (name == "learn_to_look")


async def test_the_app_reaches_the_rebuilt_page() -> None:
    app = QKVApp("fused_kernel")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("t", "end")
        ex = app.presenter.frame(app.position, app.modes).explanation
        assert ex.arithmetic.startswith("P[the] = e^(S − L)")
        assert any(d.startswith("✓ equal to the trace's softmax weights") for d in ex.details)
        await pilot.press("left")
        assert app.presenter.frame(app.position, app.modes).explanation.arithmetic.startswith("L[the] = m + ln ℓ")


@settings(max_examples=40, deadline=None)
@given(cases(), st.integers(1, 8), st.booleans())
def test_generated_scenarios_rebuild_their_weights_and_check_out(case: Case, decimals: int, hand: bool) -> None:
    comp = compute(parse_scenario(case.toml, "generated.toml"))
    if comp.scenario.linear is not None or getattr(comp.scenario, "deltanet", None) is not None:
        return  # a running state, no softmax: the tiles view says there are no tiles
    if hand:
        comp = compute_hand(comp, decimals)
    for head in range(len(comp.heads)):
        fu = fused(tiled(comp, head))
        if not hand:  # by hand the trace rounds its scores; the tiles, like a kernel, do not
            np.testing.assert_allclose(fu.P, comp.heads[head].weights, rtol=1e-9, atol=1e-12)
        if comp.heads[head].part(Sunk) is None:  # a sink takes its share of each row
            np.testing.assert_allclose(fu.P.sum(axis=1)[np.isfinite(fu.L)], 1.0, rtol=1e-12)
        report = check_text(_page_text(comp, head, decimals), whole=not hand)
        assert not report.failures, "\n".join(report.failures[:10])
