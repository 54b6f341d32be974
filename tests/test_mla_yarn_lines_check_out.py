"""[mla] with DeepSeek's YaRN written by hand ([rope.scaling] type = "yarn", mscale, mscale_all_dim): the heads
against an independent NumPy computation whose frequencies and attention factor come from transformers' own
_compute_yarn_parameters and whose softmax scale is DeepseekV3Attention's qk_head_dim^(−1/2)·m²; every line of the
trace, the Markdown page and the by-hand trace on the calculator of tests/test_calculator.py; the worksheet's
answer key recomputing; the TOML written back; the keys' errors one line each."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from qkv_tui import compute
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.display.view import View
from qkv_tui.edges.export_markdown import to_markdown
from qkv_tui.edges.export_toml import to_toml
from qkv_tui.teach.handcalc import compute_hand
from qkv_tui.teach.trace import Trace

from .test_calculator import assert_holds, check_text, explanation_text
from .test_mla import _evaluate, random_mla

transformers = pytest.importorskip("transformers")

H, D_NOPE, D_ROPE, D_V, BASE = 2, 2, 4, 3, 10000.0
SCALING = {"factor": 8.0, "original_max_position_embeddings": 4, "beta_fast": 32.0, "beta_slow": 1.0,
           "mscale": 0.707, "mscale_all_dim": 1.0}


def _text(seed: int = 3, **scaling: float) -> tuple[str, dict[str, np.ndarray]]:
    text, w = random_mla(seed, n=4, d_model=5, H=H, d_c=3, d_nope=D_NOPE, d_rope=D_ROPE, d_v=D_V, d_cq=4)
    given = SCALING | scaling
    lines = ["[rope.scaling]", 'type = "yarn"', *(f"{k} = {float(v)!r}" for k, v in given.items())]
    return text + "\n" + "\n".join(lines) + "\n", w


def _theirs() -> tuple[np.ndarray, float, float]:
    """(inv_freq, attention factor, the softmax scale's multiplier m²) as transformers computes them."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = transformers.DeepseekV3Config(
        hidden_size=5, num_attention_heads=H, qk_nope_head_dim=D_NOPE, qk_rope_head_dim=D_ROPE, v_head_dim=D_V,
        max_position_embeddings=32, rope_parameters={"rope_type": "yarn", "rope_theta": BASE, **SCALING})
    inv_freq, a = ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")
    m = 0.1 * SCALING["mscale_all_dim"] * math.log(SCALING["factor"]) + 1.0  # yarn_get_mscale
    return inv_freq.double().numpy(), float(a), m * m


def _reference(w: dict[str, np.ndarray], eps: float = 1e-6) -> np.ndarray:
    """Every head's output (n, H·d_v), DeepseekV3Attention's steps in NumPy, interleaved pairs."""
    inv_freq, a, m2 = _theirs()
    X = w["X"]
    n = len(X)

    def rms(v: np.ndarray, g: np.ndarray) -> np.ndarray:
        return v / np.sqrt((v * v).mean(-1, keepdims=True) + eps) * g

    q = rms(X @ w["W_DQ"], w["gamma_q"]) @ w["W_UQ"]  # (n, H·(d_nope + d_rope))
    c_kv = rms(X @ w["W_DKV"], w["gamma_kv"])
    angles = np.arange(n)[:, None] * inv_freq[None, :]  # (n, d_rope/2)
    cos, sin = np.cos(angles) * a, np.sin(angles) * a

    def turn(v: np.ndarray) -> np.ndarray:
        out = v.copy()
        out[:, 0::2] = v[:, 0::2] * cos - v[:, 1::2] * sin
        out[:, 1::2] = v[:, 0::2] * sin + v[:, 1::2] * cos
        return out

    k_r = turn(X @ w["W_KR"])
    outs = []
    for h in range(H):
        qh = q[:, h * (D_NOPE + D_ROPE):(h + 1) * (D_NOPE + D_ROPE)]
        Q = np.concatenate([qh[:, :D_NOPE], turn(qh[:, D_NOPE:])], axis=1)
        K = np.concatenate([c_kv @ w["W_UK"][:, h * D_NOPE:(h + 1) * D_NOPE], k_r], axis=1)
        V = c_kv @ w["W_UV"][:, h * D_V:(h + 1) * D_V]
        s = Q @ K.T * (D_NOPE + D_ROPE) ** -0.5 * m2
        s[~np.tril(np.ones((n, n), dtype=bool))] = -np.inf
        p = np.exp(s - s.max(axis=1, keepdims=True))
        outs.append(p / p.sum(axis=1, keepdims=True) @ V)
    return np.concatenate(outs, axis=1)


