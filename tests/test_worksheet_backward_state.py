"""Backward worksheets beyond the plain softmax head: [linear] (both normalisations, each feature map;
edges/worksheet/backward/linear.py), [mla] (edges/worksheet/backward/mla.py) and QK-norm over every head's columns
(edges/worksheet/backward/qk_all.py), with the checks of tests/test_worksheet_backward_variants.py: every key
answer is core/gradients.py's gradient on the printed page, every blank's operands are printed before it, every
key line checks out on a calculator, and the typeset PDF holds the key on its key pages and no blanked answer on
its question pages. What the page still leaves to the app says so in its rule."""

from __future__ import annotations

import numpy as np
import pytest

from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import Scenario, load_scenario, parse_scenario
from qkv_tui.edges.worksheet.backward.tables import covered
from qkv_tui.edges.worksheet.make import build

from .test_backward_torch import _builtin, shape_of, with_backward
from .test_worksheet_backward_variants import assert_backward_key_on_key_pages_only, check_page


def _linear(feature: str = "elu1", normalize: bool = True, rope: bool = False) -> Scenario:
    """scenarios/linear.toml with a target appended, its feature map and normalisation swapped in."""
    text = _builtin("linear").replace('feature = "elu1"', f'feature = "{feature}"')
    text = text.replace("normalize = true", f"normalize = {str(normalize).lower()}")
    if rope:
        text = text.replace("[linear]", "[rope]\nlayout = \"interleaved\"\nbase = 10000.0\n\n[linear]")
    n, d_out = shape_of(text)
    return with_backward(text, np.random.default_rng(7).normal(size=(n, d_out)).round(2).tolist())


LINEAR = {"linear": _linear(), "linear_relu_plain": _linear("relu", False), "linear_identity": _linear("identity", False),
          "linear_rope": _linear(rope=True)}
MLA = ("mla_learns", "mla_no_rope", "mla_pre_norm")
QK_ALL = ("qk_norm_all", "qk_norm_all_rope")
COVERED = (*sorted(LINEAR), *MLA, *QK_ALL)


def _qk_all(rope: bool) -> Scenario:
    """scenarios/qk_norm_all.toml (over = "all") with a target appended, its heads turned by RoPE after the norm."""
    text = _builtin("qk_norm_all")
    if rope:
        text += '\n[rope]\nlayout = "half"\nbase = 100.0\n'
    n, d_out = shape_of(text)
    return with_backward(text, np.random.default_rng(3).normal(size=(n, d_out)).round(2).tolist())


def _mla(name: str) -> Scenario:
    """mla_learns (its own target kept) with its rotary part unturned, a pre-norm, or its latent normalised."""
    text = _builtin("mla_learns")
    if name == "mla_no_rope":  # dk_R is then the heads' sum as it is, nothing turned back
        text = text[:text.index("[rope]")] + text[text.index("[backward]"):]
    elif name == "mla_pre_norm":
        text = text.replace("[mla]", '[norm]\nkind = "rms"\ngamma = [1.0, 2.0, 1.0, 0.5]\neps = 1e-5\n\n[mla]')
    elif name == "mla_kv_norm":
        text = text.replace("kv_norm = false", "kv_norm = true")
    return parse_scenario(text, "generated.toml")


def scenario(name: str) -> Scenario:
    if name in LINEAR:
        return LINEAR[name]
    if name in QK_ALL:
        return _qk_all(name.endswith("rope"))
    return _mla(name) if name.startswith("mla_") and name != "mla_learns" else load_scenario(name)


@pytest.mark.parametrize("name", COVERED)
@pytest.mark.parametrize(("blanks", "seed", "decimals"), [("100%", 0, 3), ("30%", 1, 2), ("100%", 2, 4)])
def test_every_backward_page_checks_out(name: str, blanks: str, seed: int, decimals: int) -> None:
    sc = scenario(name)
    assert covered(sc)
    ws = build(compute(sc), blanks, seed, decimals)
    assert check_page(ws) > 0
    text = ws.markdown()
    assert "## Backward" in text and "not cover" not in text


