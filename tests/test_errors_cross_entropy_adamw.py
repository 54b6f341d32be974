"""[backward] loss = "cross_entropy" and optimizer = "adamw" refuse bad input in one clean line: the key, where,
what was expected (exit 2, no traceback); and what they accept reads back from the file the TOML export writes."""

from __future__ import annotations

import pytest

from qkv_tui.core.scenario import parse_scenario
from qkv_tui.core.variants.backward import write_backward

from .conftest import BASE, HEAD
from .error_table import assert_one_error_line

CE = '[backward]\nloss = "cross_entropy"\n'
W_U = "W_U = [[1, 0, -1, 0.5], [0, 1, 0, 0], [1, 1, 0, -1]]\n"  # d_out 3 (the head's d_v), a vocabulary of 4
NEXT = "next = [1, 2, 3]\n"
GOOD = BASE + HEAD + CE + W_U + NEXT
T = "target = [[0, 0, 0], [1, 1, 1], [0, 1, 0]]\n"

CASES = {
    "loss_unknown": (BASE + HEAD + '[backward]\nloss = "mse"\n' + T,
                     "[backward] loss = 'mse'; expected \"squared\" or \"cross_entropy\""),
    "no_W_U": (BASE + HEAD + CE + NEXT, '[backward] loss = "cross_entropy" needs W_U (the unembedding, d_out × vocab'),
    "no_next": (BASE + HEAD + CE + W_U, '[backward] loss = "cross_entropy" needs next (each token\'s target id'),
    "W_U_rows": (BASE + HEAD + CE + "W_U = [[1, 0], [0, 1]]\n" + NEXT,
                 "[backward] W_U is 2 × 2; expected d_out × vocab with d_out = 3, the final output's width"),
    "W_U_one_word": (BASE + HEAD + CE + "W_U = [[1], [0], [1]]\nnext = [0, 0, 0]\n",
                     "[backward] W_U is 3 × 1; expected a vocabulary of at least 2 columns"),
    "W_U_nan": (BASE + HEAD + CE + "W_U = [[1, nan], [0, 1], [1, 1]]\n" + NEXT, "is nan; expected a finite number"),
    "next_outside": (BASE + HEAD + CE + W_U + "next = [1, 4, 0]\n",
                     "[backward] next item 2 (love) = 4 is outside the vocabulary; expected an id from 0 to 3"
                     " (W_U has 4 columns)"),
    "next_negative": (BASE + HEAD + CE + W_U + "next = [-1, 0, 0]\n", "[backward] next item 1 (I) = -1 is outside"),
    "next_length": (BASE + HEAD + CE + W_U + "next = [1, 2]\n",
                    "[backward] next must be a list of 3 token ids, one per token, got 2 items"),
    "next_float": (BASE + HEAD + CE + W_U + "next = [1, 2.0, 3]\n",
                   "[backward] next item 2 (love) must be a whole number from 0 to 3, got a number (2.0); write 2"),
    "next_word": (BASE + HEAD + CE + W_U + 'next = ["love", 2, 3]\n', "[backward] next item 1 (I) must be a whole number"),
    "target_too": (GOOD + T, '[backward] target is given with loss = "cross_entropy"; expected W_U and next instead'),
    "W_U_without": (BASE + HEAD + "[backward]\n" + T + W_U,
                    '[backward] W_U is given without loss = "cross_entropy"; expected loss = "cross_entropy"'),
    "optimizer_unknown": (GOOD + 'optimizer = "adam"\n', "[backward] optimizer = 'adam'; expected \"sgd\" or \"adamw\""),
    "betas_without": (GOOD + "betas = [0.9, 0.99]\n",
                      '[backward] betas is given without optimizer = "adamw"; expected optimizer = "adamw" (SGD has no'
                      " betas), or no betas"),
    "betas_one": (GOOD + 'optimizer = "adamw"\nbetas = [0.9]\n', "[backward] betas must be a list of 2 numbers [β₁, β₂]"),
    "beta_one": (GOOD + 'optimizer = "adamw"\nbetas = [0.9, 1.0]\n',
                 "[backward] betas item 2 = 1.0; expected a number from 0 up to (not including) 1"),
    "beta_string": (GOOD + 'optimizer = "adamw"\nbetas = ["a", 0.9]\n', "[backward] betas item 1 must be a number"),
    "eps_zero": (GOOD + 'optimizer = "adamw"\neps = 0\n', "[backward] eps = 0; expected a finite number > 0"),
    "decay_negative": (GOOD + 'optimizer = "adamw"\nweight_decay = -0.1\n',
                       "[backward] weight_decay = -0.1; expected a finite number ≥ 0"),
    "train_W_U_without": (BASE + HEAD + "[backward]\n" + T + 'train = ["W_U"]\n',
                          "[backward] train names 'W_U', but this scenario has no W_U"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_check_reports_one_clean_line(case: str, cli, write) -> None:
    assert_one_error_line(cli, write, *CASES[case])


def test_a_cross_entropy_worksheet_prints_its_loss_and_ends_with_the_adamw_step(cli) -> None:
    # the Loss's own tables (edges/worksheet/backward/cross_entropy.py), then AdamW's step (tests/test_cross_entropy_worksheet.py)
    run = cli("--export", "worksheet", "next_token_adamw")
    assert run.code == 0, run.err
    assert "## Backward" in run.out and "dlogits = (p − onehot) / n" in run.out and "## AdamW step" in run.out
    assert "do not cover" not in run.out


def test_defaults_are_torch_s() -> None:
    bw = parse_scenario(GOOD + 'optimizer = "adamw"\n', "x.toml").backward
    assert bw is not None and bw.adamw and bw.cross_entropy
    assert (bw.betas, bw.eps, bw.weight_decay) == ((0.9, 0.999), 1e-8, 0.01)  # torch.optim.AdamW's
    assert bw.train == ("W_Q", "W_K", "W_V", "W_U") and bw.next == (1, 2, 3)


@pytest.mark.parametrize("extra", ["", 'optimizer = "adamw"\nbetas = [0.5, 0.75]\neps = 0.001\nweight_decay = 0.2\n'
                                   'steps = 3\ntrain = ["W_U", "W_Q"]\n'])
def test_write_back_reads_back(extra: str) -> None:
    sc = parse_scenario(GOOD + extra, "x.toml")
    assert sc.backward is not None
    again = parse_scenario(BASE + HEAD + "\n".join(write_backward(sc.backward)) + "\n", "y.toml").backward
    assert again is not None and again.W_U is not None and sc.backward.W_U is not None
    assert (again.W_U == sc.backward.W_U).all()
    for key in ("loss", "next", "optimizer", "betas", "eps", "weight_decay", "steps", "train", "train_given"):
        assert getattr(again, key) == getattr(sc.backward, key), key


def test_check_names_it(cli, write) -> None:
    run = cli("--check", str(write(GOOD + 'steps = 2\noptimizer = "adamw"\n')))
    assert run.code == 0 and run.out.rstrip().endswith("backward, cross-entropy, 2 steps of AdamW"), run.out
