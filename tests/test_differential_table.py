"""``[differential]``'s keys (core/variants/differential.py), parsed directly: the table is not registered with the
loader until the engine runs it, so each case loads the rest of its scenario with parse_scenario and hands the
table to the parser with the context the loader builds. Every broken rule is one line naming the key, where it
is and what was expected; the write-back reads back to the same table."""

from __future__ import annotations

import math
import tomllib
from typing import Any

import numpy as np
import pytest

from qkv_tui.core import variants
from qkv_tui.core.scenario import Scenario, ScenarioError, _Validator, parse_scenario
from qkv_tui.core.variants.differential import TABLE, Differential

BASE = 'tokens = ["a", "b", "c"]\nX = [[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]]\n'
# one head, d = 2: W_Q and W_K 4 wide, W_V 4 wide
HEAD = '''
[[heads]]
W_Q = [[1, 0, 1, 0], [0, 1, 0, 0], [1, 0, 0, 1], [0, 1, 1, 0]]
W_K = [[0, 0, 1, 1], [1, 1, 0, 0], [0, 1, 0, 1], [1, 0, 1, 0]]
W_V = [[1, 0, 0, 1], [0, 1, 0, 0], [0, 0, 1, 0], [1, 1, 0, 0]]
'''
SPLIT = '''
[attention]
num_heads = 2
num_kv_heads = 1
W_Q = [[1, 0, 1, 0, 1, 1, 0, 0], [0, 1, 0, 0, 0, 1, 1, 0], [1, 0, 0, 1, 0, 0, 1, 1], [0, 1, 1, 0, 1, 0, 0, 1]]
W_K = [[0, 0, 1, 1], [1, 1, 0, 0], [0, 1, 0, 1], [1, 0, 1, 0]]
W_V = [[1, 0, 0, 1], [0, 1, 0, 0], [0, 0, 1, 0], [1, 1, 0, 0]]
'''
LAMBDAS = '''lambda_q1 = [[0.1, 0.2]]
lambda_k1 = [[0.3, -0.1]]
lambda_q2 = [[-0.2, 0.1]]
lambda_k2 = [[0.05, 0.4]]
'''
LAMBDAS2 = LAMBDAS.replace("]]\n", "], [0.0, 0.5]]\n")


def _parse(scenario: str, table: str, lookalikes: bool = False) -> Differential:
    """What the loader will do with the table once it is registered: check its keys, then parse it."""
    sc = parse_scenario(scenario, "t.toml")
    raw: dict[str, Any] = tomllib.loads(table)["differential"]
    v = _Validator("t.toml")
    ctx = _context(v, sc)
    patch = pytest.MonkeyPatch()
    if lookalikes:  # the hints the loader gives once the table is in FEATURES (variants.LOOKALIKES gathers them)
        patch.setattr(variants, "LOOKALIKES", {**variants.LOOKALIKES, **TABLE.lookalikes})
    try:
        v.known(raw, TABLE.keys, TABLE.header)
    finally:
        patch.undo()
    return TABLE.parse(raw, ctx)


def _context(v: _Validator, sc: Scenario) -> variants.Context:
    heads = tuple((f"head {i + 1}", h.d_k) for i, h in enumerate(sc.heads))
    earlier = {t.key: t.of(sc) for t in variants.TABLES}
    return variants.Context(v, sc.tokens, sc.X.shape[1], sc.context_X is not None, heads, sc.mask_kind, sc.allow,
                            earlier, sc.num_heads_split, sc.num_kv_heads, sc.heads)


def _error(scenario: str, table: str, lookalikes: bool = False) -> str:
    with pytest.raises(ScenarioError) as err:
        _parse(scenario, table, lookalikes)
    message = err.value.message
    assert "\n" not in message and "Traceback" not in message
    return message


def test_a_table_reads_every_key() -> None:
    df = _parse(BASE + HEAD, "[differential]\n" + LAMBDAS + "lambda_init = 0.5\neps = 1e-6\ngamma = [1, 2, 3, 4]\n")
    assert df.d == 2 and df.lambda_init == 0.5 and df.layer is None and df.eps == 1e-6
    np.testing.assert_array_equal(df.lambda_k2, [[0.05, 0.4]])
    np.testing.assert_array_equal(df.gamma, [1, 2, 3, 4])
    head = df.head(0)
    np.testing.assert_array_equal(head.lambda_q2, [-0.2, 0.1])
    assert (head.lambda_init, head.eps) == (0.5, 1e-6)
    assert TABLE.summary(df) == "differential attention (λ_init 0.5, given)"