def test_the_heads_match_deepseeks_yarn_computed_independently() -> None:
    text, w = _text()
    comp = compute(parse_scenario(text, "yarn.toml"))
    inv_freq, a, m2 = _theirs()
    assert a != 1.0 and m2 != 1.0
    mla = comp.scenario.mla
    assert mla is not None and mla.rope is not None
    np.testing.assert_allclose(mla.rope.inv_freq(D_ROPE), inv_freq, rtol=1e-6)  # theirs is float32
    assert not np.allclose(inv_freq, BASE ** (-np.arange(0, D_ROPE, 2) / D_ROPE))  # a pair is scaled
    np.testing.assert_allclose(np.concatenate([h.output for h in comp.heads], axis=1), _reference(w), rtol=1e-5,
                               atol=1e-6)
    assert comp.heads[0].scale == pytest.approx(math.sqrt(D_NOPE + D_ROPE) / m2, rel=1e-14)


@pytest.mark.parametrize("decimals", [2, 3, 5])
def test_every_line_checks_out_exactly(decimals: int) -> None:
    comp = compute(parse_scenario(_text()[0], "yarn.toml"))
    page = to_markdown(comp, decimals)
    assert "a·cos(1·θ'₁)" in page and "DeepSeek's YaRN: √d_qk / m²" in page
    assert_holds(check_text(page))
    assert_holds(check_text(explanation_text(View(Trace(comp)), decimals)))


@pytest.mark.parametrize("decimals", [2, 3])
def test_every_line_checks_out_by_hand(decimals: int) -> None:
    comp = compute_hand(compute(parse_scenario(_text()[0], "yarn.toml")), decimals)
    assert_holds(check_text(explanation_text(View(Trace(comp)), decimals), whole=False))


@pytest.mark.parametrize("decimals", [3, 4])
def test_the_worksheet_answer_key_recomputes(decimals: int) -> None:
    from qkv_tui.edges.worksheet.make import build

    page = build(compute(parse_scenario(_text()[0], "yarn.toml")), "100%", 0, decimals).markdown()
    assert "a·cos p·θ'₀" in page
    key = {int(m.group(1)): m.group(2) for m in re.finditer(r"^- \((\d+)\) (.*)$", page, re.M)}
    assert key
    for line in key.values():
        steps = line.split(" = ")
        answer = steps[-1]
        unit = 10.0 ** -len(answer.split(".")[1]) if "." in answer else 1.0
        numeric = [s for s in steps[1:-1] if not re.search(r"[A-Za-z_]", re.sub(r"\d[eE][+-]?\d+", "0", s))]
        for step in numeric:
            assert abs(_evaluate(step) - float(answer)) <= unit + 1e-9, line


def test_the_toml_written_back_reads_the_same() -> None:
    comp = compute(parse_scenario(_text()[0], "yarn.toml"))
    text = to_toml(comp.scenario)
    assert "mscale = 0.707" in text and "mscale_all_dim = 1.0" in text
    again = compute(parse_scenario(text, "again.toml"))
    assert again.scenario.mla is not None and comp.scenario.mla is not None
    assert again.scenario.mla.rope == comp.scenario.mla.rope
    np.testing.assert_array_equal(again.output, comp.output)


