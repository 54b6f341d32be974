"""Hostile [backward] tables beside [mla], [linear] and [deltanet] (mla_learns, deltanet_learns, linear with a
target): each is one error line, exit code 2, no traceback, from --check and the exports alike (tests/error_table.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import Run
from .error_table import assert_one_error_line

ROOT = Path(__file__).resolve().parent.parent / "scenarios"
MLA, DELTANET = ((ROOT / f"{name}.toml").read_text(encoding="utf-8") for name in ("mla_learns", "deltanet_learns"))
LINEAR = (ROOT / "linear.toml").read_text(encoding="utf-8") + "\n[backward]\ntarget = [[1, 0], [0, 1], [1, 1]]\n"
MLA_TRAIN = 'train = ["W_Q", "W_UK", "W_KR"]'
MLA_TARGET = "target = [\n  [1, 1, 1, 2],       # I: as it is\n  [1, 0.548, 1, 1.684],  # love: as it is\n  [1, 1, 1, 2],"
DN_TARGET = "target = [\n  [1, 0],   # I: its own Value\n  [0, 1],   # love\n  [1, 1],   # AI\n]"


def _swap(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


CASES = {
    # the weights latent heads do not have, or this layer does not give
    "mla_train_W_K": (_swap(MLA, MLA_TRAIN, 'train = ["W_K"]'),
                      "[backward] train names 'W_K', but this scenario has no W_K; expected names of the weights it"
                      " gives: W_Q, W_DKV, W_UK, W_UV, W_KR"),
    "mla_train_W_DQ_beside_W_Q": (_swap(MLA, MLA_TRAIN, 'train = ["W_DQ"]'),
                                  "[backward] train names 'W_DQ', but this scenario has no W_DQ"),
    "mla_train_gamma_kv_without_kv_norm": (_swap(MLA, MLA_TRAIN, 'train = ["gamma_kv"]'),
                                           "this scenario has no gamma_kv"),
    "mla_train_wrong_case": (_swap(MLA, MLA_TRAIN, 'train = ["W_dkv"]'), "did you mean 'W_DKV'?"),
    "mla_train_not_names": (_swap(MLA, MLA_TRAIN, "train = [1, 2]"), "[backward] train must be a list of weight names"),
    "mla_target_rows": (_swap(MLA, MLA_TARGET, "target = [\n  [1, 1, 1, 2],"),
                        "[backward] target is 1 × 4; expected the final output's"),
    "mla_target_nan": (_swap(MLA, "[1, 1, 1, 2],       # I", "[nan, 1, 1, 2],       # I"), "[backward] target"),
    "mla_target_and_dO": (_swap(MLA, "lr = 1.0", "dO = [[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]\nlr = 1.0"),
                          "[backward] has both target and dO"),
    "mla_dO_with_steps": (_swap(MLA, "target = [", "dO = ["), "[backward] steps = 6 with dO"),
    "mla_lr_zero": (_swap(MLA, "lr = 1.0", "lr = 0"), "[backward] lr = 0; expected a finite number > 0"),
    "mla_lr_inf": (_swap(MLA, "lr = 1.0", "lr = inf"), "[backward] lr"),
    "mla_steps_past_the_limit": (_swap(MLA, "steps = 6", "steps = 1001"), "[backward] steps = 1001 is above the limit"),
    "mla_steps_float": (_swap(MLA, "steps = 6", "steps = 6.0"), "[backward] steps must be a whole number"),
    "mla_steps_huge_hex": (_swap(MLA, "steps = 6", "steps = 0x" + "f" * 400), "[backward] steps = "),
    # [deltanet]: g and β computed from its weights; the arrays given are data, never weights
    "deltanet_train_g": (_swap(DELTANET, "steps = 8", 'steps = 8\ntrain = ["g"]'),
                         "[backward] train names 'g', which is not a weight"),
    "deltanet_train_W_a_with_g_given": (
        _swap(_swap(DELTANET, "W_a = [[0.5], [0], [-0.5], [0]]", "g = [[-1], [-1], [-1]]"),
              "A_log = [0]                       # −e^0 = −1: g = −softplus(a)\ndt_bias = [-1]\n", "")
        .replace("steps = 8", 'steps = 8\ntrain = ["W_a"]'),
        "[backward] train names 'W_a', but this scenario has no W_a"),
    "deltanet_dO_wide": (_swap(DELTANET, DN_TARGET, "dO = [[1, 0, 0], [0, 1, 0], [1, 1, 0]]").replace("steps = 8", ""),
                         "[backward] dO is 3 × 3; expected the final output's"),
    "deltanet_target_string": (_swap(DELTANET, DN_TARGET, 'target = "I"'), "[backward] target"),
    "deltanet_neither": (_swap(DELTANET, DN_TARGET, ""), "[backward] needs target = [[...]]"),
    # beside the short convolution or the gated output norm there is no backward pass yet
    "deltanet_conv": (_swap(DELTANET, "[deltanet]\n", "[deltanet]\nconv_q = [[1, 1]]\nconv_k = [[1, 1]]\n"
                                                      "conv_v = [[1, 1]]\n"),
                      "[backward] with [deltanet]'s short convolution or gated output norm (conv_q …, W_Z) is not"
                      " supported yet"),
    "deltanet_output_norm": (_swap(DELTANET, "[deltanet]\n", "[deltanet]\nW_Z = [[1, 0], [0, 1], [0, 0], [1, 1]]\n"
                                                             "gamma_o = [1, 1]\n"),
                             "[backward] with [deltanet]'s short convolution or gated output norm"),
    "deltanet_conv_then_backward_shape": (_swap(_swap(DELTANET, "[deltanet]\n", "[deltanet]\nconv_q = [[1, 1]]\n"
                                                      "conv_k = [[1, 1]]\nconv_v = [[1, 1]]\n"), DN_TARGET,
                                                "target = [[1]]"),
                                          "[backward] with [deltanet]'s short convolution"),
    # [linear]: its heads give W_Q, W_K, W_V only
    "linear_train_sinks": (LINEAR + 'train = ["sinks"]\n', "[backward] train names 'sinks', but this scenario has no"),
    "linear_train_empty_string": (LINEAR + 'train = [""]\n', "[backward] train names '', which is not a weight"),
    "linear_target_ragged": (LINEAR.replace("target = [[1, 0], [0, 1], [1, 1]]", "target = [[1, 0], [0], [1, 1]]"),
                             "[backward] target"),
    "linear_steps_negative": (LINEAR + "steps = -1\n", "[backward] steps = -1; expected a whole number from 0"),
    "linear_unknown_key": (LINEAR + "momentum = 0.9\n", "momentum"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_backward_beside_the_new_tables_is_one_line(cli: Callable[..., Run], write: Callable[[str], Path],
                                                            case: str) -> None:
    text, expected = CASES[case]
    assert_one_error_line(cli, write, text, expected)


# the exports load as --check does; one case of each table checks they refuse alike (the rest would only add time)
@pytest.mark.parametrize("case", ["mla_train_W_K", "deltanet_conv", "deltanet_train_g", "linear_target_ragged"])
@pytest.mark.parametrize("mode", [("--export", "json"), ("--export", "markdown")])
def test_the_exports_refuse_them_with_the_same_line(cli: Callable[..., Run], write: Callable[[str], Path], case: str,
                                                    mode: tuple[str, ...]) -> None:
    text, expected = CASES[case]
    assert assert_one_error_line(cli, write, text, expected, *mode) == assert_one_error_line(cli, write, text, expected)
