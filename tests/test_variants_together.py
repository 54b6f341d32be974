"""Every variant in one scenario: pre-norm, QK-norm over all heads, grouped K/V heads, partial YaRN RoPE, a
soft-cap, an output gate and a causal mask. Each stage reads what the stage before it wrote, so their
combinations are checked here as the built-ins check each alone."""

from __future__ import annotations

import numpy as np
import pytest

from qkv_tui import compute, load_scenario
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.display.view import View
from qkv_tui.edges.export_markdown import to_markdown
from qkv_tui.edges.export_toml import to_toml
from qkv_tui.kernels.gate import Gated
from qkv_tui.kernels.qk_norm import QKNormed
from qkv_tui.kernels.softcap import Capped
from qkv_tui.teach.decode import SCHEDULES, decode
from qkv_tui.teach.handcalc import compute_hand
from qkv_tui.teach.tiled import tiled
from qkv_tui.teach.trace import Trace

from .conftest import ROOT
from .test_calculator import assert_holds, check_text, explanation_text
from .test_worksheet_variants import check_sheet

PATH = ROOT / "tests" / "data" / "every_variant.toml"


def test_it_has_every_variant() -> None:
    sc = load_scenario(PATH)
    assert sc.norm and sc.qk_norm and sc.qk_norm.over == "all" and sc.rope and sc.rope.partial == 0.5
    assert sc.rope.scaling is not None and sc.num_kv_heads == 1 and sc.mask_kind == "causal"
    assert all(h.softcap is not None and h.W_G is not None for h in sc.heads)
    trace = Trace(compute(sc))
    order = list(dict.fromkeys(trace.op(i).stage.key for i in range(len(trace))))
    assert order == ["embed", "norm", "project", "qk_norm", "rotate", "score", "scale", "softmax", "mix", "gate",
                     "concat"]


@pytest.mark.parametrize("decimals", [1, 3, 6])
def test_every_line_checks_out(decimals: int) -> None:
    comp = compute(load_scenario(PATH))
    assert_holds(check_text(to_markdown(comp, decimals)))
    assert_holds(check_text(explanation_text(View(Trace(comp)), decimals)))
    hand = compute_hand(comp, decimals)
    assert_holds(check_text(explanation_text(View(Trace(hand)), decimals), whole=False))


@pytest.mark.parametrize(("blanks", "seed", "decimals"), [("100%", 0, 3), ("40%", 1, 2)])
def test_the_worksheet_works_from_its_own_numbers(blanks: str, seed: int, decimals: int) -> None:
    check_sheet(compute(load_scenario(PATH)), blanks, seed, decimals)


def test_decode_and_tiles_agree_with_the_trace() -> None:
    comp = compute(load_scenario(PATH))
    for mode in SCHEDULES:
        dec = decode(comp, mode)
        for h, steps in enumerate(dec.steps):
            got = np.concatenate([s.output for s in steps])
            assert np.allclose(got, comp.heads[h].output, rtol=1e-9, atol=1e-12), (mode, h)
    for h in range(len(comp.heads)):
        for tile in (1, 2, 3):
            assert tiled(comp, h, tile).matches, (h, tile)


def test_toml_round_trip_keeps_every_number() -> None:
    comp = compute(load_scenario(PATH))
    again = compute(parse_scenario(to_toml(comp.scenario), "again.toml"))
    assert np.array_equal(comp.output, again.output)
    for a, b in zip(comp.heads, again.heads):
        assert np.array_equal(a.need(QKNormed).Q_norm, b.need(QKNormed).Q_norm)
        assert np.array_equal(a.need(Capped).capped, b.need(Capped).capped)
        assert np.array_equal(a.need(Gated).gated, b.need(Gated).gated)


def test_the_final_output_joins_the_gated_heads() -> None:
    comp = compute(load_scenario(PATH))
    joined = np.concatenate([h.need(Gated).gated for h in comp.heads], axis=1)
    assert np.allclose(comp.concat, joined) and not np.allclose(comp.concat, np.concatenate([h.output for h in comp.heads], 1))
