"""[backward] through [mla] (core/gradients.py, kernels/mla_backward.py) against torch.autograd on DeepSeek's
latent attention written again here in PyTorch (float64), to 1e-9, on generated scenarios: both query forms,
kv_norm and q_norm on and off, with and without W_O, the pre-norm, RoPE and a soft-cap. Central finite
differences are a second check, and the SGD steps are checked against torch.optim.SGD."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv_tui.core.engine import compute
from qkv_tui.core.gradients import Gradients, gradients
from qkv_tui.core.scenario import Scenario, parse_scenario
from qkv_tui.core.training import steps
from qkv_tui.kernels.mla_backward import MlaBack

from .backward_torch import TOL, leaf, loss_of, rms, torch

MLA_WEIGHTS = ("W_DKV", "W_UK", "W_UV", "W_KR", "W_Q", "W_DQ", "W_UQ")


@dataclasses.dataclass(frozen=True)
class Case:
    n: int
    d_model: int
    H: int
    d_c: int
    d_nope: int
    d_rope: int
    d_v: int
    d_cq: int | None  # None: a plain W_Q
    kv_norm: bool
    q_norm: bool
    W_O: bool
    pre_norm: str | None  # "rms", "layer" or None
    rope: str | None  # "interleaved", "half" or None
    softcap: float | None
    causal: bool
    seed: int


def _mat(m: np.ndarray) -> str:
    return "[" + ", ".join("[" + ", ".join(repr(float(v)) for v in row) + "]" for row in m) + "]"


def _vec(v: np.ndarray) -> str:
    return "[" + ", ".join(repr(float(x)) for x in v) + "]"


def scenario_text(c: Case, places: int | None = None) -> str:
    """``places``: every input rounded to so many decimals (short numbers, as a hand computation wants)."""
    base = np.random.default_rng(c.seed)

    class Rounded:
        def normal(self, size: tuple[int, ...]) -> np.ndarray:
            values = base.normal(size=size)
            return values if places is None else values.round(places)

        def uniform(self, low: float, high: float, size: int) -> np.ndarray:
            values = base.uniform(low, high, size=size)
            return values if places is None else values.round(places)

    rng = Rounded()
    d_qk = c.d_nope + c.d_rope
    lines = [f"tokens = {json.dumps([f't{i}' for i in range(c.n)])}", f"X = {_mat(rng.normal(size=(c.n, c.d_model)))}"]
    if c.causal:
        lines.append('mask = "causal"')
    if c.softcap is not None:
        lines.append(f"softcap = {c.softcap!r}")
    lines += ["", "[mla]", f"num_heads = {c.H}", f"d_nope = {c.d_nope}", f"d_rope = {c.d_rope}", f"d_v = {c.d_v}",
              f"W_DKV = {_mat(rng.normal(size=(c.d_model, c.d_c)))}",
              f"W_UK = {_mat(rng.normal(size=(c.d_c, c.H * c.d_nope)))}",
              f"W_UV = {_mat(rng.normal(size=(c.d_c, c.H * c.d_v)))}",
              f"W_KR = {_mat(rng.normal(size=(c.d_model, c.d_rope)))}"]
    if c.d_cq is None:
        lines.append(f"W_Q = {_mat(rng.normal(size=(c.d_model, c.H * d_qk)))}")
    else:
        lines += [f"W_DQ = {_mat(rng.normal(size=(c.d_model, c.d_cq)))}",
                  f"W_UQ = {_mat(rng.normal(size=(c.d_cq, c.H * d_qk)))}"]
    if c.kv_norm:
        lines += ["kv_norm = true", f"gamma_kv = {_vec(rng.uniform(0.5, 1.5, size=c.d_c))}"]
    if c.q_norm and c.d_cq is not None:
        lines += ["q_norm = true", f"gamma_q = {_vec(rng.uniform(0.5, 1.5, size=c.d_cq))}"]
    if c.rope is not None:
        lines += ["", "[rope]", f'layout = "{c.rope}"', "base = 100.0"]
    if c.pre_norm is not None:
        lines += ["", "[norm]", f'kind = "{c.pre_norm}"', f"gamma = {_vec(rng.uniform(0.5, 1.5, size=c.d_model))}"]
        if c.pre_norm == "layer":
            lines.append(f"beta = {_vec(rng.normal(size=c.d_model))}")
    if c.W_O:
        lines += ["", "[output]", f"W_O = {_mat(rng.normal(size=(c.H * c.d_v, 3)))}"]
    return "\n".join(lines) + "\n"


@st.composite
def cases(draw: st.DrawFn) -> Case:
    d_cq = draw(st.sampled_from([None, 1, 3]))
    return Case(
        n=draw(st.integers(1, 4)), d_model=draw(st.integers(2, 4)), H=draw(st.integers(1, 3)),
        d_c=draw(st.integers(1, 3)), d_nope=draw(st.integers(1, 2)), d_rope=draw(st.sampled_from([2, 4])),
        d_v=draw(st.integers(1, 2)), d_cq=d_cq, kv_norm=draw(st.booleans()),
        q_norm=d_cq is not None and draw(st.booleans()), W_O=draw(st.booleans()),
        pre_norm=draw(st.sampled_from([None, "rms", "layer"])), rope=draw(st.sampled_from([None, "interleaved", "half"])),
        softcap=draw(st.sampled_from([None, 1.5])), causal=draw(st.booleans()), seed=draw(st.integers(0, 10_000)),
    )


def with_backward(text: str, key: str = "target", extra: str = "", seed: int = 0) -> Scenario:
    n, d_out = compute(parse_scenario(text, "generated.toml")).output.shape
    rows = np.random.default_rng(seed + 1).normal(size=(n, d_out)).round(2)
    return parse_scenario(f"{text}\n[backward]\n{key} = {_mat(rows)}\n{extra}", "generated.toml")


def params_of(sc: Scenario) -> dict[str, Any]:
    mla = sc.mla
    assert mla is not None
    P = {"X": leaf(sc.X)}
    for name in MLA_WEIGHTS:
        if getattr(mla, name) is not None:
            P[name] = leaf(getattr(mla, name))
    if mla.kv_norm:
        P["gamma_kv"] = leaf(mla.gamma_kv)
    if mla.q_norm:
        P["gamma_q"] = leaf(mla.gamma_q)
    if sc.W_O is not None:
        P["W_O"] = leaf(sc.W_O)
    if sc.norm is not None:
        P["gamma"] = leaf(sc.norm.gamma)
        if sc.norm.beta is not None:
            P["beta"] = leaf(sc.norm.beta)
    return P


def rope(x: Any, layout: str, base: float) -> Any:
    """RoPE by position 0 … n − 1 on (n, d): interleaved pairs (0, 1), (2, 3), … or halves (i, i + d/2)."""
    n, d = x.shape
    inv = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    ang = torch.arange(n, dtype=torch.float64)[:, None] * inv[None, :]  # (n, d/2)
    cos, sin = torch.cos(ang), torch.sin(ang)
    if layout == "interleaved":
        a, b = x[:, 0::2], x[:, 1::2]
        return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=2).reshape(n, d)
    a, b = x[:, :d // 2], x[:, d // 2:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=1)


def forward(sc: Scenario, P: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The latent layer, head by head, as DeepSeek-V2 writes it; ``keep`` holds intermediates to read grads of."""
    mla = sc.mla
    assert mla is not None
    keep: dict[str, Any] = {}
    X = P["X"]
    if sc.norm is not None:
        if sc.norm.kind == "rms":
            X = rms(X, P["gamma"], sc.norm.eps)
        else:
            X = torch.nn.functional.layer_norm(X, (X.shape[1],), P["gamma"], P.get("beta"), sc.norm.eps)
        X.retain_grad()
        keep["X_norm"] = X
    c_KV = X @ P["W_DKV"]
    if mla.kv_norm:
        c_KV = rms(c_KV, P["gamma_kv"], mla.eps)
    c_KV.retain_grad()
    keep["c_KV"] = c_KV
    if "W_Q" in P:
        Q_all = X @ P["W_Q"]
    else:
        c_Q = X @ P["W_DQ"]
        if mla.q_norm:
            c_Q = rms(c_Q, P["gamma_q"], mla.eps)
        Q_all = c_Q @ P["W_UQ"]
    k_R = X @ P["W_KR"]
    r = mla.rope
    if r is not None:
        k_R = rope(k_R, r.layout, r.base)
    k_R.retain_grad()
    keep["k_R"] = k_R
    allow = torch.tensor(np.asarray(sc.allow))
    outs = []
    d_qk = mla.d_nope + mla.d_rope
    for h in range(mla.num_heads):
        q_C = Q_all[:, h * d_qk:h * d_qk + mla.d_nope]
        q_R = Q_all[:, h * d_qk + mla.d_nope:(h + 1) * d_qk]
        if r is not None:
            q_R = rope(q_R, r.layout, r.base)
        k_C = c_KV @ P["W_UK"][:, h * mla.d_nope:(h + 1) * mla.d_nope]
        v_C = c_KV @ P["W_UV"][:, h * mla.d_v:(h + 1) * mla.d_v]
        q = torch.cat([q_C, q_R], dim=1)
        k = torch.cat([k_C, k_R], dim=1)
        q.retain_grad()
        keep[f"q{h}"] = q
        s = q @ k.T / math.sqrt(d_qk)
        cap = sc.heads[h].softcap
        if cap is not None:
            s = cap * torch.tanh(s / cap)
        s = torch.where(allow, s, torch.tensor(float("-inf"), dtype=torch.float64))
        outs.append(torch.softmax(s, dim=1) @ v_C)
    concat = torch.cat(outs, dim=1)
    return (concat if "W_O" not in P else concat @ P["W_O"]), keep


