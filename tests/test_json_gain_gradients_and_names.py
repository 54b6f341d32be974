"""The JSON's gradient names and QK-norm's gains: every gradient is ``d`` + the name it is the gradient of
([deltanet]'s ``dt_bias`` too: ``ddt_bias``), and a gain the heads share has its gradient given, the sum of
the heads' shares, beside them (``"grad"``'s ``dgamma_q`` and ``dgamma_k``): what training moves it by."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from qkv_tui.core.engine import compute
from qkv_tui.core.gradients import gradients
from qkv_tui.core.scenario import load_scenario, parse_scenario
from qkv_tui.core.training import updated
from qkv_tui.edges.export_json import to_json
from qkv_tui.kernels.deltanet_backward import GatesBack

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def _with_backward(name: str, extra: str = "") -> str:
    text = (SCENARIOS / f"{name}.toml").read_text(encoding="utf-8") + extra
    sc = parse_scenario(text, f"{name}.toml")
    n, d_out = compute(sc).output.shape
    rows = ", ".join("[" + ", ".join(f"{0.25 * (i + j) - 0.5!r}" for j in range(d_out)) + "]" for i in range(n))
    return text + f"\n[backward]\ntarget = [{rows}]\nlr = 0.5\nsteps = 1\n"


def _grad(text: str) -> dict[str, object]:
    grad = json.loads(to_json(compute(parse_scenario(text, "g.toml"))))["grad"]
    assert isinstance(grad, dict)
    return grad


def test_deltanet_dt_bias_gradient_is_named_like_every_other() -> None:
    grad = json.loads(to_json(compute(load_scenario("deltanet_learns"))))["grad"]
    gates = grad["deltanet"]
    assert "dt_bias_grad" not in gates and list(gates)[1:] == ["dW_a", "dW_b", "dA_log", "ddt_bias"]
    sc = load_scenario("deltanet_learns")
    g = gradients(compute(sc))
    if (gb := g.part(GatesBack)) is not None and gb.ddt_bias is not None:
        assert gates["ddt_bias"] == gb.ddt_bias.tolist()


@pytest.mark.parametrize("name", ["qk_norm", "qk_norm_all"])
def test_the_shared_gains_gradient_is_given_and_is_what_training_moves_them_by(name: str) -> None:
    text = _with_backward(name)
    grad = _grad(text)
    heads = grad["heads"]
    assert isinstance(heads, list) and len(heads) > 1
    sc = parse_scenario(text, "g.toml")
    assert sc.qk_norm is not None
    for key, gamma in (("dgamma_q", sc.qk_norm.gamma_q), ("dgamma_k", sc.qk_norm.gamma_k)):
        total = np.array(grad[key])
        assert total.shape == np.shape(gamma)
        shares = [np.array(h[key]) for h in heads]
        if sc.qk_norm.over == "head":  # one set of gains for every head: their shares summed
            assert np.allclose(total, np.sum(shares, axis=0), rtol=1e-12, atol=1e-15)
        # one SGD step moves the gains by lr times exactly this gradient
        stepped = updated(sc, gradients(compute(sc)))
        assert stepped.qk_norm is not None
        moved = getattr(stepped.qk_norm, key[1:])
        assert np.allclose(moved, np.asarray(gamma) - 0.5 * total, rtol=0, atol=1e-15)


def test_without_qk_norm_the_gains_gradients_are_null() -> None:
    grad = json.loads(to_json(compute(load_scenario("learn_to_look"))))["grad"]
    assert grad["dgamma_q"] is None and grad["dgamma_k"] is None