@pytest.mark.parametrize("layer", [0, 1, 5, 27])
def test_layer_gives_the_papers_lambda_init(layer: int) -> None:
    df = _parse(BASE + HEAD, f"[differential]\n{LAMBDAS}layer = {layer}\n")
    assert df.lambda_init == 0.8 - 0.6 * math.exp(-0.3 * layer)
    assert df.layer == layer and df.eps == 1e-5 and df.gamma is None
    assert f"layer {layer}" in TABLE.summary(df)


def test_attention_form_with_shared_kv_heads() -> None:
    """Two query heads reading one K/V head (contracts §7): the λ vectors have a row per query head."""
    df = _parse(BASE + SPLIT, "[differential]\n" + LAMBDAS2 + "lambda_init = 0.2\n")
    assert df.lambda_q1.shape == (2, 2)
    np.testing.assert_array_equal(df.head(1).lambda_k1, [0.0, 0.5])


@pytest.mark.parametrize("table", [
    LAMBDAS + "lambda_init = 0.35\neps = 0.001\ngamma = [0.5, 1, 1.5, -2]\n",
    LAMBDAS + "layer = 3\n",
])
def test_write_back_reads_back(table: str) -> None:
    df = _parse(BASE + HEAD, "[differential]\n" + table)
    written = "\n".join(TABLE.write(df)) + "\n"
    assert written.startswith("[differential]\n")
    again = _parse(BASE + HEAD, written)
    for key in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):
        np.testing.assert_array_equal(getattr(again, key), getattr(df, key))
    assert (again.lambda_init, again.layer, again.eps) == (df.lambda_init, df.layer, df.eps)
    assert (again.gamma is None) == (df.gamma is None)
    if df.gamma is not None:
        np.testing.assert_array_equal(again.gamma, df.gamma)


def test_write_back_keeps_layer_as_layer() -> None:
    df = _parse(BASE + HEAD, "[differential]\n" + LAMBDAS + "layer = 3\n")
    assert "layer = 3" in TABLE.write(df) and not any(line.startswith("lambda_init") for line in TABLE.write(df))


