"""Every rule of [backward] (docs/scenario-format.md) fails with one clean line: the key, where, what was expected."""

from __future__ import annotations

from pathlib import Path

import pytest

from qkv_tui.core.scenario import parse_scenario
from qkv_tui.core.variants.backward import write_backward

from .conftest import BASE, HEAD
from .error_table import assert_one_error_line

T = "target = [[0, 0, 0], [1, 1, 1], [0, 1, 0]]\n"
D = "dO = [[0, 0, 0], [1, 1, 1], [0, 1, 0]]\n"
GOOD = BASE + HEAD + "[backward]\n" + T

CASES = {
    "neither": (BASE + HEAD + "[backward]\nlr = 0.1\n", "[backward] needs target = [[...]]"),
    "both": (BASE + HEAD + "[backward]\n" + T + D, "[backward] has both target and dO; expected exactly one"),
    "target_rows": (BASE + HEAD + "[backward]\ntarget = [[0, 0, 0], [1, 1, 1]]\n",
                    "[backward] target is 2 × 3; expected the final output's (the heads' d_v side by side, no W_O) shape,"
                    " n × d_out = 3 × 3"),
    "dO_columns": (BASE + HEAD + "[output]\nW_O = [[1], [1], [1]]\n[backward]\n" + D,
                   "[backward] dO is 3 × 3; expected the final output's shape, n × d_out = 3 × 1"),
    "target_ragged": (BASE + HEAD + "[backward]\ntarget = [[0, 0, 0], [1, 1], [0, 1, 0]]\n", "[backward] target is ragged"),
    "target_nan": (BASE + HEAD + "[backward]\ntarget = [[0, 0, 0], [1, nan, 1], [0, 1, 0]]\n",
                   "is nan; expected a finite number"),
    "unknown_key": (BASE + HEAD + "[backward]\n" + T + "stpes = 3\n", "unknown key 'stpes' in [backward]; did you mean 'steps'?"),
    "lr_zero": (BASE + HEAD + "[backward]\n" + T + "lr = 0\n", "[backward] lr = 0; expected a finite number > 0"),
    "lr_string": (BASE + HEAD + "[backward]\n" + T + 'lr = "fast"\n', "[backward] lr must be a number, got a string"),
    "steps_float": (BASE + HEAD + "[backward]\n" + T + "steps = 2.5\n",
                    "[backward] steps must be a whole number from 0 to 1000, got a number (2.5)"),
    "steps_negative": (BASE + HEAD + "[backward]\n" + T + "steps = -1\n", "[backward] steps = -1; expected a whole number"),
    "steps_limit": (BASE + HEAD + "[backward]\n" + T + "steps = 1001\n",
                    "[backward] steps = 1001 is above the limit; expected at most 1,000 training steps"),
    "steps_with_dO": (BASE + HEAD + "[backward]\n" + D + "steps = 3\n", "[backward] steps = 3 with dO; training needs a loss"),
    "train_unknown": (BASE + HEAD + "[backward]\n" + T + 'train = ["W_q"]\n',
                      "[backward] train names 'W_q', which is not a weight; expected names from: W_Q, W_K, W_V"),
    "train_typo": (BASE + HEAD + "[backward]\n" + T + 'train = ["gama"]\n', "did you mean 'gamma'?"),
    "train_absent": (BASE + HEAD + "[backward]\n" + T + 'train = ["W_O"]\n',
                     "[backward] train names 'W_O', but this scenario has no W_O; expected names of the weights it gives:"
                     " W_Q, W_K, W_V"),
    "train_X": (BASE + HEAD + "[backward]\n" + T + 'train = ["X"]\n', "[backward] train names 'X', which is not a weight"),
    "train_not_list": (BASE + HEAD + "[backward]\n" + T + 'train = "W_Q"\n', "[backward] train must be a list of weight names"),
    "not_table": (BASE + 'backward = 1\n' + HEAD, "backward must be a table ([backward]), got"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_check_reports_one_clean_line(case: str, cli, write) -> None:
    assert_one_error_line(cli, write, *CASES[case])


def test_default_train_is_every_weight_given() -> None:
    text = BASE + '[norm]\nkind = "layer"\nbeta = [0, 0, 0, 0]\n' + HEAD + "b_K = [0, 0, 0]\nsink = 0.5\n"
    text += "[output]\nW_O = [[1], [1], [1]]\nb_O = [0]\n[backward]\ntarget = [[0], [1], [0]]\n"
    bw = parse_scenario(text, "x.toml").backward
    assert bw is not None
    assert bw.train == ("W_Q", "W_K", "W_V", "W_O", "b_K", "b_O", "gamma", "beta", "sinks")
    assert (bw.lr, bw.steps, bw.dO) == (0.1, 0, None)


def test_check_names_it(cli, write) -> None:
    run = cli("--check", str(write(GOOD + "steps = 4\n")))
    assert run.code == 0 and run.out.rstrip().endswith("backward, 4 steps"), run.out


@pytest.mark.parametrize("extra", ["", "lr = 0.25\nsteps = 7\ntrain = [\"W_K\", \"W_Q\"]\n"])
def test_write_back_reads_back(extra: str) -> None:
    sc = parse_scenario(GOOD + extra, "x.toml")
    assert sc.backward is not None
    lines = write_backward(sc.backward)
    again = parse_scenario(BASE + HEAD + "\n".join(lines) + "\n", "y.toml").backward
    assert again is not None and again.target is not None and sc.backward.target is not None
    assert (again.target == sc.backward.target).all()
    assert (again.lr, again.steps, again.train, again.train_given) == (
        sc.backward.lr, sc.backward.steps, sc.backward.train, sc.backward.train_given)


def test_editing_the_target_changes_the_gradients_and_saves() -> None:
    from qkv_tui import load_scenario
    from qkv_tui.core.cell_edit import edit, parse_address, save_text
    from qkv_tui.core.gradients import gradients

    sc = load_scenario("learn_to_look")
    cell, value = parse_address(sc, "target[I,1] = 1.637")
    assert cell is not None and cell.label(sc) == "target[I,1]"
    new, comp = edit(sc, cell, value)
    assert gradients(comp).dO[0, 1] == pytest.approx(comp.output[0, 1] - 1.637)
    text = (pytest.importorskip("pathlib").Path(__file__).parent.parent / "scenarios" / "learn_to_look.toml").read_text()
    saved = parse_scenario(save_text(text, new, [cell]), "saved.toml")
    assert saved.backward is not None and saved.backward.target is not None
    assert saved.backward.target[0, 1] == 1.637


def test_json_fields_in_the_spec_order() -> None:
    import json

    from qkv_tui import compute, load_scenario
    from qkv_tui.edges.export_json import to_json

    plain = json.loads(to_json(compute(load_scenario("i_love_ai"))))
    # the variants of sections 7–12, then differential attention (14), the indexer, SSD and shared K/V (15)
    assert list(plain)[-10:] == ["rope", "grad", "train", "mla", "linear", "deltanet",
                                 "differential", "indexer", "ssd", "kv_source_layer"]
    assert plain["grad"] is None and plain["train"] is None
    data = json.loads(to_json(compute(load_scenario("learn_to_look"))))
    grad = data["grad"]
    assert list(grad) == ["loss", "dO", "d_concat", "dW_O", "dX", "dX_norm", "dgamma", "heads", "kv_heads", "db_O",
                          "dbeta", "mla", "linear", "deltanet", "dgamma_q", "dgamma_k"]
    assert grad["mla"] is None and grad["linear"] is None and grad["deltanet"] is None
    assert list(grad["heads"][0]) == ["dO", "dV", "dP", "dS", "dscaled", "dQ", "dK", "dQ_rot", "dK_rot", "dW_Q", "dW_K",
                                      "dW_V", "db_Q", "db_K", "db_V", "dsink", "dW_G", "dgamma_q", "dgamma_k"]
    assert grad["d_concat"] == grad["dO"] and grad["dW_O"] is None and grad["kv_heads"] is None
    assert [s["step"] for s in data["train"]] == list(range(7)) and data["train"][0]["loss"] == grad["loss"]
    assert len(data["train"][0]["weights"]) == 1 and len(data["train"][0]["weights"][0]) == 3


@pytest.mark.parametrize("table", ["mla", "linear", "deltanet"])
def test_every_attention_it_has_goes_backwards(table: str) -> None:
    text = (Path(__file__).parent.parent / "scenarios" / f"{table}.toml").read_text(encoding="utf-8")
    plain = parse_scenario(text, "a.toml")
    d_out = plain.W_O.shape[1] if plain.W_O is not None else sum(h.W_V.shape[1] for h in plain.heads)
    dO = "[" + ", ".join("[" + ", ".join(["1"] * d_out) + "]" for _ in plain.tokens) + "]"
    sc = parse_scenario(text + f"\n[backward]\ndO = {dO}\n", "b.toml")
    assert sc.backward is not None and sc.backward.steps == 0
