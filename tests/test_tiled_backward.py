"""FlashAttention-2's backward in the tiles view (teach/tiled_backward.py, display/tiled_back_view.py): its tiled
dQ, dK and dV equal core/gradients.py's exact ones on generated scenarios, at tile sizes that do not divide n, and
every line it prints checks out on a calculator (tests/arith_check.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import load_scenario, parse_scenario
from qkv_tui.display.modes import Modes
from qkv_tui.display.presenter import Presenter
from qkv_tui.display.tiled_back_view import back_explanation
from qkv_tui.teach.stepper import Position
from qkv_tui.teach.tiled import tiled
from qkv_tui.teach.tiled_backward import TiledBackward, tiled_backward

from .arith_check import checked
from .variants_cases import ModernCase, matrix, modern_cases


def lines(tb: TiledBackward, decimals: int) -> list[str]:
    out: list[str] = []
    for k in range(len(tb)):
        ex = back_explanation(tb, k, 0, decimals)
        out += [ex.arithmetic, *ex.details]
    return out


def with_target(case: ModernCase, cap: float | None, data: st.DataObject) -> str:
    text = case.toml if cap is None else f"softcap = {cap!r}\n{case.toml}"
    n, d_out = compute(parse_scenario(text, "generated.toml")).output.shape
    rows = data.draw(matrix(n, d_out))
    body = ",\n".join("  [" + ", ".join(repr(float(x)) for x in row) + "]" for row in rows)
    return f"{text}\n\n[backward]\ntarget = [\n{body}\n]\n"


@settings(max_examples=40, deadline=None)
@given(modern_cases(), st.sampled_from([None, 1.5]), st.integers(1, 4), st.data())
def test_tiled_gradients_equal_the_exact_ones(case: ModernCase, cap: float | None, tile: int,
                                              data: st.DataObject) -> None:
    comp = compute(parse_scenario(with_target(case, cap, data), "generated.toml"))
    assume(comp.scenario.n % tile != 0 or comp.scenario.m % tile != 0 or data.draw(st.booleans()))
    for h in range(len(comp.heads)):
        tb = tiled_backward(tiled(comp, h, tile))
        ab = tb.grads.heads[h].attend
        for got, exact in zip(tb.finals, (ab.dQ_used, ab.dK_used, ab.dV), strict=True):
            assert np.allclose(got, exact, rtol=1e-9, atol=1e-9)
        ok, _ = tb.check()
        assert ok
        assert "✓ equal to the Backward stages" in lines(tb, 3)[-1]


def test_a_wrong_gradient_is_caught() -> None:
    comp = compute(load_scenario("learn_to_look"))
    tb = tiled_backward(tiled(comp, 0, 2))
    tb.finals[0][0, 0] += 1e-3  # the comparison is real: a tiled dQ one cell off fails it
    assert tb.check()[0] is False
    assert "✗ DIFFERENT from the Backward stages" in lines(tb, 3)[-1]


@pytest.mark.parametrize("decimals", range(1, 9))
@pytest.mark.parametrize("tile", [1, 2, 3])
def test_every_backward_line_of_learn_to_look_checks_out(decimals: int, tile: int) -> None:
    comp = compute(load_scenario("learn_to_look"))
    count, bad = checked(lines(tiled_backward(tiled(comp, 0, tile)), decimals))
    assert not bad, "\n".join(bad[:10])
    assert count > 15


@settings(max_examples=30, deadline=None)
@given(modern_cases(), st.sampled_from([None, 1.5]), st.integers(1, 4), st.integers(1, 8), st.data())
def test_generated_backward_lines_check_out(case: ModernCase, cap: float | None, tile: int, decimals: int,
                                            data: st.DataObject) -> None:
    comp = compute(parse_scenario(with_target(case, cap, data), "generated.toml"))
    count, bad = checked(lines(tiled_backward(tiled(comp, 0, tile)), decimals))
    assert not bad, "\n".join(bad[:10])
    assert count > 0


def test_the_backward_follows_the_forward_only_with_backward() -> None:
    for name, extra in (("i_love_ai", False), ("learn_to_look", True)):
        p = Presenter(compute(load_scenario(name)))
        modes = Modes(view="tiles")
        forward = len(tiled(p.comp, 0)) + 2  # the tiles, then what a fused kernel keeps and P rebuilt from L
        assert p.side_steps(modes, 0) == (forward + len(tiled_backward(tiled(p.comp, 0))) if extra else forward)
    p = Presenter(compute(load_scenario("learn_to_look")))
    last = p.side_steps(Modes(view="tiles"), 0) - 1
    frame = p.frame(Position(0, 0), Modes(view="tiles", side_step=last))
    assert frame.explanation.details[-1].startswith("✓ equal to the Backward stages")