def close(ours: Any, theirs: Any, what: str) -> None:
    assert ours is not None and theirs is not None, what
    np.testing.assert_allclose(np.asarray(ours), theirs.detach().numpy(), **TOL, err_msg=what)


def check(sc: Scenario) -> Gradients:
    g = gradients(compute(sc))
    m = g.part(MlaBack)
    assert m is not None
    P = params_of(sc)
    final, keep = forward(sc, P)
    loss = loss_of(sc, final)
    loss.backward()
    if g.loss is not None:
        assert abs(g.loss - loss.item()) <= 1e-9 * max(1.0, abs(g.loss))
    close(g.dX, P["X"].grad, "dX")
    if "X_norm" in keep:
        close(g.dX_norm, keep["X_norm"].grad, "dX_norm")
    close(m.dX, keep.get("X_norm", P["X"]).grad, "dX̂")
    ours = {"W_DKV": m.dW_DKV, "W_UK": m.dW_UK, "W_UV": m.dW_UV, "W_KR": m.dW_KR, "W_Q": m.dW_Q, "W_DQ": m.dW_DQ,
            "W_UQ": m.dW_UQ, "gamma_kv": m.dgamma_kv, "gamma_q": m.dgamma_q, "W_O": g.dW_O, "gamma": g.dgamma,
            "beta": g.dbeta}
    for name, value in ours.items():
        if name in P:
            close(value, P[name].grad, name)
        else:
            assert value is None, name
    close(m.dc_KV, keep["c_KV"].grad, "dc_KV")
    close(m.dk_R, keep["k_R"].grad, "dk_R: the sum over the heads")
    for h, hg in enumerate(g.heads):
        close(hg.attend.dQ_used, keep[f"q{h}"].grad, f"dq = [dq_C | dq_R] of head {h + 1}")
        assert (hg.attend.dS[~sc.allow] == 0).all() and not np.signbit(hg.attend.dS[~sc.allow]).any()
    np.testing.assert_allclose(sum(m.dk_R_heads), m.dk_R, **TOL)
    return g


