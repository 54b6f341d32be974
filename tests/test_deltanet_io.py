"""[deltanet]'s short convolution and gated output norm (conv_q, conv_k, conv_v, W_Z, gamma_o, eps_o).

Each wrong key is one clean line; the engine agrees with a plain loop written here; every arithmetic line of the
new stages (Conv, Output norm) and of the rule reading the convolved values checks out on the calculator, exact
and by hand; the TOML export keeps the keys; the JSON export adds conv_q … normed at the end of each head,
null without them; [backward] and the worksheet refuse them with one line.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qkv_tui import compute
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.display.view import View
from qkv_tui.kernels.deltanet import DeltaForward
from qkv_tui.kernels.deltanet_parts import Around
from qkv_tui.teach.handcalc import compute_hand
from qkv_tui.teach.trace import Trace

from .test_calculator import assert_holds, check_text, explanation_text

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
PLAIN = (SCENARIOS / "deltanet.toml").read_text(encoding="utf-8")
IO = '''conv_q = [[0.5, -0.25], [1, 0.5]]
conv_k = [[0.25, 0.5], [1, -1]]
conv_v = [[-0.5, 0.5], [1, 1]]
W_Z = [[1, 0], [0, 1], [0.5, 0.5], [-1, 0]]
gamma_o = [1.5, 0.5]
'''
WITH_IO = PLAIN + IO


def _without(key: str) -> str:
    return PLAIN + "".join(line + "\n" for line in IO.splitlines() if not line.startswith(key + " "))


CASES = {
    "conv_missing_k": (_without("conv_k"), "[deltanet] has conv_q but not conv_k; expected conv_q, conv_k and conv_v"
                                           " together"),
    "conv_columns": (PLAIN + IO.replace("conv_v = [[-0.5, 0.5], [1, 1]]", "conv_v = [[-0.5], [1]]"),
                     "[deltanet] conv_v has 1 columns; expected 2, the heads' V columns side by side (2)"),
    "conv_taps": (PLAIN + IO.replace("conv_k = [[0.25, 0.5], [1, -1]]", "conv_k = [[1, -1]]"),
                  "[deltanet] conv_k has 1 rows but conv_q has 2; expected the same kernel size K for Q, K and V"),
    "conv_too_long": (PLAIN + "conv_q = [" + ", ".join(["[0, 0]"] * 65) + "]\n" + IO.split("\n", 1)[1],
                      "[deltanet] conv_q has 65 rows; expected at most 64 taps"),
    "conv_nan": (PLAIN + IO.replace("[0.5, -0.25]", "[nan, -0.25]"), "[deltanet] conv_q row 1, column 1 is nan"),
    "w_z_rows": (PLAIN + IO.replace("W_Z = [[1, 0], [0, 1], [0.5, 0.5], [-1, 0]]", "W_Z = [[1, 0], [0, 1]]"),
                 "[deltanet] W_Z has 2 rows; expected d_model = 4"),
    "w_z_columns": (PLAIN + IO.replace("W_Z = [[1, 0], [0, 1], [0.5, 0.5], [-1, 0]]", "W_Z = [[1], [0], [0.5], [-1]]"),
                    "[deltanet] W_Z has 1 columns; expected 2, the heads' d_v side by side (2)"),
    "gamma_missing": (_without("gamma_o"), "[deltanet] has W_Z but no gamma_o; expected gamma_o = [...] (2 numbers"),
    "gamma_length": (PLAIN + IO.replace("gamma_o = [1.5, 0.5]", "gamma_o = [1.5]"),
                     "[deltanet] gamma_o has 1 number; expected 2 (one per output column, d_v)"),
    "gamma_without_w_z": (_without("W_Z"), "[deltanet] has gamma_o but no W_Z; expected W_Z"),
    "eps_zero": (WITH_IO + "eps_o = 0\n", "[deltanet] eps_o = 0; expected a finite number > 0 (the gated norm's eps)"),
    "conv_with_rope": (WITH_IO.replace('mask = "causal"\n', 'mask = "causal"\n\n[rope]\nlayout = "half"\n', 1),
                       "[deltanet] conv_q with [rope] is not supported"),
    "backward": (WITH_IO + "\n[backward]\ntarget = [[0, 0], [0, 0], [0, 0]]\n",
                 "[backward] with [deltanet]'s short convolution or gated output norm (conv_q …, W_Z) is not supported"),
    "typo": (WITH_IO + "eps_0 = 1e-6\n", "unknown key 'eps_0' in [deltanet]; did you mean 'eps_o'?"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_wrong_key_is_one_line(case: str, cli: Any, write: Any) -> None:
    text, expected = CASES[case]
    path = write(text)
    run = cli("--check", str(path))
    assert (run.code, run.out) == (2, ""), run.err
    assert run.err.count("\n") == 1 and run.err.startswith(f"error: {path}: ") and "Traceback" not in run.err
    assert expected in run.err, run.err


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def test_the_engine_agrees_with_a_plain_loop() -> None:
    comp = compute(parse_scenario(WITH_IO, "io.toml"))
    sc, hr = comp.scenario, comp.heads[0]
    taps = {"q": np.array([[0.5, -0.25], [1, 0.5]]), "k": np.array([[0.25, 0.5], [1, -1]]),
            "v": np.array([[-0.5, 0.5], [1, 1]])}
    X = sc.X
    conv = {}
    for name, W in (("q", sc.heads[0].W_Q), ("k", sc.heads[0].W_K), ("v", sc.heads[0].W_V)):
        P = X @ W  # (n, d)
        out = np.zeros_like(P)
        for t in range(sc.n):
            for c in range(P.shape[1]):
                out[t, c] = sum(taps[name][j, c] * P[t - 1 + j, c] for j in range(2) if t - 1 + j >= 0)
        conv[name] = _silu(out)
    S = np.zeros((2, 2))
    outputs = []
    g, beta = [-0.5, -0.5, -0.5], [1.0, 0.5, 0.5]
    for t in range(sc.n):
        q = conv["q"][t] / math.sqrt((conv["q"][t] ** 2).sum() + 1e-6) / math.sqrt(2)
        k = conv["k"][t] / math.sqrt((conv["k"][t] ** 2).sum() + 1e-6)
        S = S * math.exp(g[t])
        delta = (conv["v"][t] - S.T @ k) * beta[t]
        S = S + np.outer(k, delta)
        outputs.append(S.T @ q)
    o = np.array(outputs)  # (n, d_v)
    z = X @ np.array([[1, 0], [0, 1], [0.5, 0.5], [-1, 0]])
    want = o / np.sqrt((o ** 2).mean(axis=1, keepdims=True) + 1e-6) * np.array([1.5, 0.5]) * _silu(z)
    assert hr.part(DeltaForward) is not None and hr.part(Around) is not None and hr.part(Around).conv is not None
    np.testing.assert_allclose(hr.part(Around).conv[2].out, conv["v"], rtol=1e-12)
    np.testing.assert_allclose(hr.part(DeltaForward).output, o, rtol=1e-12)
    np.testing.assert_allclose(comp.output, want, rtol=1e-12)


@pytest.mark.parametrize("decimals", [1, 2, 3, 5, 8])
def test_every_line_checks_out_on_a_calculator(decimals: int) -> None:
    comp = compute(parse_scenario(WITH_IO, "io.toml"))
    view = View(Trace(comp))
    stages = {view.trace.segment_at(i).stage for i in range(len(view.trace))}
    assert {"conv", "onorm"} <= stages
    assert_holds(check_text(explanation_text(view, decimals)))
    if decimals <= 4:  # by hand each step is rounded before the next: each "=" holds, not first-to-last
        hand = compute_hand(comp, decimals)
        assert_holds(check_text(explanation_text(View(Trace(hand)), decimals), whole=False))


def test_the_exports_keep_and_show_them(cli: Any, write: Any) -> None:
    path = write(WITH_IO)
    toml = cli("--export", "toml", str(path))
    assert toml.code == 0 and "conv_q = [[0.5, -0.25], [1, 0.5]]" in toml.out and "eps_o = 1e-06" in toml.out
    again = write(toml.out, "again.toml")
    first, second = cli("--export", "json", str(path)), cli("--export", "json", str(again))
    assert first.code == 0 and first.out == second.out
    head = json.loads(first.out)["deltanet"]["heads"][0]
    assert list(head)[-5:] == ["conv_q", "conv_k", "conv_v", "z", "normed"]
    plain = json.loads(cli("--export", "json", str(write(PLAIN, "plain.toml"))).out)["deltanet"]["heads"][0]
    assert [plain[k] for k in ("conv_q", "conv_k", "conv_v", "z", "normed")] == [None] * 5
    sheet = cli("--export", "worksheet", str(path))
    assert sheet.code == 2 and sheet.err.count("\n") == 1 and "is not supported yet" in sheet.err
    check = cli("--check", str(path))
    assert "a short convolution of 2 taps and a gated output norm" in check.out
