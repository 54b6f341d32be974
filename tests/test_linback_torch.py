"""[backward] through [linear] and [deltanet] (kernels/linear_backward.py, kernels/deltanet_backward.py) against
torch.autograd on a forward written again here in PyTorch, float64, with loops over the tokens for the
recurrent forms; central finite differences as a second check; the SGD steps move the gates' weights."""

from __future__ import annotations

import itertools
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
from qkv_tui.edges.export_json import to_json
from qkv_tui.kernels.deltanet_backward import DeltaBack, GatesBack
from qkv_tui.kernels.gate_backward import GateBack
from qkv_tui.kernels.linear_backward import LinearBack

from .backward_torch import backward_checked, close, leaf, out_projected, params_of, pre_norm, rms, torch, turn
from .variants_cases import matrix, toml_value, vec

F = torch.nn.functional
small = st.floats(-1, 1, allow_nan=False, allow_infinity=False).map(lambda x: round(x, 2))


def grid(rows: int, cols: int) -> st.SearchStrategy[list[list[float]]]:
    return st.lists(st.lists(small, min_size=cols, max_size=cols), min_size=rows, max_size=rows)


@st.composite
def state_cases(draw: st.DrawFn, kind: str | None = None) -> str:
    """A scenario whose heads run [linear] or [deltanet], with a pre-norm, biases, RoPE, QK-norm, a gate, W_O and
    b_O each drawn or not, and (for [deltanet]) g and β given or computed."""
    n = draw(st.integers(1, 5))
    d_model = draw(st.integers(1, 4))
    H = draw(st.integers(1, 2))
    use_rope = draw(st.booleans())
    d_k = 2 if use_rope else draw(st.integers(1, 3))
    d_v = draw(st.integers(1, 3))
    kind = kind or draw(st.sampled_from(["linear", "deltanet"]))
    X = draw(matrix(n, d_model))
    lines = [f"tokens = {toml_value([f't{i}' for i in range(n)])}", f"X = {toml_value(X)}", 'mask = "causal"']
    tables: list[str] = []
    if draw(st.booleans()):
        norm = draw(st.sampled_from(["rms", "layer"]))
        tables += ["[norm]", f'kind = "{norm}"', f"gamma = {toml_value(draw(vec(d_model)))}"]
        if norm == "layer" and draw(st.booleans()):
            tables.append(f"beta = {toml_value(draw(vec(d_model)))}")
    if use_rope:
        tables += ["[rope]", f'layout = "{draw(st.sampled_from(["interleaved", "half"]))}"', "base = 10.0"]
    if draw(st.booleans()):
        # over = "all" needs the [attention] form, which the backward's own tests cover
        tables += ["[qk_norm]", 'over = "head"', f"gamma_q = {toml_value(draw(vec(d_k)))}",
                   f"gamma_k = {toml_value(draw(vec(d_k)))}"]
    bias = {r: draw(st.booleans()) for r in "QKV"}
    gate = draw(st.booleans())
    feature = "elu1"
    heads = []
    for h in range(H):
        head = [f'[[heads]]\nname = "h{h}"', f"W_Q = {toml_value(draw(grid(d_model, d_k)))}",
                f"W_K = {toml_value(draw(grid(d_model, d_k)))}", f"W_V = {toml_value(draw(matrix(d_model, d_v)))}"]
        head += [f"b_{r} = {toml_value(draw(vec(d_v if r == 'V' else d_k)))}" for r in "QKV" if bias[r]]
        if gate:
            head.append(f"W_G = {toml_value(draw(matrix(d_model, d_v)))}")
        heads.append("\n".join(head))
    if kind == "linear":
        feature = draw(st.sampled_from(["elu1", "relu", "identity"]))
        normalize = feature == "elu1" and draw(st.booleans())
        tables += ["[linear]", f'feature = "{feature}"', f"normalize = {toml_value(normalize)}"]
    else:
        tables.append("[deltanet]")
        if draw(st.booleans()):
            g = draw(st.lists(st.lists(st.floats(-2, 0).map(lambda x: round(x, 2)), min_size=H, max_size=H),
                              min_size=n, max_size=n))
            tables.append(f"g = {toml_value(g)}")
        else:
            tables += [f"W_a = {toml_value(draw(grid(d_model, H)))}", f"A_log = {toml_value(draw(vec(H)))}",
                       f"dt_bias = {toml_value(draw(vec(H)))}"]
        if draw(st.booleans()):
            beta = draw(st.lists(st.lists(st.floats(0, 1).map(lambda x: round(x, 2)), min_size=H, max_size=H),
                                 min_size=n, max_size=n))
            tables.append(f"beta = {toml_value(beta)}")
        else:
            tables.append(f"W_b = {toml_value(draw(grid(d_model, H)))}")
    d_out = H * d_v
    if draw(st.booleans()):
        d_out = draw(st.integers(1, 3))
        tables += ["[output]", f"W_O = {toml_value(draw(matrix(H * d_v, d_out)))}"]
        if draw(st.booleans()):
            tables.append(f"b_O = {toml_value(draw(vec(d_out)))}")
    text = "\n".join(lines) + "\n\n" + "\n\n".join(heads) + "\n\n" + "\n".join(tables) + "\n"
    key = draw(st.sampled_from(["target", "dO"]))
    text += f"\n[backward]\n{key} = {toml_value(draw(matrix(n, d_out)))}\n"
    return text


