"""The backward pass, [backward]'s train list, the softmax backward and the editor read the variants through their
faces (issue 30): the gradient records have no field per variant, each part's record read backwards is found by its
type (``HeadGrad.part``, ``Gradients.part``), and the modules that walk the faces name no variant, as
benchmarks/variant_reach.py reads them. The records' numbers are checked here against NumPy written out in the test."""

from __future__ import annotations

import ast
import dataclasses
import re

import numpy as np

from qkv_tui.core.engine import compute
from qkv_tui.core.gradients import Gradients, HeadGrad, gradients
from qkv_tui.core.scenario import builtin_dir, load_scenario, parse_scenario
from qkv_tui.core.variants import FEATURES
from qkv_tui.core.variants.backward import trainable
from qkv_tui.kernels.deltanet_backward import DeltaBack, GatesBack
from qkv_tui.kernels.gate import Gated
from qkv_tui.kernels.gate_backward import GateBack
from qkv_tui.kernels.linear_backward import LinearBack
from qkv_tui.kernels.mla_backward import MlaBack

from .conftest import ROOT
from .test_views_ask_the_parts import _reach

WALKERS = ("core/gradients.py", "core/variants/backward.py", "core/cell_edit.py", "kernels/attention_backward.py",
           "edges/worksheet/columns.py")
# the documented order of the train list, as the messages name every weight (docs/scenario-format.md, [backward])
ORDER = ("W_Q", "W_K", "W_V", "W_O", "W_G", "b_Q", "b_K", "b_V", "b_O", "gamma", "beta", "gamma_q", "gamma_k", "sinks",
         "W_a", "W_b", "A_log", "dt_bias", "W_DKV", "W_UK", "W_UV", "W_KR", "W_DQ", "W_UQ", "gamma_kv", "W_U")


def test_the_walkers_name_no_variant() -> None:
    reach = _reach()
    named = {}
    for module in WALKERS:
        used = reach.names_in(ast.parse((ROOT / "qkv_tui" / module).read_text(encoding="utf-8")))
        for variant, pattern in reach.VARIANTS.items():
            hits = sorted(n for n in used if re.search(pattern, n))
            if hits:
                named[(module, variant)] = hits
    assert not named, named


def test_the_gradient_records_have_no_field_per_variant() -> None:
    for record in (HeadGrad, Gradients):
        names = {f.name for f in dataclasses.fields(record)}
        assert not names & {"gate", "linear", "deltanet", "gates", "mla"}, (record.__name__, names)


def test_the_train_list_keeps_its_order() -> None:
    assert trainable(tuple(f.trains for f in FEATURES if f.trains is not None)) == ORDER


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def test_the_gate_read_backwards_is_its_heads_record() -> None:
    """dW_G = X̂ᵀ·(dJ ⊙ out ⊙ g ⊙ (1 − g)) and dO_h = dJ ⊙ g, each head's dJ its columns of dO·W_Oᵀ."""
    text = (builtin_dir() / "gated.toml").read_text(encoding="utf-8")
    sc0 = parse_scenario(text, "g.toml")
    n, d_out = sc0.X.shape[0], compute(sc0).output.shape[1]
    rng = np.random.default_rng(3)
    dO = rng.normal(size=(n, d_out)).round(2)
    rows = ", ".join("[" + ", ".join(repr(float(x)) for x in row) + "]" for row in dO)
    sc = parse_scenario(text + f"\n[backward]\ndO = [{rows}]\n", "g.toml")
    comp = compute(sc)
    g = gradients(comp)
    d_concat = dO if sc.W_O is None else dO @ sc.W_O.T
    start = 0
    for hr, hg in zip(comp.heads, g.heads, strict=True):
        dJ = d_concat[:, start:start + hr.d_v]
        start += hr.d_v
        gate = _sigmoid(comp.X_in @ hr.need(Gated).W_G)
        gb = hg.part(GateBack)
        assert gb is not None and hg.part(LinearBack) is None and hg.part(DeltaBack) is None
        np.testing.assert_allclose(gb.d_output, dJ * gate, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(gb.dW_G, comp.X_in.T @ (dJ * hr.output * gate * (1.0 - gate)), rtol=1e-12,
                                   atol=1e-14)
        np.testing.assert_array_equal(hg.dO, gb.d_output)  # what reaches the head's own output
    assert g.part(GatesBack) is None and g.part(MlaBack) is None


def test_each_builtin_that_learns_holds_the_records_of_its_parts() -> None:
    plain = gradients(compute(load_scenario(builtin_dir() / "learn_to_look.toml")))
    assert not plain.parts and not any(hg.parts for hg in plain.heads)
    delta = gradients(compute(load_scenario(builtin_dir() / "deltanet_learns.toml")))
    assert all(hg.part(DeltaBack) is not None and hg.part(LinearBack) is None for hg in delta.heads)
    # the table computes β = σ(X̂·W_b): W_b's gradient is X̂ᵀ·db with db = dβ ⊙ β ⊙ (1 − β), on the layer's record
    gates = delta.part(GatesBack)
    sc = load_scenario(builtin_dir() / "deltanet_learns.toml")
    assert gates is not None and gates.dW_b is not None and sc.deltanet is not None and sc.deltanet.W_b is not None
    comp = compute(sc)
    beta = _sigmoid(comp.X_in @ sc.deltanet.W_b)
    dbeta = np.stack([hg.need(DeltaBack).dbeta for hg in delta.heads], axis=1)
    np.testing.assert_allclose(gates.dW_b, comp.X_in.T @ (dbeta * beta * (1.0 - beta)), rtol=1e-10, atol=1e-13)
    latent = gradients(compute(load_scenario(builtin_dir() / "mla_learns.toml")))
    assert latent.part(MlaBack) is not None and latent.part(GatesBack) is None
