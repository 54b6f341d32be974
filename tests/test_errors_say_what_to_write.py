"""Messages that say what to write (issue 29 §2 and §4): a whole number written 2.0 is told "write 2" at every
key that counts; ``mask = "sliding"`` (or "padding", "custom") is shown the [mask] table its key needs; heads
that share a K/V head name the weight that differs; [mla] with a partial or scaled [rope] says its own rule.
Each line is compared whole: one clean line, exit 2, nothing on stdout."""

from __future__ import annotations

import pytest

from .conftest import BASE, HEAD

SPLIT = "[attention]\nnum_heads = {heads}\n" + HEAD.split("\n", 2)[2]
HEAD4 = """
[[heads]]
W_Q = [[1, 0, 1, 0], [0, 1, 0, 0], [1, 0, 0, 1], [0, 1, 1, 0]]
W_K = [[0, 0, 1, 1], [1, 1, 0, 0], [0, 1, 0, 1], [1, 0, 1, 0]]
W_V = [[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0]]
"""
HEAD_B = HEAD.replace("[[heads]]", "[[heads]]\nkv_head = 0")
MLA = '''
[mla]
num_heads = {heads}
d_nope = 2
d_rope = {d_rope}
d_v = 2
W_DKV = [[1, 0], [0, 0], [0, 1], [1, 0]]
W_UK = [[1, 0, 0, 1], [0, 1, 1, 0]]
W_UV = [[1, 0, 1, 1], [0, 1, 0, 1]]
'''
MLA2 = MLA.format(heads=2, d_rope=2) + '''W_KR = [[0, 1], [1, 0], [0, 0], [0, 1]]
W_Q = [[1, 0, 0, 1, 0, 1, 1, 0], [0, 1, 1, 0, 1, 0, 0, 1], [1, 0, 0, 0, 0, 0, 1, 0], [0, 0, 0, 1, 1, 1, 0, 0]]
'''
MLA4 = MLA.format(heads=2, d_rope=4) + '''W_KR = [[0, 1, 0, 0], [1, 0, 0, 1], [0, 0, 1, 0], [0, 1, 1, 0]]
W_Q = [[1, 0, 0, 1, 0, 1, 1, 0, 0, 1, 0, 0], [0, 1, 1, 0, 1, 0, 0, 1, 1, 0, 0, 1], [1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0],
       [0, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 0]]
'''
CAUSAL = BASE + 'mask = "causal"\n'
ROPE = '[rope]\nlayout = "interleaved"\n'
WRITE_2 = "; write 2, without the decimal point (TOML reads 2.0 as a float)"
LATENT_PARTIAL = ("[rope] partial = 0.5 does not go with [mla]: latent attention already turns only part of each query and"
                  " key, all d_rope = {d_rope} of its rotary dimensions (q_R and the shared k_R), and never the d_nope = 2"
                  " others; remove partial (d_nope and d_rope set the split)")

