"""[backward] beside [mla]: what ``train`` may name (the latent layer's own weights), in one line each."""

from __future__ import annotations

from pathlib import Path

import pytest

from qkv_tui.core.scenario import ScenarioError, parse_scenario

MLA = (Path(__file__).parent.parent / "scenarios" / "mla.toml").read_text(encoding="utf-8")
TARGET = "\n[backward]\ntarget = [[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]]\n"
GIVES = "W_Q, W_O, W_DKV, W_UK, W_UV, W_KR"


def test_the_default_train_list_is_the_layers_weights() -> None:
    sc = parse_scenario(MLA + TARGET, "b.toml")
    assert sc.backward is not None
    assert sc.backward.train == ("W_Q", "W_O", "W_DKV", "W_UK", "W_UV", "W_KR")


@pytest.mark.parametrize(("name", "message"), [
    ("W_K", f"[backward] train names 'W_K', but this scenario has no W_K; expected names of the weights it gives: {GIVES}"),
    ("W_DQ", f"[backward] train names 'W_DQ', but this scenario has no W_DQ; expected names of the weights it gives: {GIVES}"),
    ("gamma_kv", "[backward] train names 'gamma_kv', but this scenario has no gamma_kv; expected names of the weights it"
                 f" gives: {GIVES}"),
    ("W_dkv", "[backward] train names 'W_dkv', which is not a weight; expected names from: W_Q, W_K, W_V, W_O, W_G, b_Q,"
              " b_K, b_V, b_O, gamma, beta, gamma_q, gamma_k, sinks, W_a, W_b, A_log, dt_bias, W_DKV, W_UK, W_UV, W_KR,"
              " W_DQ, W_UQ, gamma_kv, W_U; did you mean 'W_DKV'?"),
])
def test_train_names_only_what_the_layer_gives(name: str, message: str) -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(MLA + TARGET + f'train = ["{name}"]\n', "b.toml")
    assert str(info.value).endswith(message)
    assert "\n" not in str(info.value)


def test_the_norms_gains_train_where_the_norms_are_on() -> None:
    text = MLA.replace("kv_norm = false", "kv_norm = true\ngamma_kv = [1.0, 2.0]") + TARGET + 'train = ["gamma_kv"]\n'
    sc = parse_scenario(text, "b.toml")
    assert sc.backward is not None and sc.backward.train == ("gamma_kv",)
