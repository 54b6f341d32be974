"""[ssd] beyond the built-in: steps given or clamped, no gate, two groups, four tokens, a pre-norm, split heads
and W_O. Each against a NumPy computation written here (both forms, the grouped gated norm), and every line the
trace prints on the calculator, exact and by hand (whose four-token mask is worked one product at a time)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from qkv_tui import compute
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.core.ssd_part import SsdRecord
from qkv_tui.display.view import View
from qkv_tui.edges.export_markdown import to_markdown
from qkv_tui.teach.handcalc import compute_hand
from qkv_tui.teach.trace import Trace

from .test_calculator import assert_holds, check_text, explanation_text

RNG = np.random.default_rng(31)


def _m(rows: int, cols: int) -> np.ndarray:
    return RNG.normal(size=(rows, cols)).round(2)


def _toml(m: np.ndarray) -> str:
    return "[" + ", ".join("[" + ", ".join(repr(float(x)) for x in row) + "]" for row in np.atleast_2d(m)) + "]"


def _vec(v: Any) -> str:
    return "[" + ", ".join(repr(float(x)) for x in v) + "]"


def _case(n: int, H: int, G: int, d: int, N: int, *, steps: str, gate: bool, pre_norm: bool, split: bool,
          W_O: bool) -> tuple[str, dict[str, Any]]:
    d_model = 3
    X = _m(n, d_model)
    p: dict[str, Any] = {"X": X, "A": -RNG.uniform(0.3, 1.5, H), "B": _m(n, G * N), "C": _m(n, G * N),
                         "x": _m(n, H * d), "D": RNG.normal(size=H).round(2)}
    lines = [f'tokens = [{", ".join(repr(f"t{i}") for i in range(n))}]', f"X = {_toml(X)}", 'mask = "causal"']
    if pre_norm:
        lines += ["[norm]", 'kind = "rms"']
    if split:
        lines += ["[attention]", f"num_heads = {H}", f"W_Q = {_toml(np.ones((d_model, H)))}",
                  f"W_K = {_toml(np.ones((d_model, H)))}", f"W_V = {_toml(np.ones((d_model, H * d)))}"]
    else:
        for _ in range(H):
            lines += ["[[heads]]", f"W_Q = {_toml(np.ones((d_model, 1)))}", f"W_K = {_toml(np.ones((d_model, 1)))}",
                      f"W_V = {_toml(np.ones((d_model, d)))}"]
    if W_O:
        p["W_O"] = _m(H * d, 2)
        lines += ["[output]", f"W_O = {_toml(p['W_O'])}"]
    lines += ["[ssd]", f"num_heads = {H}", f"num_groups = {G}", f"A = {_vec(p['A'])}", f"B = {_toml(p['B'])}",
              f"C = {_toml(p['C'])}", f"x = {_toml(p['x'])}", f"D = {_vec(p['D'])}"]
    if steps == "given":
        p["dt"] = RNG.uniform(0.2, 1.5, (n, H)).round(2)
        lines.append(f"dt = {_toml(p['dt'])}")
    else:
        p["W_dt"], p["dt_bias"] = _m(d_model, H), RNG.normal(size=H).round(2)
        lines += [f"W_dt = {_toml(p['W_dt'])}", f"dt_bias = {_vec(p['dt_bias'])}"]
        if steps == "clamped":
            p["limit"] = (0.4, 1.2)
            lines += ["dt_min = 0.4", "dt_max = 1.2"]
    if gate:
        p["z"], p["gamma"] = _m(n, H * d), RNG.uniform(0.5, 2, H * d).round(2)
        lines += [f"z = {_toml(p['z'])}", f"gamma = {_vec(p['gamma'])}"]
    return "\n".join(lines) + "\n", p


def _reference(p: dict[str, Any], pre_norm: bool, H: int, G: int) -> tuple[list[np.ndarray], np.ndarray]:
    X = p["X"]
    if pre_norm:
        X = X / np.sqrt((X ** 2).mean(axis=1, keepdims=True) + 1e-5)
    if "dt" in p:
        dt = p["dt"]
    else:
        dt = np.log1p(np.exp(X @ p["W_dt"] + p["dt_bias"]))
        if "limit" in p:
            dt = np.clip(dt, *p["limit"])
    n, N = X.shape[0], p["B"].shape[1] // G
    d = p["x"].shape[1] // H
    ys = []
    for h in range(H):
        g = h // (H // G)
        x, B, C = p["x"][:, h * d:(h + 1) * d], p["B"][:, g * N:(g + 1) * N], p["C"][:, g * N:(g + 1) * N]
        a = np.exp(dt[:, h] * p["A"][h])
        L = np.array([[math.prod(a[j + 1:i + 1]) if j <= i else 0.0 for j in range(n)] for i in range(n)])
        y_att = (L * (C @ B.T)) @ (dt[:, h][:, None] * x) + p["D"][h] * x
        state, rec = np.zeros((d, N)), []
        for t in range(n):
            state = a[t] * state + np.outer(dt[t, h] * x[t], B[t])
            rec.append(state @ C[t] + p["D"][h] * x[t])
        np.testing.assert_allclose(np.array(rec), y_att, atol=1e-12)  # the duality, in the reference itself
        ys.append(y_att)
    y = np.concatenate(ys, axis=1)
    if "z" in p:
        gated = y * p["z"] / (1 + np.exp(-p["z"]))
        size = gated.shape[1] // G
        parts = [gated[:, g * size:(g + 1) * size] for g in range(G)]
        y = np.concatenate([q / np.sqrt((q ** 2).mean(axis=1, keepdims=True) + 1e-5) for q in parts], axis=1) * p["gamma"]
    return [y[:, h * d:(h + 1) * d] for h in range(H)], y


CASES = {
    "given steps, no gate": dict(n=3, H=2, G=1, d=2, N=2, steps="given", gate=False, pre_norm=False, split=False, W_O=False),
    "two groups, gate, W_O": dict(n=4, H=2, G=2, d=1, N=2, steps="computed", gate=True, pre_norm=False, split=True, W_O=True),
    "clamped, pre-norm": dict(n=4, H=1, G=1, d=2, N=3, steps="clamped", gate=True, pre_norm=True, split=False, W_O=False),
}


@pytest.mark.parametrize("name", CASES)
def test_against_numpy_and_on_the_calculator(name: str) -> None:
    kw = CASES[name]
    text, p = _case(**kw)  # type: ignore[arg-type]
    comp = compute(parse_scenario(text, "variant.toml"))
    heads, y = _reference(p, kw["pre_norm"], kw["H"], kw["G"])
    for hr, want in zip(comp.heads, heads, strict=True):
        np.testing.assert_allclose(hr.output, want, atol=1e-12)
        assert hr.need(SsdRecord).ssd.gap < 1e-12
    np.testing.assert_allclose(comp.output, y @ p["W_O"] if "W_O" in p else y, atol=1e-12)
    for decimals in (2, 3, 5):
        assert_holds(check_text(to_markdown(comp, decimals)))
        assert_holds(check_text(explanation_text(View(Trace(comp)), decimals)))
    for decimals in (2, 3):
        hand = compute_hand(comp, decimals)
        assert_holds(check_text(explanation_text(View(Trace(hand)), decimals), whole=False))
    page = to_markdown(comp, 3)
    assert ("· Gate" in page) == kw["gate"] and ("(given in [ssd] dt)" in page) == (kw["steps"] == "given")
    if kw["steps"] == "clamped":
        assert (np.array([hr.need(SsdRecord).ssd.dt for hr in comp.heads]) >= 0.4).all()
