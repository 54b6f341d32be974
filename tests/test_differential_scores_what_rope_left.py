"""A differential head scores Q and K as the head's parts before the scores left them: RoPE's part turns each half
(kernels/rope.py RopeSpec with its block), the differential kernel reads those very arrays and turns nothing itself,
and its backward reads the gradients back through the record of the turn (Rotated.scored_back), checked here against
the transpose of each half's rotation matrix built in NumPy from base^(−2i/d). The differential modules and RoPE's
Rotate of each block (teach/stages/rotate_blocks.py) then name each other nowhere in code."""

from __future__ import annotations

import ast
import re

import numpy as np
import pytest

from qkv_tui import compute
from qkv_tui.core.gradients import gradients
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.kernels.differential import DiffForward
from qkv_tui.kernels.rope import Rotated

from .conftest import ROOT
from .test_rope_turns_each_block_a_score_reads import SCENARIO
from .test_views_ask_the_parts import _reach

TARGET = "[backward]\ntarget = [[1, 0, 1, 0, 0, 1, 0, 1], [0, 1, 0, 1, 1, 0, 1, 0], [1, 1, 0, 0, 0, 0, 1, 1]]\n"


def _rotation(d: int, base: float, p: int) -> np.ndarray:
    """The (d, d) matrix that turns a row vector at position p, LLaMA's half layout: pair i = (i, i + d/2)."""
    R = np.eye(d)
    for i in range(d // 2):
        a = p * base ** (-2.0 * i / d)
        c, s = np.cos(a), np.sin(a)
        R[i, i], R[i, i + d // 2], R[i + d // 2, i], R[i + d // 2, i + d // 2] = c, s, -s, c
    return R  # x' = x·R: x'_i = x_i·cos − x_j·sin, x'_j = x_i·sin + x_j·cos


def test_the_kernel_scores_the_arrays_rope_turned() -> None:
    for hr in compute(parse_scenario(SCENARIO, "t.toml")).heads:
        f, turned = hr.need(DiffForward), hr.need(Rotated)
        assert f.Q_used is turned.Q_rot and f.K_used is turned.K_rot  # read, not turned again
        assert f.moved == (turned,) and turned.block == f.d == 2


def test_without_a_turn_the_maps_score_the_projections() -> None:
    sc = parse_scenario(SCENARIO.replace('[rope]\nlayout = "half"\nbase = 100\n', ""), "t.toml")
    for hr in compute(sc).heads:
        f = hr.need(DiffForward)
        assert f.Q_used is None and f.K_used is None and f.moved == ()
        np.testing.assert_array_equal(f.used(1)[0], f.Q[:, :2])


def test_the_gradient_turns_back_through_each_half() -> None:
    sc = parse_scenario(SCENARIO + TARGET, "t.toml")
    comp = compute(sc)
    for hg in gradients(comp).heads:
        assert hg.dQ_rot is not None and hg.dK_rot is not None
        for rows, dM_rot, dM in ((range(3), hg.dQ_rot, hg.dQ_turned), (range(3), hg.dK_rot, hg.dK_turned)):
            for r in rows:
                R = _rotation(2, 100.0, r)
                want = np.concatenate([dM_rot[r, :2] @ R.T, dM_rot[r, 2:] @ R.T])  # x' = x·R, so dx = dx'·Rᵀ
                np.testing.assert_allclose(dM[r], want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("module", ["kernels/differential.py", "kernels/differential_backward.py",
                                    "teach/stages/differential.py", "teach/stages/differential_backward.py",
                                    "core/variants/differential.py", "core/differential_part.py"])
def test_the_differential_modules_name_no_rope(module: str) -> None:
    reach = _reach()
    used = reach.names_in(ast.parse((ROOT / "qkv_tui" / module).read_text(encoding="utf-8")))
    assert not [n for n in used if re.search(reach.VARIANTS["rope"], n)]


def test_the_rotate_of_each_block_names_no_differential() -> None:
    text = (ROOT / "qkv_tui" / "teach" / "stages" / "rotate_blocks.py").read_text(encoding="utf-8")
    used = _reach().names_in(ast.parse(text))
    assert not [n for n in used if "diff" in n.lower()]
