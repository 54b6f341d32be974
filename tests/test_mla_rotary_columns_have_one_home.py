"""MLA's decoupled RoPE has one home (issue 30): the latent layer's other modules ask [mla]'s table or the Rotary
it makes (kernels/mla_rope.py) about the rotary columns and name neither [rope] nor d_rope, as
benchmarks/variant_reach.py reads them; and what the Rotary turns is RoPE's turn, checked here by a rotation
written out in the test and by the turn back being the turn's transpose."""

from __future__ import annotations

import ast
import re

import numpy as np

from qkv_tui import compute, load_scenario
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.kernels.mla import MlaHead

from .conftest import ROOT
from .test_views_ask_the_parts import _reach

# the latent layer's modules, the worksheet's backward tables among them, besides its keys (core/variants/mla.py,
# mla_table.py: d_rope is a key of the file) and the rotary part's own (kernels/mla_rope.py, teach/stages/mla_rotate.py)
ASKERS = ("core/mla_cost.py", "core/mla_grad.py", "core/mla_part.py", "kernels/mla.py", "kernels/mla_backward.py",
          "display/mla_cache.py", "display/mla_cost.py", "edges/faces/mla.py", "teach/stages/mla_absorb.py",
          "teach/stages/mla_compress.py", "teach/stages/mla_expand.py", "teach/stages/mla_grads.py",
          "teach/stages/mla_parts.py", "teach/stages/mla_sheet.py", "edges/worksheet/backward/mla.py",
          "edges/worksheet/backward/mla_lines.py")


def test_the_latent_layers_other_modules_name_no_rope() -> None:
    rope = re.compile(_reach().VARIANTS["rope"])
    named = {}
    for module in ASKERS:
        used = _reach().names_in(ast.parse((ROOT / "qkv_tui" / module).read_text(encoding="utf-8")))
        hits = sorted(n for n in used if rope.search(n))
        if hits:
            named[module] = hits
    assert not named, named


def _turned_by_hand(M: np.ndarray, positions: list[int]) -> np.ndarray:
    """One interleaved pair (0, 1) at θ₀ = base^0 = 1 radian a position: [a·cos p − b·sin p, a·sin p + b·cos p]."""
    out = np.empty_like(M)
    for t, p in enumerate(positions):
        a, b = M[t]
        out[t] = [a * np.cos(p) - b * np.sin(p), a * np.sin(p) + b * np.cos(p)]
    return out


def test_the_heads_rotary_columns_are_ropes_turn() -> None:
    sc = load_scenario("mla")
    assert sc.mla is not None and sc.mla.turns
    positions = [0, 1, 2]  # the file's [rope] positions
    comp = compute(sc)
    for hr in comp.heads:
        m = hr.need(MlaHead)
        np.testing.assert_allclose(m.q_R, _turned_by_hand(m.q_R_raw, positions), rtol=0, atol=1e-12)
        np.testing.assert_allclose(m.shared.k_R, _turned_by_hand(m.shared.k_R_raw, positions), rtol=0, atol=1e-12)
        # what is scored: the no-position columns, then the turned ones
        np.testing.assert_array_equal(m.Q, np.concatenate([m.q_C, m.q_R], axis=1))
        np.testing.assert_array_equal(m.K, np.concatenate([m.k_C, m.shared.k_R], axis=1))


def test_the_turn_back_is_the_turns_transpose() -> None:
    sc = load_scenario("mla")
    assert sc.mla is not None
    rotary = sc.mla.rotation(sc.positions)
    rng = np.random.default_rng(30)
    M, D = rng.normal(size=(3, 2)), rng.normal(size=(3, 2))
    # ⟨R·m, d⟩ = ⟨m, Rᵀ·d⟩ row by row: the gradient at q_R from the gradient at q_R'
    np.testing.assert_allclose(np.sum(rotary.turned(M) * D, axis=1), np.sum(M * rotary.turned_back(D), axis=1),
                               rtol=0, atol=1e-12)
    np.testing.assert_allclose(rotary.turned_back(rotary.turned(M)), M, rtol=0, atol=1e-12)


def test_without_rope_nothing_turns() -> None:
    text = (ROOT / "scenarios" / "mla.toml").read_text(encoding="utf-8")
    before, _, after = text.partition("[rope]")
    plain = before + after[after.index("\n[", 1):]  # the [rope] table left out, the tables after it kept
    sc = parse_scenario(plain, "mla.toml")
    assert sc.mla is not None and not sc.mla.turns
    rotary = sc.mla.rotation(sc.positions)
    M = np.arange(6.0).reshape(3, 2)
    assert not rotary.turns and rotary.turned(M) is M and rotary.turned_back(M) is M
    for hr in compute(sc).heads:
        m = hr.need(MlaHead)
        assert m.q_R is m.q_R_raw and m.shared.k_R is m.shared.k_R_raw
