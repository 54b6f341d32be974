"""What fuzzing the parts of 2026 found (tests/test_fuzz_parts_2026.py), each now computed and checked on every
path at every decimals, or refused in one line that names what overflowed:

- an index weight w past float64 scored the key −∞, which the JSON wrote as null (a masked key) though it was visible;
- Kimi's low-rank gate past float64, and a Key row whose Σk² is past float64 (KDA's and Gated DeltaNet's
  Normalise wrote √(∞ + 1e-6) = ∞ and k = 0, where the row has a finite length);
- [v_norm]: a quotient after a dot product rounded to its last digit missed the shown V by a digit, and a zero row
  over eps = 1e-6 divided by a root written 0.0 (and the calculator now follows a by-hand step inside the
  parentheses of (0.00·0 + 0.92·3) / 1.95 = (0.00 + 2.76) / 1.95);
- a dot product of 1e-300 and −1e300 wrote 0.00000000000·(−1e300) = −1 (every Project line, not only [v_norm]):
  an operand too small for any places is now written by its mantissa, 1.000e-300;
- [ssd]: a state past float64 (dt·x·B) showed ∞ in Recurrence while the attention form stayed finite, now refused
  in one line; by hand, dt·A was written down rounded one way and used rounded the other (0.13·(−0.5) written
  −0.06, worked as −0.07); SiLU of a z far below 0 raised OverflowError in the Gate stage's line;
- [differential]: a λ dot product past float64 below 0 (e^ of it 0) was computed, but its printed line wrote −∞
  and --export markdown failed where --check had said ok; now refused in one line; so is [ssd]'s step X·W_dt past
  float64, written −∞;
- a [value_scale] factor of 1e-300 on a projection of −1e300 is written by its mantissa (it read 0.00000000000);
- [ssd]'s Agree line for two outputs of 6.9e152 a rounding apart writes their exact decimals, as many as make the
  gap on paper agree (12 digits showed none of the gap −9.304e136).
"""

from __future__ import annotations

import pytest

from .fuzz_paths import assert_every_path, assert_refused

# the worksheet refuses, in one line, what it does not print yet (docs/scenario-format.md)
WORKSHEET = frozenset({"worksheet"})