def phi(x: Any, feature: str) -> Any:
    return F.elu(x) + 1 if feature == "elu1" else F.relu(x) if feature == "relu" else x


def l2(x: Any) -> Any:
    return x / torch.sqrt((x * x).sum(dim=-1, keepdim=True) + 1e-6)


def state_params(sc: Scenario) -> dict[str, Any]:
    P = params_of(sc)
    dn = sc.deltanet
    if dn is not None:
        for name in ("W_a", "W_b", "A_log", "dt_bias"):
            if getattr(dn, name) is not None:
                P[name] = leaf(getattr(dn, name))
    return P


def forward(sc: Scenario, P: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The final output and the intermediates the gradients are compared at (retain_grad)."""
    keep: dict[str, Any] = {}
    X = pre_norm(sc, P)
    H = len(sc.heads)

    def lin(W: str, b: str) -> Any:
        out = X @ P[W]
        return out + P[b] if b in P else out

    Qs = [lin(f"W_Q{h}", f"b_Q{h}") for h in range(H)]
    Ks = [lin(f"W_K{h}", f"b_K{h}") for h in range(H)]
    Vs = [lin(f"W_V{h}", f"b_V{h}") for h in range(H)]
    for h in range(H):
        for name, t in (("Q", Qs[h]), ("K", Ks[h]), ("V", Vs[h])):
            t.retain_grad()
            keep[f"{name}{h}"] = t
    qk = sc.qk_norm
    if qk is not None:
        assert qk.over == "head"
        Qs = [rms(q, P["gamma_q"], qk.eps) for q in Qs]
        Ks = [rms(k, P["gamma_k"], qk.eps) for k in Ks]
    if sc.rope is not None:
        Qs = [turn(q, sc) for q in Qs]
        Ks = [turn(k, sc) for k in Ks]
    g_all = beta_all = None
    dn = sc.deltanet
    if dn is not None:
        made = None if dn.g is not None else -torch.exp(P["A_log"]) * F.softplus(X @ P["W_a"] + P["dt_bias"])
        g_all = torch.tensor(dn.g) if dn.g is not None else made
        beta_all = torch.tensor(dn.beta) if dn.beta is not None else torch.sigmoid(X @ P["W_b"])
    outs = []
    for h, head in enumerate(sc.heads):
        q, k, v = Qs[h], Ks[h], Vs[h]
        if sc.linear is not None:
            out = _linear(q, k, v, sc.linear.feature, sc.linear.normalize, keep, h)
        else:
            assert g_all is not None and beta_all is not None
            out = _delta(q, k, v, g_all[:, h], beta_all[:, h], keep, h)
        if head.W_G is not None:
            out = out * torch.sigmoid(X @ P[f"W_G{h}"])
        outs.append(out)
    return out_projected(P, outs), keep


def _linear(q: Any, k: Any, v: Any, feature: str, normalize: bool, keep: dict[str, Any], h: int) -> Any:
    """The recurrent form, token by token (S_t = S_{t−1} + φ(k_t)v_tᵀ, z_t = z_{t−1} + φ(k_t))."""
    fq, fk = phi(q, feature), phi(k, feature)
    fq.retain_grad()
    fk.retain_grad()
    keep[f"phi_Q{h}"], keep[f"phi_K{h}"] = fq, fk
    S = torch.zeros(q.shape[1], v.shape[1], dtype=torch.float64)
    z = torch.zeros(q.shape[1], dtype=torch.float64)
    rows = []
    for t in range(q.shape[0]):
        S = S + torch.outer(fk[t], v[t])
        z = z + fk[t]
        o = fq[t] @ S
        rows.append(o / (fq[t] @ z) if normalize else o)
    return torch.stack(rows)


def _delta(q: Any, k: Any, v: Any, g: Any, beta: Any, keep: dict[str, Any], h: int) -> Any:
    """transformers' torch_recurrent_gated_delta_rule, one head, written out again."""
    qn = l2(q) / math.sqrt(q.shape[1])
    kn = l2(k)
    qn.retain_grad()
    kn.retain_grad()
    keep[f"q{h}"], keep[f"k{h}"] = qn, kn
    if g.requires_grad:
        g.retain_grad()
        beta.retain_grad() if beta.requires_grad else None
    keep[f"g{h}"], keep[f"beta{h}"] = g, beta
    S = torch.zeros(q.shape[1], v.shape[1], dtype=torch.float64)
    rows, states = [], []
    for t in range(q.shape[0]):
        S = S * torch.exp(g[t])
        kv = S.T @ kn[t]
        delta = (v[t] - kv) * beta[t]
        S = S + torch.outer(kn[t], delta)
        S.retain_grad()
        states.append(S)
        rows.append(S.T @ qn[t])
    keep[f"S{h}"] = states
    return torch.stack(rows)


def check(sc: Scenario) -> Gradients:
    g = gradients(compute(sc))
    P = state_params(sc)
    final, keep = forward(sc, P)
    backward_checked(sc, g, P, final)
    for h, hg in enumerate(g.heads):
        for name, ours in (("W_Q", hg.dW_Q), ("W_K", hg.dW_K), ("W_V", hg.dW_V), ("b_Q", hg.db_Q), ("b_K", hg.db_K),
                           ("b_V", hg.db_V)):
            if f"{name}{h}" in P:
                close(ours, P[f"{name}{h}"].grad, f"{name} of head {h + 1}")
        if f"W_G{h}" in P:
            assert hg.part(GateBack) is not None
            close(hg.part(GateBack).dW_G, P[f"W_G{h}"].grad, f"W_G of head {h + 1}")
        close(hg.dQ, keep[f"Q{h}"].grad, f"dQ of head {h + 1}")
        close(hg.dK, keep[f"K{h}"].grad, f"dK of head {h + 1}")
        close(hg.dV, keep[f"V{h}"].grad, f"dV of head {h + 1}")
        if (lb := hg.part(LinearBack)) is not None:
            close(lb.dphi_Q, keep[f"phi_Q{h}"].grad, "dφ(Q)")
            close(lb.dphi_K, keep[f"phi_K{h}"].grad, "dφ(K)")
            assert (lb.dA[~sc.allow] == 0).all() and not np.signbit(lb.dA[~sc.allow]).any()
        if (d := hg.part(DeltaBack)) is not None:
            close(d.dq, keep[f"q{h}"].grad, "dq")
            close(d.dk, keep[f"k{h}"].grad, "dk")
            for t, S in enumerate(keep[f"S{h}"]):
                close(d.dS[t], S.grad, f"dS after token {t + 1}")
    gb = g.part(GatesBack)
    for name, ours in (("W_a", None if gb is None else gb.dW_a), ("W_b", None if gb is None else gb.dW_b),
                       ("A_log", None if gb is None else gb.dA_log), ("dt_bias", None if gb is None else gb.ddt_bias)):
        if name in P:
            close(ours, P[name].grad, name)
        else:
            assert ours is None, name
    return g


@settings(max_examples=80, deadline=None)
@given(state_cases())
def test_generated_state_scenarios_agree_with_autograd(text: str) -> None:
    check(parse_scenario(text, "generated.toml"))


@pytest.mark.parametrize("feature,normalize", [("elu1", True), ("elu1", False), ("relu", True), ("relu", False),
                                               ("identity", False)])
def test_every_feature_map_agrees_with_autograd(feature: str, normalize: bool) -> None:
    sc = parse_scenario(_linear_text(feature, normalize), "f.toml")
    g = check(sc)
    assert g.heads[0].part(LinearBack) is not None


def _linear_text(feature: str, normalize: bool, extra: str = "") -> str:
    return f"""tokens = ["a", "b", "c", "d"]
X = [[1, 0.5, -1], [0.2, 1, 0.3], [-0.4, 0.1, 1], [0.7, -0.6, 0.2]]
mask = "causal"
[[heads]]
W_Q = [[1, 0.2], [0.3, 1], [0.5, 0.4]]
W_K = [[0.6, 1], [1, 0.1], [0.2, 0.9]]
W_V = [[1, 0], [0, 1], [1, 1]]
[linear]
feature = "{feature}"
normalize = {toml_value(normalize)}
{extra}
[backward]
target = [[1, 0], [0, 1], [1, 1], [0.5, 0.5]]
steps = 2
"""


DELTA = """tokens = ["I", "love", "AI"]
X = [[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]]
mask = "causal"
[[heads]]
W_Q = [[1, 0], [0, 1], [1, 0], [1, 0]]
W_K = [[1, 0], [0, 1], [0, 1], [0, 0]]
W_V = [[1, 0], [0, 1], [1, 1], [0, 0]]
[deltanet]
{gates}
[backward]
target = [[1, 0], [0, 1], [1, 1]]
steps = 3
"""
GIVEN = "g = [[-0.5], [-0.5], [-0.5]]\nbeta = [[1.0], [0.5], [0.5]]"
COMPUTED = "W_a = [[0.1], [0.2], [-0.3], [0.4]]\nA_log = [0.2]\ndt_bias = [0.5]\nW_b = [[0.1], [0.2], [0.3], [0.4]]"
MIXED = "g = [[-0.5], [-0.2], [-1.0]]\nW_b = [[0.1], [0.2], [0.3], [0.4]]"


@pytest.mark.parametrize("gates", [GIVEN, COMPUTED, MIXED])
def test_the_gated_delta_rule_agrees_with_autograd(gates: str) -> None:
    check(parse_scenario(DELTA.format(gates=gates), "d.toml"))


def _loss(sc: Scenario) -> float:
    loss = gradients(compute(sc)).loss
    assert loss is not None
    return loss


@pytest.mark.parametrize("text,prefix,shown,grad", [
    (DELTA.format(gates=COMPUTED), "A_log = [", "0.2", lambda g: g.need(GatesBack).dA_log[0]),
    (DELTA.format(gates=COMPUTED), "dt_bias = [", "0.5", lambda g: g.need(GatesBack).ddt_bias[0]),
    (DELTA.format(gates=COMPUTED), "W_b = [[", "0.1", lambda g: g.need(GatesBack).dW_b[0, 0]),
    (DELTA.format(gates=COMPUTED), "W_a = [[", "0.1", lambda g: g.need(GatesBack).dW_a[0, 0]),
    (DELTA.format(gates=GIVEN), "W_K = [[", "1", lambda g: g.heads[0].dW_K[0, 0]),
    (_linear_text("elu1", True), "W_Q = [[", "1", lambda g: g.heads[0].dW_Q[0, 0]),
    (_linear_text("relu", False), "W_K = [[", "0.6", lambda g: g.heads[0].dW_K[0, 0]),
])
def test_central_finite_differences(text: str, prefix: str, shown: str, grad: Any) -> None:
    """(loss(w + ε) − loss(w − ε)) / 2ε against the gradient, for one weight of each kind."""
    eps, old = 1e-6, prefix + shown
    assert old in text
    up = parse_scenario(text.replace(old, prefix + repr(float(shown) + eps), 1), "fd.toml")
    down = parse_scenario(text.replace(old, prefix + repr(float(shown) - eps), 1), "fd.toml")
    numeric = (_loss(up) - _loss(down)) / (2 * eps)
    assert abs(numeric - float(grad(gradients(compute(parse_scenario(text, "fd.toml")))))) < 1e-6


def test_training_moves_the_gates_weights_and_lowers_the_loss() -> None:
    sc = parse_scenario(DELTA.format(gates=COMPUTED), "d.toml")
    assert sc.backward is not None
    assert sc.backward.train == ("W_Q", "W_K", "W_V", "W_a", "W_b", "A_log", "dt_bias")
    run = list(steps(sc))
    losses = [s.loss for s in run]
    assert all(b is not None and a is not None and b < a for a, b in itertools.pairwise(losses))
    first, last = run[0].scenario.deltanet, run[-1].scenario.deltanet
    assert first is not None and last is not None and first.A_log is not None and last.A_log is not None
    # one SGD step is w − lr·grad, the gates' weights too
    g0 = run[0].grads.part(GatesBack)
    assert g0 is not None and g0.dA_log is not None
    assert np.allclose(run[1].scenario.deltanet.A_log, first.A_log - 0.1 * g0.dA_log)  # type: ignore[union-attr]


def test_given_g_and_beta_are_data_not_weights() -> None:
    sc = parse_scenario(DELTA.format(gates=GIVEN), "d.toml")
    assert sc.backward is not None and sc.backward.train == ("W_Q", "W_K", "W_V")
    assert gradients(compute(sc)).part(GatesBack) is None


def test_json_grad_gains_linear_and_deltanet_at_its_end() -> None:
    doc = json.loads(to_json(compute(parse_scenario(DELTA.format(gates=COMPUTED), "d.toml"))))
    grad = doc["grad"]
    assert list(grad)[-4:-2] == ["linear", "deltanet"] and grad["linear"] is None
    head = grad["heads"][0]
    assert head["dP"] is None and head["dS"] is None and head["dscaled"] is None and head["dsink"] is None
    dn = grad["deltanet"]
    assert list(dn) == ["heads", "dW_a", "dW_b", "dA_log", "ddt_bias"]
    assert list(dn["heads"][0]) == ["dq", "dk", "dv", "dg", "dbeta", "dS"]
    assert np.array(dn["heads"][0]["dS"]).shape == (3, 2, 2)
    assert np.allclose(dn["heads"][0]["dv"], head["dV"])
    lin = json.loads(to_json(compute(parse_scenario(_linear_text("elu1", True), "l.toml"))))["grad"]
    assert lin["deltanet"] is None and list(lin["linear"]["heads"][0]) == ["dphi_Q", "dphi_K", "dV"]
    given = json.loads(to_json(compute(parse_scenario(DELTA.format(gates=GIVEN), "d.toml"))))["grad"]["deltanet"]
    assert given["dW_a"] is None and given["dA_log"] is None and given["dW_b"] is None


def test_by_hand_the_gradients_land_near_the_exact_ones() -> None:
    from qkv_tui.teach.handcalc import compute_hand

    for text in (DELTA.format(gates=COMPUTED), _linear_text("elu1", True)):
        comp = compute(parse_scenario(text, "h.toml"))
        exact, hand = gradients(comp), gradients(compute_hand(comp, 4))
        assert np.allclose(exact.dX, hand.dX, atol=5e-3)