@settings(max_examples=50, deadline=None)
@given(cases())
def test_generated_mla_scenarios_agree_with_autograd(case: Case) -> None:
    check(with_backward(scenario_text(case), seed=case.seed))


@settings(max_examples=15, deadline=None)
@given(cases())
def test_generated_mla_scenarios_from_dO_agree_with_autograd(case: Case) -> None:
    g = check(with_backward(scenario_text(case), key="dO", seed=case.seed))
    assert g.loss is None


FULL = Case(n=3, d_model=4, H=2, d_c=2, d_nope=2, d_rope=2, d_v=2, d_cq=3, kv_norm=True, q_norm=True, W_O=True,
            pre_norm="rms", rope="interleaved", softcap=None, causal=True, seed=5)


@pytest.mark.parametrize("case", [FULL, dataclasses.replace(FULL, d_cq=None, q_norm=False, pre_norm=None)])
def test_central_differences_agree(case: Case) -> None:
    """A second check that shares nothing with autograd: nudge one weight by ±h, watch the loss."""
    sc = with_backward(scenario_text(case), seed=3)
    mla = sc.mla
    assert mla is not None
    m = gradients(compute(sc)).part(MlaBack)
    assert m is not None
    h = 1e-6
    named = {"W_DKV": m.dW_DKV, "W_UK": m.dW_UK, "W_UV": m.dW_UV, "W_KR": m.dW_KR, "W_Q": m.dW_Q, "W_DQ": m.dW_DQ,
             "W_UQ": m.dW_UQ}
    for name, ours in named.items():
        W = getattr(mla, name)
        if W is None:
            continue
        assert ours is not None
        for r, c in ((0, 0), (W.shape[0] - 1, W.shape[1] - 1)):
            def loss_at(delta: float, name: str = name, r: int = r, c: int = c) -> float:
                W2 = np.array(getattr(mla, name))
                W2[r, c] += delta
                W2.setflags(write=False)
                new = dataclasses.replace(mla, **{name: W2})
                heads = tuple(dataclasses.replace(hd, W_Q=q, W_K=k, W_V=v)
                              for hd, (_, q, k, v) in zip(sc.heads, new.head_weights(), strict=True))
                value = gradients(compute(dataclasses.replace(sc, mla=new, heads=heads))).loss
                assert value is not None
                return value

            numeric = (loss_at(h) - loss_at(-h)) / (2 * h)
            assert abs(numeric - ours[r, c]) <= 1e-6 * max(1.0, abs(numeric)), (name, r, c)