def test_without_mscale_all_dim_the_divisor_is_root_d_qk() -> None:
    text = _text()[0].replace("mscale_all_dim = 1.0\n", "")
    comp = compute(parse_scenario(text, "yarn.toml"))
    assert comp.heads[0].scale_is_default and comp.heads[0].scale == math.sqrt(D_NOPE + D_ROPE)


@pytest.mark.parametrize(("edit", "said"), [
    (("mscale_all_dim = 1.0", "mscale_all_dim = -1.0"),
     "[rope.scaling] mscale_all_dim = -1.0; expected a finite number > 0"),
    (('type = "yarn"', 'type = "linear"'),
     "is not used by type = \"linear\""),
    (("mscale = 0.707", 'mscale = "big"'), "[rope.scaling] mscale"),
])
def test_a_bad_key_is_one_line(cli, write, edit: tuple[str, str], said: str) -> None:
    path = write(_text()[0].replace(*edit))
    run = cli(str(path), "--check")
    assert run.code == 2 and run.err.count("\n") == 1 and run.err.startswith("error: ")
    assert said in run.err


def test_another_scaling_with_mla_is_one_line(cli, write) -> None:
    text = re.sub(r"\[rope\.scaling\].*", '[rope.scaling]\ntype = "linear"\nfactor = 2.0\n', _text()[0], flags=re.S)
    run = cli(str(write(text)), "--check")
    assert run.code == 2 and run.err.count("\n") == 1
    assert '[rope.scaling] type = "linear" does not go with [mla]' in run.err


def _learns() -> str:
    """The built-in mla_learns ([backward] training W_Q, W_UK, W_KR) under DeepSeek's YaRN, a ≠ 1 and m² ≠ 1."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "scenarios" / "mla_learns.toml").read_text(encoding="utf-8")
    return text.replace("[backward]", '[rope.scaling]\ntype = "yarn"\nfactor = 8.0\noriginal_max_position_embeddings'
                        " = 2\nmscale = 0.707\nmscale_all_dim = 1.0\n\n[backward]", 1)


def test_the_gradients_under_yarn_match_central_differences_of_the_loss() -> None:
    from dataclasses import replace

    from qkv_tui.core.gradients import gradients
    from qkv_tui.kernels.mla_backward import MlaBack

    sc = parse_scenario(_learns(), "learns.toml")
    assert sc.mla is not None and sc.mla.softmax_mscale is not None and sc.mla.rope is not None
    assert sc.mla.rope.attention_factor != 1.0
    back = gradients(compute(sc)).part(MlaBack)
    assert back is not None
    for name in ("W_KR", "W_UK", "W_Q"):
        W = np.array(getattr(sc.mla, name), dtype=float)
        numeric = np.zeros_like(W)
        for i, j in np.ndindex(*W.shape):
            step = np.zeros_like(W)
            step[i, j] = 1e-6
            up, down = (gradients(compute(replace(sc, mla=replace(sc.mla, **{name: W + s})))).loss
                        for s in (step, -step))
            assert up is not None and down is not None
            numeric[i, j] = (up - down) / 2e-6
        mine = getattr(back, f"d{name}") if name != "W_Q" else None
        if mine is None:  # a plain W_Q's gradient is every head's queries' X̂ᵀ·dQ_all
            comp = compute(sc)
            mine = comp.X_in.T @ back.dQ_all
        np.testing.assert_allclose(mine, numeric, atol=1e-7, rtol=1e-6)


@pytest.mark.parametrize("decimals", [3, 5])
def test_every_backward_line_checks_out_under_yarn(decimals: int) -> None:
    comp = compute(parse_scenario(_learns(), "learns.toml"))
    text = explanation_text(View(Trace(comp)), decimals)
    assert "·a·cos + " in text  # the rotary gradients turned back by the same a·cos and a·sin
    assert_holds(check_text(text))