CASES = {
    # whole numbers: "write 2" wherever a key counts
    "num_heads_float": (BASE + SPLIT.format(heads="2.0"), "[attention] num_heads must be a whole number >= 1, got a number"
                        " (2.0)" + WRITE_2),
    "num_kv_heads_float": (BASE + SPLIT.format(heads=1).replace("num_heads = 1", "num_heads = 1\nnum_kv_heads = 1.0"),
                           "[attention] num_kv_heads must be a whole number >= 1, got a number (1.0); write 1, without the"
                           " decimal point (TOML reads 1.0 as a float)"),
    "kv_head_float": (BASE + HEAD.replace("[[heads]]", "[[heads]]\nkv_head = 2.0"),
                      "[[heads]] #1 kv_head must be a whole number >= 0 (the K/V head it reads), got a number (2.0)" + WRITE_2),
    "mla_num_heads_zero": (CAUSAL + MLA2.replace("num_heads = 2", "num_heads = 0"),
                           "[mla] num_heads must be a whole number >= 1 (how many query heads), got a number (0)"),
    "mla_num_heads_float": (CAUSAL + MLA2.replace("num_heads = 2", "num_heads = 2.0"),
                            "[mla] num_heads must be a whole number >= 1 (how many query heads), got a number (2.0)" + WRITE_2),
    "window_float": (BASE + '[mask]\nkind = "sliding"\nwindow = 2.0\n' + HEAD,
                     "[mask] window is a number (2.0); expected a whole number >= 1 (itself and the window−1 tokens before"
                     " it)" + WRITE_2),
    "position_float": (BASE + ROPE + "positions = [0, 2.0, 3]\n" + HEAD4,
                       '[rope] positions item 2 ("love") is a number (2.0); expected a whole number >= 0 (the token\'s'
                       " position)" + WRITE_2),
    "steps_float": (BASE + HEAD + "[backward]\ntarget = [[1, 0, 0], [0, 1, 0], [0, 0, 1]]\nsteps = 2.0\n",
                    "[backward] steps must be a whole number from 0 to 1000, got a number (2.0)" + WRITE_2),
    "input_layer_float": (BASE + '[input]\nkind = "residual"\nlayer = 2.0\n' + HEAD,
                          "[input] layer = a number (2.0); expected a whole number from 1 to 2^53 (at layer 0, X is the"
                          " embeddings)" + WRITE_2),
    "tiles_size_float": (BASE + HEAD + "[tiles]\nsize = 2.0\n",
                         "[tiles] size is a number (2.0); expected a whole number from 1 to 1048576" + WRITE_2),
    # a string mask whose kind needs a key beside it
    "sliding_string": (BASE + 'mask = "sliding"\n' + HEAD,
                       'mask = "sliding" needs window, which the string form cannot hold; write a [mask] table in its place,'
                       ' with kind = "sliding" and window = W (a whole number >= 1: each token sees itself and the W−1'
                       " before it)"),
    "padding_string": (BASE + 'mask = "padding"\n' + HEAD,
                       'mask = "padding" needs pad, which the string form cannot hold; write a [mask] table in its place,'
                       ' with kind = "padding" and pad = [...], one true/false per key token (3)'),
    "custom_string": (BASE + 'mask = "custom"\n' + HEAD,
                      'mask = "custom" needs allow, which the string form cannot hold; write a [mask] table in its place,'
                      ' with kind = "custom" and allow = [[...]], 3 rows of 3 flags (1/true = may attend)'),
    # heads sharing a K/V head: the weight that differs, by name
    "kv_head_w_k_differs": (BASE + HEAD_B + HEAD_B.replace("W_K = [[0, 0, 1]", "W_K = [[0, 1, 1]"),
                            "[[heads]] #2 has kv_head = 0 like [[heads]] #1, but a different W_K; expected heads that share"
                            " a K/V head to carry the same K/V weights"),
    "kv_head_w_v_differs": (BASE + HEAD_B + HEAD_B.replace("W_V = [[1, 0, 0]", "W_V = [[2, 0, 0]"),
                            "[[heads]] #2 has kv_head = 0 like [[heads]] #1, but a different W_V; expected heads that share"
                            " a K/V head to carry the same K/V weights"),
    "kv_head_both_differ": (BASE + HEAD_B + HEAD_B.replace("W_V = [[1, 0, 0]", "W_V = [[2, 0, 0]")
                            .replace("W_K = [[0, 0, 1]", "W_K = [[0, 1, 1]"),
                            "[[heads]] #2 has kv_head = 0 like [[heads]] #1, but different W_K and W_V; expected heads that"
                            " share a K/V head to carry the same K/V weights"),
    "kv_head_bias_on_one": (BASE + HEAD_B + "b_K = [1, 0, 0]\n" + HEAD_B,
                            "[[heads]] #2 has kv_head = 0 like [[heads]] #1, but no b_K, which [[heads]] #1 has; expected"
                            " heads that share a K/V head to carry the same K/V weights"),
    # [mla] and a partial or scaled [rope]: its own rule, whatever d_rope
    "mla_partial_d_rope_2": (CAUSAL + MLA2 + ROPE + "partial = 0.5\n", LATENT_PARTIAL.format(d_rope=2)),
    "mla_partial_d_rope_4": (CAUSAL + MLA4 + ROPE + "partial = 0.5\n", LATENT_PARTIAL.format(d_rope=4)),
    "mla_scaling": (CAUSAL + MLA2 + ROPE + '[rope.scaling]\ntype = "linear"\nfactor = 2.0\n',
                    "[rope.scaling] type = \"linear\" does not go with [mla]: DeepSeek's latent attention scales its"
                    " rotary parts only with YaRN (its mscale_all_dim also multiplies the softmax scale by m²); expected"
                    " type = \"yarn\" or no [rope.scaling]"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_whole_line(case: str, cli, write) -> None:
    text, expected = CASES[case]
    path = write(text)
    run = cli("--check", str(path))
    assert (run.code, run.out) == (2, ""), run.out
    assert run.err == f"error: {path}: {expected}\n"


def test_a_whole_number_that_is_refused_anyway_gets_no_suggestion(cli, write) -> None:
    """0.0 written 0 is still below 1: "write 0" would send the person to a second error."""
    path = write(BASE + SPLIT.format(heads="0.0"))
    assert cli("--check", str(path)).err == (f"error: {path}: [attention] num_heads must be a whole number >= 1, got a"
                                             " number (0.0)\n")


def test_a_table_mask_without_its_key_keeps_the_short_line(cli, write) -> None:
    path = write(BASE + '[mask]\nkind = "sliding"\n' + HEAD)
    assert cli("--check", str(path)).err == (f"error: {path}: mask kind 'sliding' needs window = W (a whole number >= 1:"
                                             " each token sees itself and the W−1 before it)\n")
