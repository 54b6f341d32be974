"""Every rule of the modern keys (docs/scenario-format.md) fails with one clean line: the key, where, what was expected."""

from __future__ import annotations

import pytest

from .conftest import BASE, HEAD
from .error_table import assert_one_error_line

# d_k = 4 (even) so [rope] cases fail only for the reason they test
HEAD4 = '''
[[heads]]
W_Q = [[1, 0, 1, 0], [0, 1, 0, 0], [1, 0, 0, 1], [0, 1, 1, 0]]
W_K = [[0, 0, 1, 1], [1, 1, 0, 0], [0, 1, 0, 1], [1, 0, 1, 0]]
W_V = [[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0]]
'''
SPLIT = '''
[attention]
num_heads = 2
num_kv_heads = 1
W_Q = [[1, 0, 1, 0], [0, 1, 0, 0], [1, 0, 0, 1], [0, 1, 1, 0]]
W_K = [[0, 1], [1, 0], [0, 1], [1, 1]]
W_V = [[1], [0], [0], [1]]
'''
CONTEXT = '[context]\ntokens = ["a"]\nX = [[1, 0, 1, 0]]\n'

CASES = {
    # [norm]
    "norm_unknown_key": (BASE + '[norm]\nkind = "rms"\ngama = [1, 1, 1, 1]\n' + HEAD,
                         "unknown key 'gama' in [norm]; did you mean 'gamma'?"),
    "norm_not_table": (BASE + 'norm = "rms"\n' + HEAD, "norm must be a table ([norm]), got a string"),
    "norm_missing_kind": (BASE + "[norm]\neps = 1e-5\n" + HEAD, "[norm] is missing 'kind'; expected kind = \"rms\""),
    "norm_kind": (BASE + '[norm]\nkind = "rmsnorm"\n' + HEAD,
                  "[norm] kind = 'rmsnorm' is not allowed; expected one of: 'rms', 'layer'; did you mean 'rms'?"),
    "norm_gamma_length": (BASE + '[norm]\nkind = "rms"\ngamma = [1, 1]\n' + HEAD,
                          "[norm] gamma has 2 numbers; expected 4 (one gain per column of X, d_model)"),
    "norm_gamma_nan": (BASE + '[norm]\nkind = "rms"\ngamma = [1, nan, 1, 1]\n' + HEAD, "[norm] gamma item 2 is nan; expected a finite number"),
    "norm_gamma_string": (BASE + '[norm]\nkind = "rms"\ngamma = [1, "1", 1, 1]\n' + HEAD, "[norm] gamma item 2 must be a number, got a string"),
    "norm_gamma_not_list": (BASE + '[norm]\nkind = "rms"\ngamma = 1\n' + HEAD, "[norm] gamma must be a list of 4 numbers"),
    "norm_beta_with_rms": (BASE + '[norm]\nkind = "rms"\nbeta = [0, 0, 0, 0]\n' + HEAD, "[norm] beta is only used with kind = 'layer'"),
    "norm_beta_length": (BASE + '[norm]\nkind = "layer"\nbeta = [0, 0, 0]\n' + HEAD, "[norm] beta has 3 numbers; expected 4"),
    "norm_eps_zero": (BASE + '[norm]\nkind = "rms"\neps = 0\n' + HEAD, "[norm] eps = 0; expected a finite number > 0"),
    "norm_eps_negative": (BASE + '[norm]\nkind = "layer"\neps = -1e-5\n' + HEAD, "[norm] eps = -1e-05; expected a finite number > 0"),
    "norm_eps_inf": (BASE + '[norm]\nkind = "layer"\neps = inf\n' + HEAD, "[norm] eps is inf; expected a finite number"),
    # biases
    "b_q_length": (BASE + HEAD + "b_Q = [1, 2]\n", "[[heads]] #1 b_Q has 2 numbers; expected 3 (one per column of W_Q)"),
    "b_v_nan": (BASE + HEAD + "b_V = [0, nan, 0]\n", "[[heads]] #1 b_V item 2 is nan; expected a finite number"),
    "b_k_typo": (BASE + HEAD + "b_k = [0, 0, 0]\n", "unknown key 'b_k' in [[heads]] #1; did you mean 'b_K'?"),
    "wide_b_k_length": (BASE + SPLIT + "b_K = [0, 0, 0, 0]\n",
                        "[attention] b_K has 4 numbers; expected 2 (num_kv_heads × d_k)"),
    "wide_b_q_length": (BASE + SPLIT + "b_Q = [0, 0]\n", "[attention] b_Q has 2 numbers; expected 4 (num_heads × d_k)"),
    "b_o_without_w_o": (BASE + HEAD + "[output]\nb_O = [1, 2, 3]\n", "[output] b_O needs W_O beside it"),
    "b_o_length": (BASE + HEAD + "[output]\nW_O = [[1], [1], [1]]\nb_O = [1, 2]\n",
                   "[output] b_O has 2 numbers; expected 1 (one per column of W_O, d_out)"),
    # [rope]
    "rope_unknown_key": (BASE + '[rope]\nlayout = "half"\nbse = 10\n' + HEAD4, "unknown key 'bse' in [rope]; did you mean 'base'?"),
    "rope_odd_dk": (BASE + '[rope]\nlayout = "half"\n' + HEAD, "[rope] needs an even d_k (dimensions rotate in pairs), but head 1 has d_k = 3"),
    "rope_cross": (BASE + '[rope]\nlayout = "half"\n' + CONTEXT + HEAD4, "[rope] needs self-attention"),
    "rope_no_layout": (BASE + "[rope]\nbase = 10000.0\n" + HEAD4, "[rope] is missing 'layout'; expected layout = \"interleaved\""),
    "rope_layout": (BASE + '[rope]\nlayout = "halves"\n' + HEAD4,
                    "[rope] layout = 'halves' is not allowed; expected one of: 'interleaved', 'half'; did you mean 'half'?"),
    "rope_base_zero": (BASE + '[rope]\nlayout = "half"\nbase = 0\n' + HEAD4, "[rope] base = 0; expected a finite number > 0"),
    "rope_base_string": (BASE + '[rope]\nlayout = "half"\nbase = "1e4"\n' + HEAD4, "[rope] base must be a number, got a string"),
    "rope_positions_length": (BASE + '[rope]\nlayout = "half"\npositions = [0, 1]\n' + HEAD4,
                              "[rope] positions has 2 numbers; expected 3, one per token"),
    "rope_position_negative": (BASE + '[rope]\nlayout = "half"\npositions = [0, -1, 2]\n' + HEAD4,
                               "[rope] positions item 2 (\"love\") is a number (-1); expected a whole number >= 0"),
    "rope_position_float": (BASE + '[rope]\nlayout = "half"\npositions = [0, 1.5, 2]\n' + HEAD4,
                            "[rope] positions item 2 (\"love\") is a number (1.5); expected a whole number >= 0"),
    "rope_position_bool": (BASE + '[rope]\nlayout = "half"\npositions = [0, true, 2]\n' + HEAD4,
                           "[rope] positions item 2 (\"love\") is a boolean (true); expected a whole number >= 0"),
    "rope_positions_not_list": (BASE + '[rope]\nlayout = "half"\npositions = 3\n' + HEAD4,
                                "[rope] positions must be a list of 3 whole numbers >= 0"),
    "rope_heads_of_two_widths": (BASE + '[rope]\nlayout = "half"\n' + HEAD4 + HEAD4.replace("[[heads]]", '[[heads]]\nname = "narrow"')
                                 .replace("[[1, 0, 1, 0], [0, 1, 0, 0], [1, 0, 0, 1], [0, 1, 1, 0]]", "[[1, 0], [0, 1], [1, 0], [0, 1]]")
                                 .replace("[[0, 0, 1, 1], [1, 1, 0, 0], [0, 1, 0, 1], [1, 0, 1, 0]]", "[[0, 1], [1, 0], [0, 1], [1, 1]]"),
                                 "[rope] needs every head to have the same d_k (the format keeps one set of frequencies"
                                 " θ_i = base^(−2i/d_k) for every head, as RoPE models do), but head 1 has d_k = 4; head 2"
                                 " (\"narrow\") has d_k = 2; expected one d_k for every head"),
    "rope_many_heads_of_two_widths": (BASE + '[rope]\nlayout = "half"\n' + HEAD4 * 5 + HEAD4
                                      .replace("[[1, 0, 1, 0], [0, 1, 0, 0], [1, 0, 0, 1], [0, 1, 1, 0]]", "[[1, 0], [0, 1], [1, 0], [0, 1]]")
                                      .replace("[[0, 0, 1, 1], [1, 1, 0, 0], [0, 1, 0, 1], [1, 0, 1, 0]]", "[[0, 1], [1, 0], [0, 1], [1, 1]]"),
                                      "but head 1, head 2, head 3 and 2 more have d_k = 4; head 6 has d_k = 2"),
    # [alibi]
    "alibi_slopes_length": (BASE + "[alibi]\nslopes = [0.5, 0.25]\n" + HEAD, "[alibi] slopes has 2 numbers; expected 1 (one slope per head)"),
    "alibi_slope_inf": (BASE + "[alibi]\nslopes = [inf]\n" + HEAD, "[alibi] slopes item 1 is inf; expected a finite number"),
    "alibi_cross": (BASE + "[alibi]\n" + CONTEXT + HEAD, "[alibi] needs self-attention"),
    "alibi_unknown_key": (BASE + "[alibi]\nslope = [0.5]\n" + HEAD, "unknown key 'slope' in [alibi]; did you mean 'slopes'?"),
    # ALiBi is defined for keys at or before the query (Press et al.): a mask that allows a later key is refused
    "alibi_without_mask": (BASE + "[alibi]\n" + HEAD,
                           "[alibi] needs a mask under which no query attends a later key, but with mask 'none' query 1 (\"I\") may"
                           " attend key 2 (\"love\"), which comes after it: there slope·(j − i) is positive, so the bias favours"
                           " later keys rather than nearer ones"),
    "alibi_padding": (BASE + '[mask]\nkind = "padding"\npad = [false, false, true]\n[alibi]\n' + HEAD,
                      "with mask 'padding' query 1 (\"I\") may attend key 2 (\"love\"), which comes after it"),
    "alibi_custom_upper": (BASE + '[mask]\nkind = "custom"\nallow = [[1, 0, 0], [1, 1, 1], [0, 1, 1]]\n[alibi]\n' + HEAD,
                           "with mask 'custom' query 2 (\"love\") may attend key 3 (\"AI\"), which comes after it"),
    "alibi_mask_why": (BASE + "[alibi]\n" + HEAD,
                       "Press et al. define the bias for keys j ≤ i only. Expected mask = \"causal\", a sliding window, or a"
                       " padding or custom mask that allows no key after its query"),
    "alibi_positions_decrease": (BASE + 'mask = "causal"\n[rope]\nlayout = "half"\npositions = [5, 1, 7]\n[alibi]\n' + HEAD4,
                                 "with mask 'causal' query 2 (\"love\", position 1) may attend key 1 (\"I\"), whose [rope]"
                                 " position 5 is later"),
    # sliding window
    "sliding_no_window": (BASE + '[mask]\nkind = "sliding"\n' + HEAD, "mask kind 'sliding' needs window = W"),
    "sliding_window_zero": (BASE + '[mask]\nkind = "sliding"\nwindow = 0\n' + HEAD, "[mask] window is 0, too small; expected a whole number >= 1"),
    "sliding_window_float": (BASE + '[mask]\nkind = "sliding"\nwindow = 2.5\n' + HEAD, "[mask] window is a number (2.5); expected a whole number >= 1"),
    "sliding_cross": (BASE + '[mask]\nkind = "sliding"\nwindow = 2\n' + CONTEXT + HEAD, "mask kind 'sliding' needs self-attention"),
    "window_on_causal": (BASE + '[mask]\nkind = "causal"\nwindow = 2\n' + HEAD, "[mask] window is only used with kind = 'sliding'"),
    "sliding_typo": (BASE + 'mask = "slidng"\n' + HEAD, "did you mean 'sliding'?"),
    # GQA / MQA
    "kv_heads_divides": (BASE + SPLIT.replace("num_heads = 2\nnum_kv_heads = 1", "num_heads = 2\nnum_kv_heads = 3"),
                         "[attention] num_kv_heads = 3 does not divide num_heads = 2"),
    "kv_heads_zero": (BASE + SPLIT.replace("num_kv_heads = 1", "num_kv_heads = 0"), "[attention] num_kv_heads must be a whole number >= 1, got a number (0)"),
    "kv_heads_string": (BASE + SPLIT.replace("num_kv_heads = 1", 'num_kv_heads = "1"'),
                        "[attention] num_kv_heads must be a whole number >= 1, got a string ('1')"),
    "kv_w_k_width": (BASE + SPLIT.replace("W_K = [[0, 1], [1, 0], [0, 1], [1, 1]]", "W_K = [[0, 1, 1, 1], [1, 0, 0, 0], [0, 1, 0, 0], [1, 1, 0, 0]]"),
                     "[attention] W_K has 4 columns; expected num_kv_heads × d_k = 1 × 2"),
    "kv_w_v_divides": (BASE + SPLIT.replace("num_heads = 2\nnum_kv_heads = 1", "num_heads = 4\nnum_kv_heads = 2")
                       .replace("W_K = [[0, 1], [1, 0], [0, 1], [1, 1]]", "W_K = [[0, 1], [1, 0], [0, 1], [1, 1]]")
                       .replace("W_V = [[1], [0], [0], [1]]", "W_V = [[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 1]]"),
                       "[attention] W_V has 3 columns, which num_kv_heads = 2 does not divide; expected num_kv_heads × d_v columns"),
    # a key of the other way of writing heads is renamed, not sent to the other table
    "kv_heads_in_heads_table": (BASE + HEAD + "num_kv_heads = 1\n",
                                "unknown key 'num_kv_heads' in [[heads]] #1; did you mean 'kv_head'? (a [[heads]] table names the K/V head"
                                " it reads, kv_head = <index>; num_kv_heads = <count> is the [attention] form)"),
    "kv_head_in_attention": (BASE + SPLIT + "kv_head = 0\n",
                             "unknown key 'kv_head' in [attention]; did you mean 'num_kv_heads'? ([attention] says how many K/V heads"
                             " the query heads share, num_kv_heads = <count>; kv_head = <index> is the [[heads]] form)"),
    # sinks
    "sink_string": (BASE + HEAD + 'sink = "0.5"\n', "[[heads]] #1 sink must be a number, got a string"),
    "sink_nan": (BASE + HEAD + "sink = nan\n", "[[heads]] #1 sink is nan; expected a finite number"),
    "sinks_length": (BASE + SPLIT + "sinks = [0.5]\n", "[attention] sinks has 1 number; expected 2 (one sink logit per query head, num_heads)"),
    "sink_in_attention": (BASE + SPLIT + "sink = 0.5\n",
                          "unknown key 'sink' in [attention]; did you mean 'sinks'? ([attention] takes sinks = [...], one logit per"
                          " query head; sink = <logit> is the [[heads]] form)"),
    "sinks_in_heads": (BASE + HEAD + "sinks = [0.5]\n",
                       "unknown key 'sinks' in [[heads]] #1; did you mean 'sink'? (a [[heads]] table takes its own sink = <logit>;"
                       " sinks = [...], one logit per query head, is the [attention] form)"),
    "sink_at_top": (BASE + "sink = 0.5\n" + HEAD, "key 'sink' is not allowed: sink belongs in a [[heads]] table"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_check_reports_one_clean_line(case: str, cli, write) -> None:
    assert_one_error_line(cli, write, *CASES[case])


@pytest.mark.parametrize("text", [
    BASE + '[norm]\nkind = "layer"\ngamma = [1, 2, 1, 1]\nbeta = [0, 1, 0, 0]\n' + HEAD,
    BASE + '[rope]\nlayout = "interleaved"\nbase = 100\npositions = [3, 3, 7]\n' + HEAD4,
    BASE + 'mask = "causal"\n[alibi]\n' + HEAD,
    BASE + '[mask]\nkind = "sliding"\nwindow = 2\n[alibi]\nslopes = [0.5]\n' + HEAD,
    BASE + '[mask]\nkind = "custom"\nallow = [[1, 0, 0], [0, 1, 0], [1, 0, 1]]\n[alibi]\n' + HEAD,
    BASE + '[mask]\nkind = "padding"\npad = [false, true, true]\n[alibi]\n' + HEAD,
    BASE + 'mask = "causal"\n[rope]\nlayout = "half"\npositions = [2, 2, 9]\n[alibi]\n' + HEAD4,
    BASE + 'mask = { kind = "sliding", window = 5 }\n' + HEAD,
    BASE + SPLIT + "b_Q = [1, 2, 3, 4]\nb_K = [0, 1]\nb_V = [1]\nsinks = [0, 1]\n[output]\nW_O = [[1], [1]]\nb_O = [0.5]\n",
])
def test_valid_modern_files_pass(text: str, cli, write) -> None:
    run = cli("--check", str(write(text)))
    assert run.code == 0, run.err
    assert run.out.startswith("ok: ")


@pytest.mark.parametrize("mode", [("--export", "markdown"), ("--export", "json"), ("--check",)])
@pytest.mark.parametrize("case", ["rope_heads_of_two_widths", "alibi_without_mask"])
def test_every_command_refuses_them(case: str, mode: tuple[str, ...], cli, write) -> None:
    """[rope] over heads of two d_k once crashed --export markdown (StopIteration) and the app on tab."""
    assert_one_error_line(cli, write, *CASES[case], *mode)
