"""[backward] loss = "cross_entropy" (core/gradients.py, kernels/cross_entropy.py) against
torch.nn.functional.cross_entropy and autograd, and optimizer = "adamw" (core/training.py) against
torch.optim.AdamW step by step: every parameter after every step, float64, on the built-in and on generated
scenarios (tests/backward_torch.py writes the forward again in PyTorch)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv_tui import compute, load_scenario
from qkv_tui.core.gradients import gradients
from qkv_tui.core.scenario import Scenario, parse_scenario
from qkv_tui.core.training import steps
from qkv_tui.kernels.sharing import kv_owners

from .backward_torch import TOL, F, forward, leaf, params_of, torch
from .test_backward_torch import check
from .variants_cases import ModernCase, matrix, modern_cases

# AdamW divides by √v̂ + ε: a gradient torch computes as exactly 0 and ours as 3e-17 (float64's noise on sums that
# cancel) moves a weight by lr·3e-17/(3e-17 + ε), about lr·3e-9 at ε = 1e-8, where torch's does not move at all.
# So each step may add lr·NOISE/ε of difference on top of float64's own; nothing larger is float noise.
NOISE = 1e-14


def adam_tol(lr: float, eps: float, k: int) -> dict[str, float]:
    return {"rtol": 1e-8, "atol": 1e-9 + k * lr * NOISE / eps}


def rows(values: Any) -> str:
    return "[" + ", ".join("[" + ", ".join(repr(float(x)) for x in row) + "]" for row in values) + "]"


def with_cross_entropy(text: str, W_U: Any, nxt: list[int], extra: str = "") -> Scenario:
    return parse_scenario(f'{text}\n\n[backward]\nloss = "cross_entropy"\nW_U = {rows(W_U)}\nnext = {nxt}\n{extra}',
                          "generated.toml")


def torch_loss(sc: Scenario, P: dict[str, Any]) -> tuple[Any, Any, Any]:
    """torch's loss from the same forward, with the final output and the logits kept for their gradients."""
    bw = sc.backward
    assert bw is not None and bw.W_U is not None and bw.next is not None
    final, _ = forward(sc, P)
    final.retain_grad()
    logits = final @ P["W_U"]
    logits.retain_grad()
    return F.cross_entropy(logits, torch.tensor(bw.next, dtype=torch.long)), final, logits


def assert_cross_entropy_agrees(sc: Scenario) -> None:
    g = gradients(compute(sc))
    ce = g.cross_entropy
    assert ce is not None
    bw = sc.backward
    assert bw is not None
    P = params_of(sc)
    P["W_U"] = leaf(bw.W_U)
    loss, final, logits = torch_loss(sc, P)
    loss.backward()
    assert g.loss is not None and abs(g.loss - loss.item()) <= 1e-12 * max(1.0, loss.item())
    assert np.allclose(ce.logits, logits.detach().numpy(), **TOL)
    assert np.allclose(ce.probs, torch.softmax(logits, dim=1).detach().numpy(), **TOL)
    nll = F.cross_entropy(logits, torch.tensor(bw.next), reduction="none").detach().numpy()
    assert np.allclose(ce.nll, nll, **TOL)
    assert np.allclose(ce.dlogits, logits.grad.numpy(), **TOL)
    assert np.allclose(ce.dO, final.grad.numpy(), **TOL)
    assert np.allclose(g.dO, final.grad.numpy(), **TOL)
    assert np.allclose(ce.dW_U, P["W_U"].grad.numpy(), **TOL)
    check(sc)  # everything below the output: every head's, the K/V heads' and the weights' gradients


def test_the_builtin_agrees_with_torch() -> None:
    assert_cross_entropy_agrees(load_scenario("next_token_adamw"))


@st.composite
def unembedding(draw: st.DrawFn, d_out: int, n: int) -> tuple[list[list[float]], list[int]]:
    vocab = draw(st.integers(2, 6))
    W_U = draw(matrix(d_out, vocab))
    nxt = draw(st.lists(st.integers(0, vocab - 1), min_size=n, max_size=n))
    return W_U, nxt


