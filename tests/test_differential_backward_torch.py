"""kernels/differential_backward.py against torch.autograd, and kernels/differential.py's forward against the same
torch forward, in float64.

The torch forward is written here from the formulas of contracts §14 (its own split, turn, softmax, λ, RMSNorm),
so it shares no code with the kernels. On generated heads (widths, masks, RoPE, soft-cap, an ALiBi-like bias, the
sub-norm's gains, biases, a separate X for the Keys and Values) every gradient the backward gives must be
autograd's: dW_Q, dW_K, dW_V, the biases, the four λ vectors, dγ, and the paths into X and X_kv.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from qkv_tui.kernels.attention import Turn  # noqa: E402
from qkv_tui.kernels.differential import DiffHead, diff_forward  # noqa: E402
from qkv_tui.kernels.differential_backward import diff_backward  # noqa: E402
from qkv_tui.kernels.rope import (  # noqa: E402
    RopeSpec,
    angles,
    pairs,
)
from qkv_tui.kernels.softcap import CapSpec  # noqa: E402

TOL = 1e-10

def _each_half(turn: Turn | None, W_Q: np.ndarray) -> tuple[RopeSpec, ...]:
    """RoPE's part turning each half of a head (width d = W_Q's columns / 2) on its own, as the head's pass runs it."""
    return () if turn is None else (RopeSpec(turn, W_Q.shape[1] // 2),)



def _torch_forward(t: dict, allow: np.ndarray, d: int, turn: Turn | None, bias: np.ndarray | None,
                   softcap: float | None, lambda_init: float, eps: float, scale: float):
    def rot(M):
        if turn is None:
            return M
        cos, sin = torch.tensor(turn.cos), torch.tensor(turn.sin)
        out = M.clone()
        for i, (a, b) in enumerate(turn.pairs):
            out[:, a] = M[:, a] * cos[:, i] - M[:, b] * sin[:, i]
            out[:, b] = M[:, a] * sin[:, i] + M[:, b] * cos[:, i]
        return out

    Q = t["X"] @ t["W_Q"] + (t.get("b_Q", 0.0))
    K = t["X_kv"] @ t["W_K"] + (t.get("b_K", 0.0))
    V = t["X_kv"] @ t["W_V"] + (t.get("b_V", 0.0))
    mask = torch.tensor(~allow)
    maps = []
    for cols in (slice(0, d), slice(d, 2 * d)):
        s = rot(Q[:, cols]) @ rot(K[:, cols]).T / scale
        if softcap is not None:
            s = softcap * torch.tanh(s / softcap)
        if bias is not None:
            s = s + torch.tensor(bias)
        maps.append(torch.softmax(s.masked_fill(mask, float("-inf")), dim=1))
    lam = (torch.exp(t["lambda_q1"] @ t["lambda_k1"]) - torch.exp(t["lambda_q2"] @ t["lambda_k2"]) + lambda_init)
    A = maps[0] - lam * maps[1]
    U = A @ V
    normed = U / torch.sqrt((U * U).mean(dim=1, keepdim=True) + eps) * (t.get("gamma", 1.0))
    return (1.0 - lambda_init) * normed, A


@st.composite
def heads(draw):
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    n = draw(st.integers(1, 5))
    d = draw(st.sampled_from([1, 2, 3, 4]))
    d_model = draw(st.integers(1, 4))
    use_rope = draw(st.booleans()) and d % 2 == 0
    mask = draw(st.sampled_from(["none", "causal", "random"]))
    if mask == "none":
        allow = np.ones((n, n), dtype=bool)
    elif mask == "causal":
        allow = np.tril(np.ones((n, n), dtype=bool))
    else:
        allow = rng.random((n, n)) < 0.6
        allow[np.arange(n), rng.integers(0, n, n)] = True  # every row attends at least one key
    flags = draw(st.tuples(st.booleans(), st.booleans(), st.booleans(), st.booleans()))
    return seed, n, d, d_model, use_rope, allow, flags


def _case(seed: int, n: int, d: int, d_model: int, use_rope: bool, allow: np.ndarray,
          flags: tuple[bool, bool, bool, bool]):
    rng = np.random.default_rng(seed)
    has_bias, has_cap, has_alibi, has_gamma = flags
    a = {
        "X": rng.normal(size=(n, d_model)), "X_kv": rng.normal(size=(n, d_model)),
        "W_Q": rng.normal(size=(d_model, 2 * d)), "W_K": rng.normal(size=(d_model, 2 * d)),
        "W_V": rng.normal(size=(d_model, 2 * d)),
        **{k: rng.normal(scale=0.5, size=d) for k in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2")},
    }
    if has_bias:
        a.update({k: rng.normal(size=2 * d) for k in ("b_Q", "b_K", "b_V")})
    if has_gamma:
        a["gamma"] = rng.normal(size=2 * d)
    turn = None
    if use_rope:
        ang = angles(10000.0, d, range(n))
        turn = Turn(np.cos(ang), np.sin(ang), pairs(str(rng.choice(["half", "interleaved"])), d))
    bias = -0.5 * np.abs(np.subtract.outer(np.arange(n), np.arange(n))).astype(float) if has_alibi else None
    softcap = 1.5 if has_cap else None
    lambda_init = float(rng.uniform(0.1, 0.8))
    return a, turn, bias, softcap, lambda_init


@settings(max_examples=60, deadline=None)
@given(heads())
def test_backward_is_autograds(case) -> None:
    seed, _n, d, _d_model, _use_rope, allow, _flags = case
    a, turn, bias, softcap, lambda_init = _case(*case)
    eps = 1e-5
    spec = DiffHead(a["lambda_q1"], a["lambda_k1"], a["lambda_q2"], a["lambda_k2"], lambda_init, eps, a.get("gamma"))
    fwd = diff_forward(a["X"], a["X_kv"], a["W_Q"], a["W_K"], a["W_V"], a.get("b_Q"), a.get("b_K"), a.get("b_V"),
                       allow, spec, parts=_each_half(turn, a["W_Q"]), bias=bias,
                       step=None if softcap is None else CapSpec(softcap))
    t = {k: torch.tensor(v, requires_grad=True) for k, v in a.items()}
    out, A = _torch_forward(t, allow, d, turn, bias, softcap, lambda_init, eps, float(np.sqrt(d)))
    np.testing.assert_allclose(fwd.weights, A.detach().numpy(), rtol=0, atol=TOL)
    np.testing.assert_allclose(fwd.output, out.detach().numpy(), rtol=TOL, atol=TOL)
    dY = np.random.default_rng(seed + 1).normal(size=out.shape)
    (out * torch.tensor(dY)).sum().backward()
    back = diff_backward(dY, a["X"], a["X_kv"], a["W_Q"], a["W_K"], a["W_V"], fwd, spec, allow, softcap=softcap,
                         biases=("b_Q" in a, "b_K" in a, "b_V" in a))
    got = {"W_Q": back.dW_Q, "W_K": back.dW_K, "W_V": back.dW_V, "X": back.dX_q, "X_kv": back.dX_kv,
           "lambda_q1": back.dlambda_q1, "lambda_k1": back.dlambda_k1, "lambda_q2": back.dlambda_q2,
           "lambda_k2": back.dlambda_k2, "b_Q": back.db_Q, "b_K": back.db_K, "b_V": back.db_V, "gamma": back.dgamma}
    for name, tensor in t.items():
        want = tensor.grad.numpy()
        assert got[name] is not None, name
        np.testing.assert_allclose(got[name], want, rtol=1e-8, atol=TOL, err_msg=name)
    for name in ("b_Q", "b_K", "b_V", "gamma"):
        if name not in a:
            assert got[name] is None, name
    for mb in (back.map_1, back.map_2):  # dS is exactly 0 where the mask forbids (contracts §11)
        assert np.all(mb.dS[~allow] == 0) and not np.signbit(mb.dS[~allow]).any()


def test_self_attention_dX_is_the_sum_of_the_paths() -> None:
    """With one X read by all three projections, autograd's dX is the Query path plus the Key/Value paths."""
    case = (11, 4, 2, 3, True, np.tril(np.ones((4, 4), dtype=bool)), (True, False, False, True))
    a, turn, _bias, _softcap, lambda_init = _case(*case)
    a["X_kv"] = a["X"]
    spec = DiffHead(a["lambda_q1"], a["lambda_k1"], a["lambda_q2"], a["lambda_k2"], lambda_init, 1e-5, a["gamma"])
    allow = case[5]
    fwd = diff_forward(a["X"], a["X"], a["W_Q"], a["W_K"], a["W_V"], a["b_Q"], a["b_K"], a["b_V"], allow, spec,
                       parts=_each_half(turn, a["W_Q"]))
    t = {k: torch.tensor(v, requires_grad=True) for k, v in a.items() if k != "X_kv"}
    t["X_kv"] = t["X"]
    out, _ = _torch_forward(t, allow, 2, turn, None, None, lambda_init, 1e-5, float(np.sqrt(2)))
    dY = np.random.default_rng(3).normal(size=out.shape)
    (out * torch.tensor(dY)).sum().backward()
    back = diff_backward(dY, a["X"], a["X"], a["W_Q"], a["W_K"], a["W_V"], fwd, spec, allow,
                         biases=(True, True, True))
    np.testing.assert_allclose(back.dX_q + back.dX_kv, t["X"].grad.numpy(), rtol=1e-8, atol=TOL)


def test_query_heads_sharing_a_kv_head_sum_their_shares() -> None:
    """Two query heads reading one K/V head (contracts §7): each head's dW_K, dW_V and Key/Value path is its own
    share, and the shares sum to autograd's gradient of the K/V head's weights."""
    rng = np.random.default_rng(21)
    n, d, d_model = 4, 2, 3
    allow = np.tril(np.ones((n, n), dtype=bool))
    ang = angles(10000.0, d, range(n))
    turn = Turn(np.cos(ang), np.sin(ang), pairs("interleaved", d))
    X = rng.normal(size=(n, d_model))
    W_K, W_V = rng.normal(size=(d_model, 2 * d)), rng.normal(size=(d_model, 2 * d))
    W_Qs = [rng.normal(size=(d_model, 2 * d)) for _ in range(2)]
    specs = [DiffHead(*(rng.normal(scale=0.5, size=d) for _ in range(4)), lambda_init=0.2) for _ in range(2)]
    dYs = [rng.normal(size=(n, 2 * d)) for _ in range(2)]
    first = diff_forward(X, X, W_Qs[0], W_K, W_V, None, None, None, allow, specs[0], parts=_each_half(turn, W_Qs[0]))
    second = diff_forward(X, X, W_Qs[1], W_K, W_V, None, None, None, allow, specs[1], parts=_each_half(turn, W_Qs[1]),
                          shared=first)
    assert second.K is first.K and second.V is first.V and second.K_used is not None and second.K_used is first.K_used
    backs = [diff_backward(dY, X, X, W_Q, W_K, W_V, f, spec, allow)
             for dY, W_Q, f, spec in zip(dYs, W_Qs, (first, second), specs, strict=True)]
    tX, tK, tV = (torch.tensor(a, requires_grad=True) for a in (X, W_K, W_V))
    loss = torch.zeros((), dtype=torch.float64)
    for W_Q, spec, dY in zip(W_Qs, specs, dYs, strict=True):
        t = {"X": tX, "X_kv": tX, "W_Q": torch.tensor(W_Q), "W_K": tK, "W_V": tV,
             **{k: torch.tensor(getattr(spec, k)) for k in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2")}}
        out, _ = _torch_forward(t, allow, d, turn, None, None, 0.2, 1e-5, float(np.sqrt(d)))
        loss = loss + (out * torch.tensor(dY)).sum()
    loss.backward()
    np.testing.assert_allclose(sum(b.dW_K for b in backs), tK.grad.numpy(), rtol=1e-8, atol=TOL)
    np.testing.assert_allclose(sum(b.dW_V for b in backs), tV.grad.numpy(), rtol=1e-8, atol=TOL)
    np.testing.assert_allclose(sum(b.dX_q + b.dX_kv for b in backs), tX.grad.numpy(), rtol=1e-8, atol=TOL)