WITHOUT = "[differential]\n" + LAMBDAS
ERRORS = {
    "missing_lambda": (BASE + HEAD, "[differential]\nlambda_q1 = [[0, 0]]\nlambda_init = 0.2\n",
                       "[differential] is missing 'lambda_k1'; expected lambda_k1 = [[...]], num_heads × d = 1 × 2"),
    "lambda_rows": (BASE + HEAD, WITHOUT.replace("lambda_q2 = [[-0.2, 0.1]]", "lambda_q2 = [[-0.2, 0.1], [0, 0]]")
                    + "lambda_init = 0.2\n", "[differential] lambda_q2 has 2 rows; expected num_heads = 1, one per head"),
    "lambda_columns": (BASE + HEAD, WITHOUT.replace("lambda_k1 = [[0.3, -0.1]]", "lambda_k1 = [[0.3, -0.1, 1]]")
                       + "lambda_init = 0.2\n",
                       "[differential] lambda_k1 has 3 columns; expected d = 2 (half of a head's W_Q width)"),
    "lambda_flat": (BASE + HEAD, WITHOUT.replace("lambda_q1 = [[0.1, 0.2]]", "lambda_q1 = [0.1, 0.2]")
                    + "lambda_init = 0.2\n", "[differential] lambda_q1 row 1 must be a list of numbers, got a number (0.1)"),
    "lambda_scalar": (BASE + HEAD, WITHOUT.replace("lambda_q1 = [[0.1, 0.2]]", "lambda_q1 = 0.1") + "lambda_init = 0.2\n",
                      "[differential] lambda_q1 must be a list of 1 row (num_heads × d = 1 × 2), got a number (0.1)"),
    "lambda_nan": (BASE + HEAD, WITHOUT.replace("[[0.05, 0.4]]", "[[0.05, nan]]") + "lambda_init = 0.2\n",
                   "[differential] lambda_k2 row 1, column 2 is nan; expected a finite number"),
    "lambda_overflow": (BASE + HEAD, WITHOUT.replace("[[0.1, 0.2]]", "[[30, 0]]").replace("[[0.3, -0.1]]", "[[30, 0]]")
                        + "lambda_init = 0.2\n",
                        "[differential] lambda_q1·lambda_k1 for head 1 is 900, and e^ of it overflows float64;"
                        " expected a dot product of at most 709"),
    "both_init": (BASE + HEAD, WITHOUT + "lambda_init = 0.2\nlayer = 1\n",
                  "[differential] has both lambda_init and layer; expected lambda_init = <number> or layer = L"),
    "no_init": (BASE + HEAD, WITHOUT, "[differential] is missing 'lambda_init'; expected lambda_init = <number>, or layer = L"),
    "init_string": (BASE + HEAD, WITHOUT + 'lambda_init = "0.8"\n', "[differential] lambda_init must be a number, got a string"),
    "layer_float": (BASE + HEAD, WITHOUT + "layer = 2.0\n",
                    "[differential] layer must be a whole number >= 0 (the layer's depth, counted from 0), got a number (2.0);"
                    " write 2, without the decimal point"),
    "layer_negative": (BASE + HEAD, WITHOUT + "layer = -1\n", "[differential] layer = -1; expected a whole number >= 0"),
    "layer_bool": (BASE + HEAD, WITHOUT + "layer = true\n",
                   "[differential] layer must be a whole number >= 0 (the layer's depth, counted from 0), got a boolean (true)"),
    "eps_zero": (BASE + HEAD, WITHOUT + "layer = 1\neps = 0\n", "[differential] eps = 0; expected a finite number > 0"),
    "eps_negative": (BASE + HEAD, WITHOUT + "layer = 1\neps = -1e-5\n",
                     "[differential] eps = -1e-05; expected a finite number > 0"),
    "gamma_length": (BASE + HEAD, WITHOUT + "layer = 1\ngamma = [1, 1]\n",
                     "[differential] gamma has 2 numbers; expected 4 (the sub-norm's gains, 2d = 4)"),
    "typo": (BASE + HEAD, WITHOUT + "lamda_init = 0.2\n",
             "unknown key 'lamda_init' in [differential]; did you mean 'lambda_init'?"),
    "odd_w_q": (BASE + HEAD.replace("W_Q = [[1, 0, 1, 0], [0, 1, 0, 0], [1, 0, 0, 1], [0, 1, 1, 0]]",
                                    "W_Q = [[1, 0, 1], [0, 1, 0], [1, 0, 0], [0, 1, 1]]")
                .replace("W_K = [[0, 0, 1, 1], [1, 1, 0, 0], [0, 1, 0, 1], [1, 0, 1, 0]]",
                         "W_K = [[0, 0, 1], [1, 1, 0], [0, 1, 0], [1, 0, 1]]"), WITHOUT + "layer = 0\n",
                "[differential] needs head 1's W_Q to have an even number of columns, 2d ([Q₁ | Q₂], one half per map),"
                " but it has 3"),
    "w_v_width": (BASE + HEAD.replace("W_V = [[1, 0, 0, 1], [0, 1, 0, 0], [0, 0, 1, 0], [1, 1, 0, 0]]",
                                      "W_V = [[1, 0], [0, 1], [0, 0], [1, 1]]"), WITHOUT + "layer = 0\n",
                  "[differential] needs head 1's W_V to have 2d = 4 columns (as wide as its W_Q: both maps mix the same"
                  " 2d-wide values), but it has 2"),
    "widths_differ": (BASE + HEAD + HEAD.replace("W_Q = [[1, 0, 1, 0], [0, 1, 0, 0], [1, 0, 0, 1], [0, 1, 1, 0]]",
                                                 "W_Q = [[1, 0], [0, 1], [1, 0], [0, 1]]")
                      .replace("W_K = [[0, 0, 1, 1], [1, 1, 0, 0], [0, 1, 0, 1], [1, 0, 1, 0]]",
                               "W_K = [[0, 0], [1, 1], [0, 1], [1, 0]]")
                      .replace("W_V = [[1, 0, 0, 1], [0, 1, 0, 0], [0, 0, 1, 0], [1, 1, 0, 0]]",
                               "W_V = [[1, 0], [0, 1], [0, 0], [1, 1]]"),
                      "[differential]\n" + LAMBDAS2 + "layer = 0\n",
                      "[differential] needs every head to have the same half width d (the λ vectors are num_heads × d),"
                      " but head 2 has d = 1, head 1 has d = 2; expected one W_Q width for every head"),
    "sink": (BASE + HEAD + "sink = 0.5\n", WITHOUT + "layer = 0\n",
             "head 1 has a sink, but [differential] has two softmax maps and a sink joins one softmax;"
             " expected no sink with [differential]"),
    "gate": (BASE + HEAD + "W_G = [[1, 0, 0, 1], [0, 1, 0, 0], [0, 0, 1, 0], [1, 1, 0, 0]]\n", WITHOUT + "layer = 0\n",
             "head 1 has an output gate W_G, but [differential] does not say whether it gates before or after the"
             " sub-norm; expected no W_G with [differential]"),
    "qk_norm": (BASE + '[qk_norm]\nover = "head"\n' + HEAD, WITHOUT + "layer = 0\n",
                "[differential] cannot be used with [qk_norm]: [qk_norm] normalises a head's whole d_k"),
    "linear": (BASE + '[linear]\nfeature = "elu1"\n' + HEAD.replace("[[heads]]", '[mask]\nkind = "causal"\n\n[[heads]]'),
               WITHOUT + "layer = 0\n", "[differential] cannot be used with [linear]: [linear] replaces the softmax"),
    "rope_odd_d": (BASE + '[rope]\nlayout = "half"\n'
                   + "[[heads]]\nW_Q = [[1, 0, 1, 0, 1, 1], [0, 1, 0, 0, 0, 1], [1, 0, 0, 1, 0, 0], [0, 1, 1, 0, 1, 0]]\n"
                   + "W_K = [[0, 0, 1, 1, 0, 1], [1, 1, 0, 0, 1, 0], [0, 1, 0, 1, 1, 1], [1, 0, 1, 0, 0, 0]]\n"
                   + "W_V = [[1, 0, 0, 1, 0, 0], [0, 1, 0, 0, 1, 0], [0, 0, 1, 0, 0, 1], [1, 1, 0, 0, 0, 0]]\n",
                   "[differential]\n" + "\n".join(f"{k} = [[0.1, 0.2, 0.3]]" for k in ("lambda_q1", "lambda_k1", "lambda_q2",
                                                                                       "lambda_k2")) + "\nlayer = 0\n",
                   "[differential] with [rope] turns each half of a head on its own, so it needs an even d, but d = 3"
                   " (W_Q is 6 wide); expected W_Q widths that are multiples of 4"),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_each_broken_rule_is_one_line(name: str) -> None:
    scenario, table, expected = ERRORS[name]
    assert expected in _error(scenario, table)


@pytest.mark.parametrize(("key", "meant"), [("layer_idx", "layer"), ("rms_norm_eps", "eps"), ("weight", "gamma")])
def test_keys_copied_from_transformers_are_renamed(key: str, meant: str) -> None:
    message = _error(BASE + HEAD, WITHOUT + f"{key} = 1\n", lookalikes=True)
    assert message.startswith(f"unknown key '{key}' in [differential]; did you mean '{meant}'?")


def test_rope_with_an_even_d_is_accepted() -> None:
    df = _parse(BASE + '[rope]\nlayout = "interleaved"\n' + HEAD, WITHOUT + "layer = 0\n")
    assert df.d == 2


def test_registered_now_that_the_driver_runs_it() -> None:
    """The forward driver runs it (core/differential_part.py), so the loader accepts the table and fills the field."""
    assert TABLE in variants.FEATURES
    sc = parse_scenario(BASE + HEAD + "\n[differential]\n" + LAMBDAS + "layer = 0\n", "t.toml")
    assert isinstance(TABLE.of(sc), Differential) and TABLE.of(sc).layer == 0


def test_rope_partial_turning_an_odd_share_of_d_is_refused() -> None:
    """[rope] partial = 0.5 of a 12-wide W_Q turns 6 of its 12 columns, but each half (d = 6) turns 3: no pairs."""
    row = "[" + ", ".join(["1, 0, 0, 1, 0, 1"] * 2) + "]"
    head = "[[heads]]\n" + "".join(f"{m} = [{', '.join([row] * 4)}]\n" for m in ("W_Q", "W_K", "W_V"))
    lambdas = "".join(f"{k} = [[0.1, 0, 0, 0, 0, 0]]\n" for k in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"))
    message = _error(BASE + '[rope]\nlayout = "half"\npartial = 0.5\n' + head, "[differential]\n" + lambdas + "layer = 0\n")
    assert message == ("[differential] with [rope] turns each half of a head on its own, and [rope] partial turns 3 of"
                       " its d = 6 dimensions; expected an even count (dimensions turn in pairs)")