COMPUTED = {
    "ssd_step_rounded_as_the_kernel_rounds_it": """\
tokens = ["t0", "t1", "t2"]
X = [[0, 0, 0], [0, 0, 0], [0, 2, 0]]
mask = "causal"
[[heads]]
name = "h0"
W_Q = [[0, 0], [0, 0], [0, 0]]
W_K = [[0, 0], [0, 0], [0, 0]]
W_V = [[0, 0], [0, 0], [0, 0]]
[[heads]]
name = "h1"
W_Q = [[0, 0], [0, 0], [0, 0]]
W_K = [[0, 0], [0, 0], [0, 0]]
W_V = [[0, 0], [0, 0], [0, 0]]
[ssd]
num_heads = 2
num_groups = 1
A = [-1.0, -0.5]
W_dt = [[0, 0], [0, -1], [0, 0]]
B = [[0], [0], [0]]
C = [[0], [0], [0]]
x = [[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
""",
    "v_norm_layer_norm_before_it": """\
tokens = ["t0", "t1", "t2", "t3"]
X = [[0, -1, -3], [2, -1, -2], [0, -2, 0], [2, 3, 0]]
[norm]
kind = "layer"
beta = [0, 0, -2]
[[heads]]
name = "h0"
W_Q = [[0], [0], [0.08]]
W_K = [[-1], [-0.0], [0.42]]
W_V = [[-3], [1.78], [-3]]
[v_norm]
""",
    "ssd_gate_silu_of_a_z_far_below_zero": """\
tokens = ["t0"]
X = [[0]]
mask = "causal"
[[heads]]
name = "h0"
W_Q = [[0, 0]]
W_K = [[0, 0]]
W_V = [[0, 0]]
[[heads]]
name = "h1"
W_Q = [[0, 0]]
W_K = [[0, 0]]
W_V = [[0, 0]]
[ssd]
num_heads = 2
num_groups = 1
A = [-1, -1]
W_dt = [[1e+153, 0]]
B = [[0]]
C = [[1e+200]]
x = [[0, 0, 1.7e+308, 1e+200]]
z = [[-1.7e+308, 1e+200, 1, 1e+153]]
eps = 1e+300
""",
    "v_norm_tiny_weight_huge_input": """\
tokens = ["t0", "t1"]
X = [[0, 0], [1, -1e+300]]
[[heads]]
name = "h0"
W_Q = [[0, 0], [0, 0]]
W_K = [[0, 0], [0, 0]]
W_V = [[0, 5e-324], [0, 1e-300]]
[v_norm]
""",
    "v_norm_by_hand_products_in_parentheses": """\
tokens = ["t0"]
X = [[0, 0.92]]
[[heads]]
name = "h0"
W_Q = [[0, 0], [0, 0]]
W_K = [[0, 0], [0, 0]]
W_V = [[0, 0], [0, 3]]
[v_norm]
""",
    "v_norm_quotient_after_a_rounded_dot": """\
tokens = ["t0", "t1", "t2"]
X = [[0], [1], [0]]
[norm]
kind = "rms"
[[heads]]
name = "h0"
W_Q = [[0, 0]]
W_K = [[0, 0]]
W_V = [[0, 0]]
[[heads]]
name = "h1"
W_Q = [[0, 0]]
W_K = [[0, 0]]
W_V = [[0, 3]]
[v_norm]
""",
    "v_norm_zero_row": """\
tokens = ["t0"]
X = [[0]]
[[heads]]
name = "h0"
W_Q = [[0]]
W_K = [[0]]
W_V = [[0]]
[v_norm]
""",
    "tiny_times_huge_operand": """\
tokens = ["t0"]
X = [[1e-300]]
[[heads]]
name = "h0"
W_Q = [[0]]
W_K = [[0]]
W_V = [[-1e+300]]
""",
    "v_norm_tiny_times_huge": """\
tokens = ["t0"]
X = [[1e-300]]
[[heads]]
name = "h0"
W_Q = [[0]]
W_K = [[0]]
W_V = [[-1e+300]]
[v_norm]
""",
    # the factor read 0.00000000000 at every places, so the line said (−1e300)·0.00000000000 = −1
    "value_scale_tiny_factor_on_a_huge_projection": """\
tokens = ["t0"]
X = [[1]]
[[heads]]
name = "h0"
W_Q = [[0]]
W_K = [[0]]
W_V = [[-1e+300]]
[value_scale]
factor = 1e-300
""",
    # the two forms one rounding apart at 6.9e152: no 12 digits showed their gap of −9.304e136
    "ssd_agree_gap_of_huge_outputs": """\
tokens = ["t0"]
X = [[0, -1e+300]]
mask = "causal"
[[heads]]
name = "h0"
W_Q = [[0, 0], [0, 0]]
W_K = [[0, 0], [0, 0]]
W_V = [[0, 0], [0, 0]]
[ssd]
num_heads = 1
num_groups = 1
A = [-1]
W_dt = [[0], [0]]
B = [[1e-300]]
C = [[1e+153]]
""",
}