def _shape(text: str) -> tuple[int, int]:
    n, d_out = compute(parse_scenario(text, "generated.toml")).output.shape
    return int(n), int(d_out)


@settings(max_examples=25, deadline=None)
@given(modern_cases(), st.data())
def test_generated_scenarios_agree_with_torch(case: ModernCase, data: st.DataObject) -> None:
    n, d_out = _shape(case.toml)
    W_U, nxt = data.draw(unembedding(d_out, n))
    assert_cross_entropy_agrees(with_cross_entropy(case.toml, W_U, nxt))


def test_a_tiny_probability_keeps_a_finite_loss() -> None:
    """A next token whose p is below float64's smallest: −ln p is ln Σ − (z − max), as torch's log_softmax."""
    sc = load_scenario("next_token_adamw")
    assert sc.backward is not None and sc.backward.W_U is not None
    text = (load_scenario.__globals__["builtin_dir"]() / "next_token_adamw.toml").read_text()
    head = text.split("[backward]")[0]
    W_U = sc.backward.W_U * 2000.0
    far = with_cross_entropy(head, W_U, [2, 2, 2])
    g = gradients(compute(far))
    assert g.loss is not None and np.isfinite(g.loss) and g.loss > 700
    assert_cross_entropy_agrees(far)


# --- AdamW against torch.optim.AdamW ------------------------------------------------------------------


def ours_params(sc: Scenario) -> dict[str, Any]:
    """Every trained array of a state, named as params_of names torch's leaves."""
    out: dict[str, Any] = {}
    owners = kv_owners([sc.kv_head(h) for h in range(len(sc.heads))], sc.heads)
    for h, head in enumerate(sc.heads):
        for name in ("W_Q", "b_Q", "W_G"):
            if getattr(head, name) is not None:
                out[f"{name}{h}"] = getattr(head, name)
        if head.sink is not None:
            out[f"sink{h}"] = head.sink
        if owners[h] == h:
            for name in ("W_K", "W_V", "b_K", "b_V"):
                if getattr(head, name) is not None:
                    out[f"{name}{h}"] = getattr(head, name)
    for name, value in (("W_O", sc.W_O), ("b_O", sc.b_O)):
        if value is not None:
            out[name] = value
    if sc.norm is not None:
        out["gamma"] = sc.norm.gamma
        if sc.norm.beta is not None:
            out["beta"] = sc.norm.beta
    if sc.qk_norm is not None:
        out["gamma_q"], out["gamma_k"] = sc.qk_norm.gamma_q, sc.qk_norm.gamma_k
    assert sc.backward is not None
    if sc.backward.W_U is not None:
        out["W_U"] = sc.backward.W_U
    return out


def assert_adamw_steps_agree(sc: Scenario) -> None:
    """Each state train[k] holds torch's parameters after k AdamW steps, and its loss is torch's loss there."""
    bw = sc.backward
    assert bw is not None and bw.adamw
    ours = list(steps(sc))
    P = params_of(sc)
    if bw.W_U is not None:
        P["W_U"] = leaf(bw.W_U)
    trained = {k: p for k, p in P.items() if k != "X"}
    assert set(trained) == set(ours_params(sc))
    opt = torch.optim.AdamW(list(trained.values()), lr=bw.lr, betas=bw.betas, eps=bw.eps,
                            weight_decay=bw.weight_decay)
    for k, state in enumerate(ours):
        mine = ours_params(state.scenario)
        for name, p in trained.items():
            assert np.allclose(np.asarray(mine[name]), p.detach().numpy(), **adam_tol(bw.lr, bw.eps, k)), (k, name)
        opt.zero_grad()
        if bw.cross_entropy:
            loss = torch_loss(sc, P)[0]
        else:
            final, _ = forward(sc, P)
            diff = final - torch.tensor(bw.target)
            loss = 0.5 * (diff * diff).sum()
        assert state.loss is not None and abs(state.loss - loss.item()) <= 1e-8 * max(1.0, loss.item()), k
        loss.backward()
        opt.step()
        if k + 1 < len(ours):  # the m and v the Train view shows for step k + 1 are torch's exp_avg and exp_avg_sq
            moments = ours[k + 1].moments
            assert moments is not None
            for name, p in trained.items():
                got = moments[slot_of(name)]
                tol = adam_tol(bw.lr, bw.eps, k + 1)
                assert got.t == k + 1
                assert np.allclose(np.asarray(got.m), opt.state[p]["exp_avg"].numpy(), **tol), (k, name)
                assert np.allclose(np.asarray(got.v), opt.state[p]["exp_avg_sq"].numpy(), **tol), (k, name)