def test_linear_walks_its_own_tables() -> None:
    keys = {t.key.partition(".")[0] for t in build(compute(LINEAR["linear"]), "0").tables}
    assert {"dV", "dP", "D", "dA", "dphiQ", "dphiK", "dQu", "dKu", "dW_Q", "dW_K", "dW_V", "dX_in"} <= keys
    assert not {"dS", "dscores"} & keys  # no softmax, no scale
    plain = {t.key.partition(".")[0] for t in build(compute(LINEAR["linear_relu_plain"]), "0").tables}
    assert "dA" in plain and "D" not in plain  # without normalize no row was divided: dA is dW itself


def test_mla_walks_the_latent_layer() -> None:
    keys = {t.key.partition(".")[0] for t in build(compute(load_scenario("mla_learns")), "0").tables}
    assert {"dQu", "dKu", "mqR", "mkR", "mkRraw", "mcKV", "mW_UK", "mW_UV", "mW_KR", "mW_Q", "mW_DKV", "dX_in"} <= keys
    assert not {"dW_K", "dW_V", "dQt"} & keys  # the heads' multiplied-through weights are not what trains


def test_mla_sums_the_shared_rotary_key_as_its_description_says() -> None:
    ws = build(compute(load_scenario("mla_learns")), "100%")
    assert any(b.working == "dk_R'[I,0] = Σ over the heads of dK[I,2] = 0.098 + 0.098 = 0.196" for b in ws.blanks)


def test_qk_norm_over_every_head_works_on_the_wide_rows() -> None:
    ws = build(compute(scenario("qk_norm_all")), "0")
    keys = [t.key for t in ws.tables if t.stage == "backward"]
    assert {"aqroot", "aqhat", "aqm", "akroot", "akhat", "akm.0", "akm.1", "akc.0", "akc.1", "dQ.0", "dQ.1", "dK.0",
            "dK.1", "dgamma_q", "dgamma_k"} <= set(keys)
    assert max(keys.index("dKu.0"), keys.index("dKu.1")) < keys.index("aqm") < keys.index("dW_Q.0")  # every head first


def _qk_all_grouped() -> Scenario:
    """qk_norm_all with both query heads reading one K/V head: each K/V head's dK then mixes its readers' shares."""
    text = _builtin("qk_norm_all").replace("num_heads = 2", "num_heads = 2\nnum_kv_heads = 1")
    start, end = text.index("W_K = ["), text.index("[qk_norm]")
    text = (text[:start] + "W_K = [[0, 1], [1, 0], [0, 1], [1, 0]]\nW_V = [[1, 0], [0, 1], [0, 0], [1, 1]]\n\n"
            + text[end:].replace("gamma_k = [1, 1, 1, 1]", "gamma_k = [1, 1]"))
    n, d_out = shape_of(text)
    return with_backward(text, np.random.default_rng(4).normal(size=(n, d_out)).round(2).tolist())


def test_qk_norm_over_every_head_with_grouped_kv_heads_says_so_in_a_rule() -> None:
    ws = build(compute(_qk_all_grouped()), "100%")
    assert not [t for t in ws.tables if t.stage == "backward"]
    assert "do not cover QK-norm over every head's columns together with grouped K/V heads" in ws.markdown()


@pytest.mark.parametrize(("name", "what"), [("mla_kv_norm", "latent attention ([mla]) with a latent norm")])
def test_what_is_left_to_the_app_is_named(name: str, what: str) -> None:
    ws = build(compute(scenario(name)), "100%")
    assert not [t for t in ws.tables if t.stage == "backward"]
    assert f"do not cover {what}" in ws.markdown()


@pytest.mark.parametrize("name", ["linear", "linear_rope", "mla_learns", "qk_norm_all"])
def test_the_pdf_prints_the_backward_key_on_the_key_pages_only(name: str) -> None:
    pytest.importorskip("pypdf")
    assert_backward_key_on_key_pages_only(build(compute(scenario(name)), "25%"))
