"""Under [rope] a differential head's Rotate stage turns each half on its own (teach/stages/rotate_blocks.py, RoPE's
Rotate for a head scored in blocks, in place of the one-map Rotate), and the head's record of the turn (the JSON's
Q_rot and K_rot, the panes) is what its maps scored: each half turned with the frequencies of width d, as RoPE
turns a head of width d."""

from __future__ import annotations

import json

import numpy as np
import pytest

from qkv_tui import compute
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.display.view import View
from qkv_tui.edges.export_json import to_json
from qkv_tui.kernels.differential import DiffForward
from qkv_tui.kernels.rope import angles, pairs
from qkv_tui.teach.handcalc import compute_hand
from qkv_tui.teach.trace import Trace

from .test_calculator import assert_holds, check_text, explanation_text
from .test_differential_builtin import BUILTIN


def _rope(layout: str) -> str:
    text = BUILTIN.read_text(encoding="utf-8")
    head, _, rest = text.partition("[[heads]]")
    return head + f'\n[rope]\nlayout = "{layout}"\nbase = 100\n\n[[heads]]' + rest


def _turn_halves(M: np.ndarray, layout: str, n: int) -> np.ndarray:
    """Each half (width d) turned as a head of width d, written here from the formula: pair (a, b) by p·θᵢ."""
    d = M.shape[1] // 2
    a = angles(100.0, d, range(n))
    out = M.copy()
    for start in (0, d):
        for i, (p, q) in enumerate(pairs(layout, d)):
            x, y = M[:, start + p], M[:, start + q]
            out[:, start + p] = x * np.cos(a[:, i]) - y * np.sin(a[:, i])
            out[:, start + q] = x * np.sin(a[:, i]) + y * np.cos(a[:, i])
    return out


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_the_record_and_the_json_hold_each_half_turned(layout: str) -> None:
    comp = compute(parse_scenario(_rope(layout), "d.toml"))
    doc = json.loads(to_json(comp))
    trace = Trace(comp)
    assert "rotate_blocks" in trace.stage_keys and "rotate" not in trace.stage_keys
    for h, hr in enumerate(comp.heads):
        f = hr.need(DiffForward)
        want_Q, want_K = _turn_halves(f.Q, layout, 3), _turn_halves(f.K, layout, 3)
        np.testing.assert_allclose(doc["heads"][h]["Q_rot"], want_Q, rtol=0, atol=1e-12)
        np.testing.assert_allclose(doc["heads"][h]["K_rot"], want_K, rtol=0, atol=1e-12)
        np.testing.assert_allclose(trace.matrix("Q_rot", h), want_Q, rtol=0, atol=1e-12)
        # the maps scored these: scores₁ = Q₁'·K₁'ᵀ
        np.testing.assert_allclose(f.map_1.scores, want_Q[:, :2] @ want_K[:, :2].T, rtol=0, atol=1e-12)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("decimals", [2, 3, 5])
def test_every_rotate_line_checks_out(layout: str, decimals: int) -> None:
    comp = compute(parse_scenario(_rope(layout), "d.toml"))
    assert_holds(check_text(explanation_text(View(Trace(comp)), decimals)))
    hand = compute_hand(comp, min(decimals, 3))
    assert_holds(check_text(explanation_text(View(Trace(hand)), min(decimals, 3)), whole=False))