def slot_of(name: str) -> tuple[str, int | None]:
    """params_of's leaf name as core/training.py's slot: W_Q0 → (W_Q, 0), sink1 → (sinks, 1), W_O → (W_O, None)."""
    stem = name.rstrip("0123456789")
    if stem == name:
        return name, None
    return ("sinks" if stem == "sink" else stem), int(name[len(stem):])


def test_the_builtin_trains_as_torch_adamw() -> None:
    sc = load_scenario("next_token_adamw")
    assert_adamw_steps_agree(sc)
    run = list(steps(sc))
    assert run[-1].loss is not None and run[0].loss is not None and run[-1].loss < run[0].loss


@settings(max_examples=10, deadline=None)
@given(modern_cases(), st.data(), st.floats(0.01, 0.2), st.sampled_from([(0.9, 0.999), (0.8, 0.99), (0.0, 0.5)]),
       st.sampled_from([0.0, 0.01, 0.3]), st.sampled_from([1e-8, 1e-3]))
def test_twenty_generated_adamw_steps_agree_with_torch(case: ModernCase, data: st.DataObject, lr: float,
                                                       betas: tuple[float, float], decay: float, eps: float) -> None:
    n, d_out = _shape(case.toml)
    W_U, nxt = data.draw(unembedding(d_out, n))
    extra = (f'lr = {lr!r}\nsteps = 20\noptimizer = "adamw"\nbetas = [{betas[0]!r}, {betas[1]!r}]\n'
             f"eps = {eps!r}\nweight_decay = {decay!r}\n")
    assert_adamw_steps_agree(with_cross_entropy(case.toml, W_U, nxt, extra))


@pytest.mark.parametrize("name", ["gqa", "pre_norm", "sink"])
def test_adamw_on_the_squared_loss_agrees_with_torch(name: str) -> None:
    """AdamW is the optimizer's own: it trains the default ½·Σ (output − target)² as well."""
    text = (load_scenario.__globals__["builtin_dir"]() / f"{name}.toml").read_text()
    n, d_out = _shape(text)
    target = np.random.default_rng(5).normal(size=(n, d_out)).round(2)
    sc = parse_scenario(f'{text}\n[backward]\ntarget = {rows(target)}\nlr = 0.05\nsteps = 10\noptimizer = "adamw"\n'
                        "weight_decay = 0.1\n", f"{name}.toml")
    assert_adamw_steps_agree(sc)


def test_sgd_on_cross_entropy_agrees_with_torch() -> None:
    text = (load_scenario.__globals__["builtin_dir"]() / "next_token_adamw.toml").read_text()
    sc = parse_scenario(text.replace('optimizer = "adamw"\nbetas = [0.9, 0.999]\neps = 1e-8\nweight_decay = 0.01\n', ""),
                        "sgd.toml")
    assert sc.backward is not None and not sc.backward.adamw
    ours = list(steps(sc))
    P = params_of(sc)
    P["W_U"] = leaf(sc.backward.W_U)
    trained = {k: p for k, p in P.items() if k != "X"}
    opt = torch.optim.SGD(list(trained.values()), lr=sc.backward.lr)
    for state in ours:
        mine = ours_params(state.scenario)
        for name, p in trained.items():
            assert np.allclose(np.asarray(mine[name]), p.detach().numpy(), **TOL), (state.step, name)
        opt.zero_grad()
        torch_loss(sc, P)[0].backward()
        opt.step()
