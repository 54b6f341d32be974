"""[backward] with [differential] (contracts §11 and §14): a whole scenario's gradients against torch.autograd.

Each case is written as a scenario file (RMS pre-norm with gains, [attention] with K/V heads shared or not, RoPE or
none, biases, W_O and b_O, the sub-norm's gains or none) and run through the app's own path: core/gradients.py, the
JSON export's "grad" (its "differential" field) and core/training.py's SGD step. The reference is a torch forward of
the same scenario written here from contracts §14's formulas (its own norm, split, rotation, softmax, λ and RMSNorm),
so it shares no code with the package; loss = ½·Σ (output − target)², all in float64.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from qkv_tui.core.engine import compute
from qkv_tui.core.gradients import gradients
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.core.training import steps
from qkv_tui.core.variants.differential import TABLE as DIFFERENTIAL
from qkv_tui.edges.export_json import to_json

torch = pytest.importorskip("torch")

TOL = 1e-10
LR = 0.01
LAMBDAS = ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2")


def _toml(M: np.ndarray) -> str:
    M = np.asarray(M)
    if M.ndim == 1:
        return "[" + ", ".join(repr(float(x)) for x in M) + "]"
    return "[" + ", ".join(_toml(row) for row in M) + "]"


def _case(seed: int, H: int, KV: int, d: int, rope: bool, bias: bool, gamma: bool) -> tuple[str, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    n, d_model = 4, 3
    a = {"X": rng.normal(size=(n, d_model)), "gamma": rng.uniform(0.5, 1.5, size=d_model),
         "W_Q": rng.normal(size=(d_model, H * 2 * d)), "W_K": rng.normal(size=(d_model, KV * 2 * d)),
         "W_V": rng.normal(size=(d_model, KV * 2 * d)), "W_O": rng.normal(size=(H * 2 * d, d_model)),
         "b_O": rng.normal(size=d_model), "target": rng.normal(size=(n, d_model)),
         **{k: rng.normal(scale=0.5, size=(H, d)) for k in LAMBDAS}}
    if bias:
        a.update(b_Q=rng.normal(size=H * 2 * d), b_K=rng.normal(size=KV * 2 * d), b_V=rng.normal(size=KV * 2 * d))
    if gamma:
        a["gamma_sub"] = rng.uniform(0.5, 1.5, size=2 * d)
    lines = [f"tokens = {json.dumps([f't{i}' for i in range(n)])}", f"X = {_toml(a['X'])}", 'mask = "causal"',
             f'[norm]\nkind = "rms"\ngamma = {_toml(a["gamma"])}\neps = 1e-6']
    if rope:
        lines.append('[rope]\nlayout = "half"\nbase = 10000.0')
    lines.append(f"[attention]\nnum_heads = {H}\nnum_kv_heads = {KV}\nW_Q = {_toml(a['W_Q'])}\nW_K = {_toml(a['W_K'])}"
                 f"\nW_V = {_toml(a['W_V'])}")
    if bias:
        lines.append(f"b_Q = {_toml(a['b_Q'])}\nb_K = {_toml(a['b_K'])}\nb_V = {_toml(a['b_V'])}")
    lines.append(f"[output]\nW_O = {_toml(a['W_O'])}\nb_O = {_toml(a['b_O'])}")
    lines.append("[differential]\n" + "\n".join(f"{k} = {_toml(a[k])}" for k in LAMBDAS) + "\nlambda_init = 0.35\neps = 1e-5"
                 + (f"\ngamma = {_toml(a['gamma_sub'])}" if gamma else ""))
    lines.append(f"[backward]\ntarget = {_toml(a['target'])}\nlr = {LR}\nsteps = 1")
    return "\n".join(lines) + "\n", a


def _torch_loss(t: dict, H: int, KV: int, d: int, rope: bool, n: int) -> torch.Tensor:
    X = t["X"]
    Xn = X / torch.sqrt((X * X).mean(dim=1, keepdim=True) + 1e-6) * t["gamma"]
    Q, K, V = Xn @ t["W_Q"], Xn @ t["W_K"], Xn @ t["W_V"]
    if "b_Q" in t:
        Q, K, V = Q + t["b_Q"], K + t["b_K"], V + t["b_V"]
    pos = torch.arange(n, dtype=torch.float64)[:, None]
    freq = 10000.0 ** (-2.0 * torch.arange(d // 2, dtype=torch.float64) / d)
    cos, sin = torch.cos(pos * freq), torch.sin(pos * freq)

    def turn(M: torch.Tensor) -> torch.Tensor:  # rotate_half on one half (width d): pairs (i, i + d/2)
        if not rope:
            return M
        a, b = M[:, : d // 2], M[:, d // 2:]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=1)

    causal = torch.tril(torch.ones(n, n, dtype=torch.bool))
    outs = []
    for h in range(H):
        c = h * KV // H
        q, k, v = Q[:, h * 2 * d:(h + 1) * 2 * d], K[:, c * 2 * d:(c + 1) * 2 * d], V[:, c * 2 * d:(c + 1) * 2 * d]
        maps = [torch.softmax((turn(q[:, s]) @ turn(k[:, s]).T / d ** 0.5).masked_fill(~causal, float("-inf")), dim=1)
                for s in (slice(0, d), slice(d, 2 * d))]
        lam = (torch.exp(t["lambda_q1"][h] @ t["lambda_k1"][h]) - torch.exp(t["lambda_q2"][h] @ t["lambda_k2"][h])
               + 0.35)
        U = (maps[0] - lam * maps[1]) @ v
        normed = U / torch.sqrt((U * U).mean(dim=1, keepdim=True) + 1e-5) * t.get("gamma_sub", 1.0)
        outs.append((1 - 0.35) * normed)
    out = torch.cat(outs, dim=1) @ t["W_O"] + t["b_O"]
    return 0.5 * ((out - t["target"]) ** 2).sum()


CASES = [  # (seed, num_heads, num_kv_heads, d, rope, biases, sub-norm gains)
    (1, 2, 2, 2, True, False, False),
    (2, 2, 1, 2, True, True, True),  # both heads read one K/V head
    (3, 4, 2, 3, False, True, True),  # d = 3 without RoPE
    (4, 3, 3, 4, True, False, True),
]


@pytest.mark.parametrize(("seed", "H", "KV", "d", "rope", "bias", "gamma"), CASES)
def test_every_weight_and_lambda_gradient_is_autograds(seed: int, H: int, KV: int, d: int, rope: bool, bias: bool,
                                                       gamma: bool) -> None:
    text, a = _case(seed, H, KV, d, rope, bias, gamma)
    sc = parse_scenario(text, "diff.toml")
    comp = compute(sc)
    g = gradients(comp)
    t = {k: torch.tensor(v, requires_grad=k != "target") for k, v in a.items()}
    loss = _torch_loss(t, H, KV, d, rope, a["X"].shape[0])
    loss.backward()
    assert g.loss == pytest.approx(loss.item(), rel=1e-12)

    def want(name: str) -> np.ndarray:
        return t[name].grad.numpy()

    w = 2 * d
    for h, hg in enumerate(g.heads):
        np.testing.assert_allclose(hg.dW_Q, want("W_Q")[:, h * w:(h + 1) * w], rtol=1e-8, atol=TOL)
        if bias:
            np.testing.assert_allclose(hg.db_Q, want("b_Q")[h * w:(h + 1) * w], rtol=1e-8, atol=TOL)
        for name in LAMBDAS:
            np.testing.assert_allclose(getattr(hg.own, "d" + name), want(name)[h], rtol=1e-8, atol=TOL, err_msg=name)
    kv = g.kv_heads if g.shared else [hg for hg in g.heads]
    for c, k in enumerate(kv):
        np.testing.assert_allclose(k.dW_K, want("W_K")[:, c * w:(c + 1) * w], rtol=1e-8, atol=TOL)
        np.testing.assert_allclose(k.dW_V, want("W_V")[:, c * w:(c + 1) * w], rtol=1e-8, atol=TOL)
        if bias:
            np.testing.assert_allclose(k.db_K, want("b_K")[c * w:(c + 1) * w], rtol=1e-8, atol=TOL)
            np.testing.assert_allclose(k.db_V, want("b_V")[c * w:(c + 1) * w], rtol=1e-8, atol=TOL)
    np.testing.assert_allclose(g.dW_O, want("W_O"), rtol=1e-8, atol=TOL)
    np.testing.assert_allclose(g.db_O, want("b_O"), rtol=1e-8, atol=TOL)
    np.testing.assert_allclose(g.dgamma, want("gamma"), rtol=1e-8, atol=TOL)
    np.testing.assert_allclose(g.dX, want("X"), rtol=1e-8, atol=TOL)
    if gamma:
        np.testing.assert_allclose(np.sum([hg.own.dgamma for hg in g.heads], axis=0), want("gamma_sub"), rtol=1e-8,
                                   atol=TOL)

    # the JSON's "grad" → "differential": num_heads × d each, and the shared gains' gradient summed
    doc = json.loads(to_json(comp))
    field = doc["grad"]["differential"]
    assert list(field) == ["dlambda_q1", "dlambda_k1", "dlambda_q2", "dlambda_k2", "dgamma"]
    for name in LAMBDAS:
        np.testing.assert_allclose(np.array(field["d" + name]), want(name), rtol=1e-8, atol=TOL)
    assert (field["dgamma"] is None) == (not gamma)


@pytest.mark.parametrize(("seed", "H", "KV", "d", "rope", "bias", "gamma"), CASES[1:3])
def test_a_training_step_moves_every_default_weight_by_lr_times_its_gradient(seed: int, H: int, KV: int, d: int,
                                                                            rope: bool, bias: bool, gamma: bool) -> None:
    text, a = _case(seed, H, KV, d, rope, bias, gamma)
    sc = parse_scenario(text, "diff.toml")
    assert sc.backward is not None
    assert sc.backward.train[-5 if gamma else -4:] == LAMBDAS + (("gamma_sub",) if gamma else ())
    first, second = list(steps(sc))
    t = {k: torch.tensor(v, requires_grad=k != "target") for k, v in a.items()}
    _torch_loss(t, H, KV, d, rope, a["X"].shape[0]).backward()
    df, moved = DIFFERENTIAL.of(sc), DIFFERENTIAL.of(second.scenario)
    assert df is not None and moved is not None
    for name in LAMBDAS:
        np.testing.assert_allclose(getattr(moved, name), getattr(df, name) - LR * t[name].grad.numpy(), rtol=1e-8,
                                   atol=TOL)
    if gamma:
        assert df.gamma is not None and moved.gamma is not None
        np.testing.assert_allclose(moved.gamma, df.gamma - LR * t["gamma_sub"].grad.numpy(), rtol=1e-8, atol=TOL)
    with torch.no_grad():  # the step's loss is torch's at the moved weights
        stepped = {k: (v - LR * v.grad if k not in ("X", "target") else v) for k, v in t.items()}  # never X
        assert second.loss == pytest.approx(float(_torch_loss(stepped, H, KV, d, rope, a["X"].shape[0])), rel=1e-10)
    assert second.loss is not None and first.loss is not None and second.loss < first.loss


def test_a_train_list_may_name_lambda_vectors_and_only_those_the_table_gives(cli, write) -> None:
    text, _ = _case(5, 2, 2, 2, False, False, False)
    sc = parse_scenario(text.replace("steps = 1", 'steps = 1\ntrain = ["lambda_k2", "W_Q"]'), "diff.toml")
    assert sc.backward is not None and sc.backward.train == ("W_Q", "lambda_k2")
    path = write(text.replace("steps = 1", 'steps = 1\ntrain = ["gamma_sub"]'))
    run = cli("--check", str(path))
    assert run.code == 2 and run.err.count("\n") == 1 and "'gamma_sub', which is not a weight" in run.err, run.err
