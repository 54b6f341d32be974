"""Hostile files for the keys of [mla], [linear] and [deltanet]: each is one error line, exit code 2, no
traceback, from --check and from every export alike (tests/fuzz_paths.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .fuzz_paths import assert_refused

ROOT = Path(__file__).resolve().parent.parent / "scenarios"
MLA, LINEAR, DELTANET = ((ROOT / f"{name}.toml").read_text(encoding="utf-8") for name in ("mla", "linear", "deltanet"))
BIG = "[" + ", ".join(["1"] * 1_000_000) + "]"  # a 10⁶-element row
NESTED = "[" * 60 + "1" + "]" * 60


def _swap(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


MLA_W_DKV = "W_DKV = [          # d_model × d_c: the latent c_KV\n  [1, 0],\n  [0, 0],\n  [0, 1],\n  [1, 0],\n]"
CASES = {
    "mla_heads_huge": _swap(MLA, "num_heads = 2", "num_heads = 1000000000"),
    "mla_heads_negative": _swap(MLA, "num_heads = 2", "num_heads = -2"),
    "mla_heads_string": _swap(MLA, "num_heads = 2", 'num_heads = "2"'),
    "mla_heads_float": _swap(MLA, "num_heads = 2", "num_heads = 2.0"),
    "mla_heads_hex_huge": _swap(MLA, "num_heads = 2", "num_heads = 0x" + "f" * 2000),
    "mla_d_nope_zero": _swap(MLA, "d_nope = 2", "d_nope = 0"),
    "mla_d_rope_huge": _swap(MLA, "d_rope = 2", "d_rope = 123456789012"),
    "mla_d_rope_odd": _swap(MLA, "d_rope = 2", "d_rope = 3"),
    "mla_d_v_bool": _swap(MLA, "d_v = 2", "d_v = true"),
    "mla_W_DKV_nan": _swap(MLA, MLA_W_DKV, "W_DKV = [[1, 0], [0, nan], [0, 1], [1, 0]]"),
    "mla_W_DKV_inf": _swap(MLA, MLA_W_DKV, "W_DKV = [[1, 0], [0, -inf], [0, 1], [1, 0]]"),
    "mla_W_DKV_ragged": _swap(MLA, MLA_W_DKV, "W_DKV = [[1, 0], [0], [0, 1], [1, 0]]"),
    "mla_W_DKV_string": _swap(MLA, MLA_W_DKV, 'W_DKV = [[1, 0], [0, "0"], [0, 1], [1, 0]]'),
    "mla_W_DKV_flat": _swap(MLA, MLA_W_DKV, "W_DKV = [1, 0, 0, 1]"),
    "mla_W_DKV_table": _swap(MLA, MLA_W_DKV, "W_DKV = { a = 1 }"),
    "mla_W_DKV_nested": _swap(MLA, MLA_W_DKV, f"W_DKV = {NESTED}"),
    "mla_W_DKV_million": _swap(MLA, MLA_W_DKV, f"W_DKV = [{BIG}, {BIG}, {BIG}, {BIG}]"),
    "mla_W_DKV_empty": _swap(MLA, MLA_W_DKV, "W_DKV = [[], [], [], []]"),
    "mla_W_DKV_huge_values": _swap(MLA, MLA_W_DKV, "W_DKV = [[1e308, 0], [0, 0], [0, 1e308], [1e308, 0]]"),
    "mla_kv_norm_string": _swap(MLA, "kv_norm = false", 'kv_norm = "yes"'),
    "mla_gamma_kv_long": _swap(MLA, "kv_norm = false", "kv_norm = true\ngamma_kv = [1, 1, 1]"),
    "mla_gamma_kv_nan": _swap(MLA, "kv_norm = false", "kv_norm = true\ngamma_kv = [1, nan]"),
    "mla_eps_zero": _swap(MLA, "kv_norm = false", "kv_norm = true\neps = 0"),
    "mla_eps_string": _swap(MLA, "kv_norm = false", 'kv_norm = true\neps = "small"'),
    "mla_q_norm_without_latent": _swap(MLA, "kv_norm = false", "q_norm = true"),
    "mla_not_a_table": 'mla = 3\n' + MLA.split("\n[mla]")[0]
                       + '\n[[heads]]\nW_Q = [[1], [0], [0], [1]]\nW_K = [[1], [0], [0], [1]]\nW_V = [[1], [0], [0], [1]]\n',
    "linear_feature_number": _swap(LINEAR, 'feature = "elu1"', "feature = 1"),
    "linear_feature_list": _swap(LINEAR, 'feature = "elu1"', 'feature = ["elu1"]'),
    "linear_feature_huge_string": _swap(LINEAR, 'feature = "elu1"', 'feature = "' + "x" * 100_000 + '"'),
    "linear_normalize_number": _swap(LINEAR, "normalize = true", "normalize = 1"),
    "linear_not_a_table": _swap(LINEAR, '[linear]\nfeature = "elu1"\nnormalize = true', 'linear = "elu1"'),
    "linear_W_V_nan": _swap(LINEAR, "  [0, 2],\n]", "  [0, nan],\n]"),
    "linear_huge_values": _swap(LINEAR, "  [0, 2],\n]", "  [0, 1e308],\n]").replace("[1, 1, 0, 0],   # AI", "[1, 1, 0, 1e308],"),
    "deltanet_g_nan": _swap(DELTANET, "g = [[-0.5], [-0.5], [-0.5]]", "g = [[-0.5], [nan], [-0.5]]"),
    "deltanet_g_inf": _swap(DELTANET, "g = [[-0.5], [-0.5], [-0.5]]", "g = [[-0.5], [-inf], [-0.5]]"),
    "deltanet_g_positive": _swap(DELTANET, "g = [[-0.5], [-0.5], [-0.5]]", "g = [[-0.5], [0.5], [-0.5]]"),
    "deltanet_g_rows": _swap(DELTANET, "g = [[-0.5], [-0.5], [-0.5]]", "g = [[-0.5], [-0.5]]"),
    "deltanet_g_columns": _swap(DELTANET, "g = [[-0.5], [-0.5], [-0.5]]", "g = [[-0.5, 0], [-0.5, 0], [-0.5, 0]]"),
    "deltanet_g_flat": _swap(DELTANET, "g = [[-0.5], [-0.5], [-0.5]]", "g = [-0.5, -0.5, -0.5]"),
    "deltanet_g_number": _swap(DELTANET, "g = [[-0.5], [-0.5], [-0.5]]", "g = -0.5"),
    "deltanet_g_string": _swap(DELTANET, "g = [[-0.5], [-0.5], [-0.5]]", 'g = [["-0.5"], [-0.5], [-0.5]]'),
    "deltanet_g_nested": _swap(DELTANET, "g = [[-0.5], [-0.5], [-0.5]]", f"g = {NESTED}"),
    "deltanet_g_million": _swap(DELTANET, "g = [[-0.5], [-0.5], [-0.5]]", f"g = [{BIG}, {BIG}, {BIG}]"),
    "deltanet_beta_inf": _swap(DELTANET, "beta = [[1.0], [0.5], [0.5]]", "beta = [[inf], [0.5], [0.5]]"),
    "deltanet_beta_huge": _swap(DELTANET, "beta = [[1.0], [0.5], [0.5]]", "beta = [[1e308], [1e308], [1e308]]"),
    "deltanet_beta_bool": _swap(DELTANET, "beta = [[1.0], [0.5], [0.5]]", "beta = [[true], [0.5], [0.5]]"),
    "deltanet_beta_missing": _swap(DELTANET, "beta = [[1.0], [0.5], [0.5]]", ""),
    "deltanet_W_a_shape": _swap(DELTANET, "g = [[-0.5], [-0.5], [-0.5]]", "W_a = [[1], [0]]\nA_log = [0]\ndt_bias = [0]"),
    "deltanet_W_a_million": _swap(DELTANET, "g = [[-0.5], [-0.5], [-0.5]]", f"W_a = [{BIG}]\nA_log = [0]\ndt_bias = [0]"),
    "deltanet_A_log_huge": _swap(DELTANET, "g = [[-0.5], [-0.5], [-0.5]]",
                                 "W_a = [[1], [0], [0], [1]]\nA_log = [1e308]\ndt_bias = [0]"),
    "deltanet_A_log_long": _swap(DELTANET, "g = [[-0.5], [-0.5], [-0.5]]",
                                 "W_a = [[1], [0], [0], [1]]\nA_log = [0, 0]\ndt_bias = [0]"),
    "deltanet_dt_bias_string": _swap(DELTANET, "g = [[-0.5], [-0.5], [-0.5]]",
                                     'W_a = [[1], [0], [0], [1]]\nA_log = [0]\ndt_bias = "0"'),
    "deltanet_dt_bias_missing": _swap(DELTANET, "g = [[-0.5], [-0.5], [-0.5]]", "W_a = [[1], [0], [0], [1]]\nA_log = [0]"),
    "deltanet_W_b_nan": _swap(DELTANET, "beta = [[1.0], [0.5], [0.5]]", "W_b = [[1], [nan], [0], [1]]"),
    "deltanet_W_b_huge": _swap(DELTANET, "beta = [[1.0], [0.5], [0.5]]", "W_b = [[1e308], [1e308], [0], [1]]"),
    "deltanet_with_linear": DELTANET + '\n[linear]\nfeature = "elu1"\n',
    "deltanet_not_a_table": _swap(DELTANET, "[deltanet]\ng", "deltanet = 1\n[x]\ng"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_files_are_one_error_line(case: str) -> None:
    # a 10⁶-element file takes seconds to read: --check alone for those, --check and two exports for the rest
    assert_refused(CASES[case], () if "million" in case else (("--export", "json"), ("--export", "markdown")))