REFUSED = {
    "ssd_state_past_float64": ("""\
tokens = ["t0"]
X = [[0]]
mask = "causal"
[[heads]]
name = "h0"
W_Q = [[0, 0]]
W_K = [[0, 0]]
W_V = [[0, 0]]
[[heads]]
name = "h1"
W_Q = [[0, 0]]
W_K = [[0, 0]]
W_V = [[0, 0]]
[ssd]
num_heads = 2
num_groups = 1
A = [-1, -1e-300]
W_dt = [[0, 0]]
B = [[1e+153]]
C = [[0]]
x = [[0, 0, 0, 1e+200]]
""", "h1: values in [ssd]'s state h overflow float64 at row 1 (\"t0\")"),
    "indexer_w_past_float64": ("""\
tokens = ["t0"]
X = [[0, -2.5]]
[[heads]]
name = "h0"
W_Q = [[0], [0]]
W_K = [[0], [0]]
W_V = [[0], [0]]
[indexer]
num_heads = 1
top_k = 1
W_q = [[0], [1]]
W_k = [[0], [1]]
W_w = [[0], [1.7e+308]]
""", 'h0: values in [indexer]\'s w overflow float64 at row 1 ("t0"); expected smaller X or W_w'),
    "kda_low_rank_gate_past_float64": ("""\
tokens = ["t0"]
X = [[1e+200]]
mask = "causal"
[[heads]]
name = "h0"
W_Q = [[0]]
W_K = [[0]]
W_V = [[0]]
[deltanet]
W_fa = [[1]]
W_fb = [[-1e+153]]
A_log = [0]
dt_bias = [[0]]
W_b = [[0]]
""", "values in [deltanet]'s (X̂·W_fa)·W_fb + dt_bias overflow float64 at row 1 (\"t0\");"
        " expected smaller X, W_fa, W_fb or dt_bias"),
    "kda_key_square_past_float64": ("""\
tokens = ["t0"]
X = [[-1.4e+154]]
mask = "causal"
[[heads]]
name = "h0"
W_Q = [[0]]
W_K = [[1]]
W_V = [[0]]
[deltanet]
W_fa = [[0]]
W_fb = [[0]]
A_log = [0]
dt_bias = [[0]]
W_b = [[0]]
""", 'h0: values in Σk² of [deltanet] overflow float64 at row 1 ("t0")'),
    "deltanet_key_square_past_float64": ("""\
tokens = ["t0"]
X = [[-1.4e+154]]
mask = "causal"
[[heads]]
name = "h0"
W_Q = [[0]]
W_K = [[1]]
W_V = [[0]]
[deltanet]
W_a = [[0]]
A_log = [0]
dt_bias = [0]
W_b = [[0]]
""", 'h0: values in Σk² of [deltanet] overflow float64 at row 1 ("t0")'),
    # e^ of it is 0, so the engine computed it, but the printed λ line wrote the product as −∞ and failed
    "differential_lambda_product_past_float64": ("""\
tokens = ["t0"]
X = [[0]]
[[heads]]
name = "h0"
W_Q = [[0, 0]]
W_K = [[0, 0]]
W_V = [[0, 0]]
[differential]
lambda_q1 = [[-2.5]]
lambda_k1 = [[1.7e+308]]
lambda_q2 = [[0]]
lambda_k2 = [[0]]
layer = 0
""", '[differential] lambda_q1·lambda_k1 for head 1 ("h0") is past float64'),
    # softplus of it is 0, but the line wrote the step as −∞
    "ssd_step_past_float64": ("""\
tokens = ["t0"]
X = [[0, -1e+300]]
mask = "causal"
[[heads]]
name = "h0"
W_Q = [[0, 0], [0, 0]]
W_K = [[0, 0], [0, 0]]
W_V = [[0, 0], [0, 0]]
[ssd]
num_heads = 1
num_groups = 1
A = [-1]
W_dt = [[0], [1e+153]]
B = [[0]]
C = [[0]]
""", "h0: values in [ssd]'s X·W_dt + dt_bias overflow float64 at row 1 (\"t0\")"),
}


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("name", sorted(COMPUTED))
def test_what_fuzzing_found_now_passes_every_path(name: str) -> None:
    for decimals in range(1, 9):
        assert assert_every_path(COMPUTED[name], decimals, WORKSHEET), decimals


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_fuzzing_found_past_float64_is_one_line_naming_it(name: str) -> None:
    text, said = REFUSED[name]
    line = assert_refused(text)
    assert said in line, line
    assert "Traceback" not in line