@pytest.mark.parametrize("case", [FULL, dataclasses.replace(FULL, d_cq=None, q_norm=False, kv_norm=False)])
def test_training_steps_agree_with_torch_sgd(case: Case) -> None:
    sc = with_backward(scenario_text(case), extra="lr = 0.01\nsteps = 4\n", seed=9)
    assert sc.backward is not None
    assert {"W_DKV", "W_UK", "W_UV", "W_KR", "W_O", "gamma"} <= set(sc.backward.train)
    assert "W_K" not in sc.backward.train and "W_V" not in sc.backward.train
    ours = list(steps(sc))
    P = params_of(sc)
    opt = torch.optim.SGD([p for k, p in P.items() if k != "X"], lr=0.01)
    for k in range(5):
        opt.zero_grad()
        final, _ = forward(sc, P)
        loss = loss_of(sc, final)
        assert ours[k].loss is not None and abs(ours[k].loss - loss.item()) <= 1e-9 * max(1.0, loss.item()), k
        if k < 4:
            loss.backward()
            opt.step()
    last = ours[-1].scenario.mla
    assert last is not None
    for name in MLA_WEIGHTS:
        if name in P:
            np.testing.assert_allclose(getattr(last, name), P[name].detach().numpy(), **TOL, err_msg=name)
    if last.kv_norm:
        np.testing.assert_allclose(last.gamma_kv, P["gamma_kv"].detach().numpy(), **TOL)
    assert ours[-1].loss is not None and ours[0].loss is not None and ours[-1].loss < ours[0].loss


def test_train_list_limits_what_moves() -> None:
    sc = with_backward(scenario_text(FULL), extra='steps = 2\ntrain = ["W_UK", "gamma_kv"]\n')
    first, last = sc.mla, list(steps(sc))[-1].scenario.mla
    assert first is not None and last is not None
    assert not np.array_equal(first.W_UK, last.W_UK) and not np.array_equal(first.gamma_kv, last.gamma_kv)
    for name in ("W_DKV", "W_UV", "W_KR", "W_DQ", "W_UQ"):
        assert np.array_equal(getattr(first, name), getattr(last, name)), name
