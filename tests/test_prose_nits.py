"""Smaller sentences the fourth review found untrue, each pinned to what the numbers (or the source) say:
the gate mitigates sinks and is first a non-linearity between W_V and W_O (Qiu et al. 2025); dEmbed under a
norm computes dX̂; the delta rule's mask fades by each token's own g (data-dependent: a function of distance
only for a constant g); unit keys make the delta write an exact overwrite; the worksheet key names D by row."""

from __future__ import annotations

import numpy as np

from qkv_tui.core.engine import compute
from qkv_tui.core.gradients import gradients
from qkv_tui.core.scenario import builtin_dir, load_scenario, parse_scenario
from qkv_tui.kernels.deltanet import DeltaForward, decay_mask
from qkv_tui.teach.trace import Trace


def test_the_gate_mitigates_sinks_and_is_a_non_linearity_between_w_v_and_w_o() -> None:
    sc = load_scenario("gated")
    words = " ".join(sc.description.split())
    assert "lose their attention sinks" not in words
    assert "found the gate mitigates attention sinks" in words
    assert "non-linearity between W_V and W_O" in words
    stage = Trace(compute(sc)).meaning("gate", 0)
    assert "removes" not in stage and "mitigates attention sinks and massive activations" in stage
    assert stage.index("non-linearity between W_V and W_O") < stage.index("mitigates")  # the paper's first benefit
    assert "σ(X·W_G)" in stage  # no [norm] in gated.toml: the gate reads X


PRE_NORM_BACKWARD = (builtin_dir() / "pre_norm.toml").read_text(encoding="utf-8") + """
[backward]
dO = [[1, 0, -1], [0, 1, 0], [0.5, 0, 0]]
"""


def test_dembed_under_a_norm_says_it_computes_dx_hat() -> None:
    comp = compute(parse_scenario(PRE_NORM_BACKWARD, "pre_norm_backward.toml"))
    trace = Trace(comp)
    words = trace.meaning("dembed", None)
    assert "Back to X̂, the normalised X. Each row of X̂" in words
    assert " dX̂ = dQ·W_Qᵀ + dK·W_Kᵀ + dV·W_Vᵀ" in words and " dX = dQ" not in words
    assert "This is dX̂, the gradient at the norm's output; dNorm next carries it back through the norm to dX" in words
    g = gradients(comp)
    assert np.array_equal(trace.matrix("dX_in", None), g.dX_norm)  # what the stage shows: dX̂
    assert not np.allclose(g.dX_norm, g.dX)  # and it is not dX
    first = next(trace._build(i) for i in range(len(trace)) if trace.segment_at(i).target == "dX_in")
    assert first.arithmetic.startswith("dX̂[I,0] = ")
    plain = Trace(compute(load_scenario("learn_to_look"))).meaning("dembed", None)
    assert "X is data, not a weight" in plain and " dX = dQ·W_Qᵀ" in plain  # no norm: dX it is


def test_the_delta_rules_mask_depends_on_each_tokens_g() -> None:
    given = load_scenario("deltanet")
    words = " ".join(given.description.split())
    assert "decays with distance" not in words
    assert "each token computes its g from its X̂" in words
    assert "here every g is −0.5, so the mask is e^(−0.5·(t − s)), a function of the distance alone" in words
    dn = given.deltanet
    assert dn is not None and dn.g is not None and np.all(np.asarray(dn.g) == -0.5)
    head = compute(given).heads[0]
    assert head.part(DeltaForward) is not None
    D = decay_mask(head.part(DeltaForward).g)
    assert np.isclose(D[1, 0], D[2, 1])  # a constant g: equal distances, equal fading
    learns = compute(load_scenario("deltanet_learns")).heads[0]  # g from the weights, token by token
    D = decay_mask(learns.need(DeltaForward).g)
    assert not np.isclose(D[1, 0], D[2, 1])  # the same distance, faded differently: data-dependent


def test_unit_keys_make_the_delta_write_an_exact_overwrite() -> None:
    words = Trace(compute(load_scenario("deltanet"))).meaning("l2norm", 0)
    assert "Sᵀk = (1 − β)·(what S held at k) + β·v" in words
    assert "I − βkkᵀ has eigenvalues 1 (across k) and 1 − β (along k)" in words
    for name in ("deltanet", "deltanet_learns"):
        head = compute(load_scenario(name)).heads[0]
        dn = head.part(DeltaForward)
        assert dn is not None
        for t in range(len(dn.beta)):
            k, beta = dn.k[t], float(dn.beta[t])
            held = dn.decayed[t].T @ k  # (d_v,) what S held at k, before the write
            v = held + dn.delta[t] / beta  # δ = (v − Sᵀk)·β
            assert np.allclose(dn.S[t].T @ k, (1 - beta) * held + beta * v, atol=1e-5)
            eig = np.sort(np.linalg.eigvalsh(np.eye(len(k)) - beta * np.outer(k, k)))
            assert np.allclose(eig, sorted([1 - beta] + [1.0] * (len(k) - 1)), atol=1e-5)


def test_the_worksheet_key_names_d_by_its_row(cli) -> None:  # type: ignore[no-untyped-def]
    page = cli("learn_to_look", "--export", "worksheet", "--format", "markdown")
    assert page.code == 0
    assert "D[I] = Σ dO_h[I] ⊙ output[I]" in page.out and "D[I,D]" not in page.out
    assert "dP[I,love] = " in page.out  # a table of many columns keeps row and column
