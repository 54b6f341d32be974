"""Every gradient of [backward] (core/gradients.py) against torch.autograd on the forward written again in
PyTorch (tests/backward_torch.py), to 1e-9, on generated scenarios that combine the variants and on every
built-in; against central finite differences as a second check; the SGD steps against torch.optim.SGD."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv_tui.core.engine import compute
from qkv_tui.core.gradients import Gradients, gradients
from qkv_tui.core.scenario import Scenario, parse_scenario
from qkv_tui.core.training import steps
from qkv_tui.kernels.gate_backward import GateBack
from qkv_tui.kernels.sharing import kv_owners

from .backward_torch import TOL, backward_checked, close, forward, loss_of, params_of, torch
from .variants_cases import ModernCase, matrix, modern_cases

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
# a [model] file takes nothing beside it but a title and description (importers/expand.py)
# [linear] and [deltanet] have no backward pass yet (the loader refuses [backward] beside them); [mla]'s is checked
# by tests/test_backward_mla_torch.py and tests/test_backward_mla_lines.py
# [differential]'s is checked by tests/test_differential_scenario_grads_torch.py; [indexer] and [ssd] refuse one
NO_BACKWARD = ("[model]", "[mla]", "[linear]", "[deltanet]", "[differential]", "[indexer]", "[ssd]", "[shared_kv]")
BUILT_INS = sorted(p.stem for p in SCENARIOS.glob("*.toml") if not any(t in p.read_text() for t in NO_BACKWARD))


def with_backward(text: str, rows: list[list[float]], *, key: str = "target", extra: str = "") -> Scenario:
    body = ",\n".join("  [" + ", ".join(repr(float(x)) for x in row) + "]" for row in rows)
    return parse_scenario(f"{text}\n\n[backward]\n{key} = [\n{body}\n]\n{extra}", "generated.toml")


def shape_of(text: str) -> tuple[int, int]:
    comp = compute(parse_scenario(text, "generated.toml"))
    return comp.output.shape  # type: ignore[return-value]


def check(sc: Scenario) -> Gradients:
    g = gradients(compute(sc))
    P = params_of(sc)
    final, keep = forward(sc, P)
    backward_checked(sc, g, P, final)
    if "X_norm" in keep:
        close(g.dX_norm, keep["X_norm"].grad, "dX_norm")
    owners = kv_owners([sc.kv_head(h) for h in range(len(sc.heads))], sc.heads)
    for h, hg in enumerate(g.heads):
        close(hg.dW_Q, P[f"W_Q{h}"].grad, f"W_Q of head {h + 1}")
        close(hg.dQ, keep[f"Q{h}"].grad, f"dQ of head {h + 1}")
        if f"b_Q{h}" in P:
            close(hg.db_Q, P[f"b_Q{h}"].grad, f"b_Q of head {h + 1}")
        if f"W_G{h}" in P:
            assert hg.part(GateBack) is not None
            close(hg.part(GateBack).dW_G, P[f"W_G{h}"].grad, f"W_G of head {h + 1}")
        if f"sink{h}" in P:
            close(hg.attend.dsink, P[f"sink{h}"].grad, f"sink of head {h + 1}")
        # masked cells: dS and dscaled exactly 0
        assert (hg.attend.dS[~sc.allow] == 0).all() and (hg.attend.dscaled[~sc.allow] == 0).all()
        assert not np.signbit(hg.attend.dS[~sc.allow]).any()
    for kv in g.kv_heads:
        o = kv.heads[0]
        assert all(owners[h] == o for h in kv.heads)
        close(kv.dW_K, P[f"W_K{o}"].grad, f"W_K of K/V head {o}")
        close(kv.dW_V, P[f"W_V{o}"].grad, f"W_V of K/V head {o}")
        close(kv.dK, keep[f"K{o}"].grad, f"dK of K/V head {o}")
        close(kv.dV, keep[f"V{o}"].grad, f"dV of K/V head {o}")
        for name, ours in (("b_K", kv.db_K), ("b_V", kv.db_V)):
            if f"{name}{o}" in P:
                close(ours, P[f"{name}{o}"].grad, f"{name} of K/V head {o}")
        # each reader's own contribution sums to the K/V head's gradient
        assert np.allclose(sum(g.heads[h].dW_K for h in kv.heads), kv.dW_K, **TOL)
    return g


def _softcapped(case: ModernCase, cap: float | None) -> str:
    return case.toml if cap is None else f"softcap = {cap!r}\n{case.toml}"


@settings(max_examples=60, deadline=None)
@given(modern_cases(), st.sampled_from([None, 1.5, 4.0]), st.data())
def test_generated_scenarios_agree_with_autograd(case: ModernCase, cap: float | None, data: st.DataObject) -> None:
    text = _softcapped(case, cap)
    n, d_out = shape_of(text)
    target = data.draw(matrix(n, d_out))
    check(with_backward(text, target))


@settings(max_examples=20, deadline=None)
@given(modern_cases(rope=True), st.data())
def test_generated_rope_scenarios_from_dO_agree_with_autograd(case: ModernCase, data: st.DataObject) -> None:
    n, d_out = shape_of(case.toml)
    g = check(with_backward(case.toml, data.draw(matrix(n, d_out)), key="dO"))
    assert g.loss is None


def _builtin(name: str) -> str:
    return (SCENARIOS / f"{name}.toml").read_text()


@pytest.mark.parametrize("name", BUILT_INS)
def test_every_builtin_agrees_with_autograd(name: str) -> None:
    text = _builtin(name)
    if "[backward]" in text:
        check(parse_scenario(text, f"{name}.toml"))
        return
    n, d_out = shape_of(text)
    rng = np.random.default_rng(len(name))
    check(with_backward(text, rng.normal(size=(n, d_out)).round(2).tolist()))
    check(with_backward(text, rng.normal(size=(n, d_out)).round(2).tolist(), key="dO"))


@pytest.mark.parametrize("name", ["gated", "qk_norm_all", "gqa", "sink", "pre_norm", "rope_scaling", "softcap"])
def test_central_differences_agree(name: str) -> None:
    """A second check that shares nothing with autograd: nudge one weight by ±h, watch the loss."""
    text = _builtin(name)
    n, d_out = shape_of(text)
    rng = np.random.default_rng(7)
    sc = with_backward(text, rng.normal(size=(n, d_out)).round(2).tolist())
    g = gradients(compute(sc))
    head = sc.heads[0]
    h = 1e-6
    for role, ours in (("W_Q", g.heads[0].dW_Q), ("W_V", g.kv_heads[0].dW_V if g.shared else g.heads[0].dW_V)):
        W = getattr(head, role)
        for r, c in ((0, 0), (W.shape[0] - 1, W.shape[1] - 1)):
            def loss_at(delta: float, role: str = role, r: int = r, c: int = c) -> float:
                import dataclasses

                W2 = getattr(head, role).copy()
                W2[r, c] += delta
                W2.setflags(write=False)
                readers = [i for i, hd in enumerate(sc.heads) if getattr(hd, role) is getattr(head, role)]
                heads = tuple(dataclasses.replace(hd, **{role: W2}) if i in readers else hd for i, hd in enumerate(sc.heads))
                value = gradients(compute(dataclasses.replace(sc, heads=heads))).loss
                assert value is not None
                return value

            numeric = (loss_at(h) - loss_at(-h)) / (2 * h)
            assert abs(numeric - ours[r, c]) <= 1e-6 * max(1.0, abs(numeric)), (role, r, c)


def test_training_steps_agree_with_torch_sgd() -> None:
    text = _builtin("gqa")
    n, d_out = shape_of(text)
    target = np.random.default_rng(3).normal(size=(n, d_out)).round(2).tolist()
    sc = with_backward(text, target, extra="lr = 0.05\nsteps = 5\n")
    ours = list(steps(sc))
    assert [s.step for s in ours] == list(range(6))
    P = params_of(sc)
    trained = [p for k, p in P.items() if k != "X"]
    opt = torch.optim.SGD(trained, lr=0.05)
    for k in range(6):
        opt.zero_grad()
        final, _ = forward(sc, P)
        loss = loss_of(sc, final)
        assert ours[k].loss is not None and abs(ours[k].loss - loss.item()) <= 1e-9 * max(1.0, loss.item()), k
        if k < 5:  # train[k] is the state after k updates: five in all
            loss.backward()
            opt.step()
    last = ours[-1].scenario
    for h, head in enumerate(last.heads):
        assert np.allclose(head.W_Q, P[f"W_Q{h}"].detach().numpy(), **TOL)
    assert ours[-1].loss is not None and ours[0].loss is not None and ours[-1].loss < ours[0].loss


def test_train_list_limits_what_moves() -> None:
    text = _builtin("i_love_ai")
    sc = with_backward(text, [[0, 0, 0], [1, 1, 1], [0, 1, 0]], extra='steps = 2\ntrain = ["W_Q"]\n')
    last = list(steps(sc))[-1].scenario
    assert not np.array_equal(last.heads[0].W_Q, sc.heads[0].W_Q)
    assert np.array_equal(last.heads[0].W_K, sc.heads[0].W_K) and np.array_equal(last.heads[0].W_V, sc.heads[0].W_V)
