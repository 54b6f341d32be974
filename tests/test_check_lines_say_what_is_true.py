"""--check and overflow lines that said something false: [deltanet]'s summary when one of g and β is given and the
other computed, and an [mla] overflow that named W_Q (and b_Q) where the query comes from W_DQ and W_UQ, and
W_K or W_V, which latent heads do not have. Each names what the file has."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import Run
from .error_table import assert_one_error_line

DELTANET = ('tokens = ["t0"]\nX = [[0, 0]]\nmask = "causal"\n[attention]\nnum_heads = 1\nW_Q = [[0, 0], [0, 0]]\n'
            'W_K = [[0, 0], [0, 0]]\nW_V = [[0], [0]]\n[deltanet]\n')
G_GIVEN, G_FROM = "g = [[0]]\n", "W_a = [[0], [0]]\nA_log = [0]\ndt_bias = [0]\n"
BETA_GIVEN, BETA_FROM = "beta = [[0.5]]\n", "W_b = [[0], [0]]\n"


@pytest.mark.parametrize(("g", "beta", "said"), [
    (G_GIVEN, BETA_GIVEN, "(g, β given)"),
    (G_FROM, BETA_FROM, "(g, β from the weights)"),
    (G_GIVEN, BETA_FROM, "(g given, β from W_b)"),
    (G_FROM, BETA_GIVEN, "(g from W_a, A_log and dt_bias, β given)"),
])
def test_check_says_which_of_g_and_beta_are_given(cli: Callable[..., Run], write: Callable[[str], Path], g: str,
                                                  beta: str, said: str) -> None:
    run = cli("--check", str(write(DELTANET + g + beta)))
    assert run.code == 0 and run.out.rstrip().endswith(f"gated delta rule {said}"), run.out


def _mla(X: str = "[[1, 0], [0, 1]]", W_DKV: str = "[[1], [1]]", W_KR: str = "[[1, 0], [0, 1]]",
         query: str = "W_DQ = [[1], [1]]\nW_UQ = [[1, 1, 1]]\n", W_UK: str = "[[1]]", W_UV: str = "[[1]]") -> str:
    return (f'tokens = ["a", "b"]\nX = {X}\n[mla]\nnum_heads = 1\nd_nope = 1\nd_rope = 2\nd_v = 1\nW_DKV = {W_DKV}\n'
            f"W_UK = {W_UK}\nW_UV = {W_UV}\nW_KR = {W_KR}\n{query}")


CASES = {
    # the query's latent is finite; its up-projection is not: Q names W_UQ and c_Q, never a W_Q the file lacks
    "Q_from_W_UQ": (_mla(X="[[1e200, 0], [0, 1]]", W_DKV="[[1e-300], [1]]", W_KR="[[0, 0], [0, 1]]",
                         query="W_DQ = [[1], [1]]\nW_UQ = [[1e200, 1, 1]]\n"),
                    'head 1: values in Q overflow float64 at row 1 ("a"); expected smaller W_UQ or c_Q = X̂·W_DQ'
                    " (smaller X or W_DQ)"),
    "Q_from_W_Q": (_mla(X="[[1e200, 0], [0, 1]]", W_DKV="[[1e-300], [1]]", W_KR="[[0, 0], [0, 1]]",
                        query="W_Q = [[1e200, 1, 1], [1, 1, 1]]\n"),
                   'head 1: values in Q overflow float64 at row 1 ("a"); expected smaller X or W_Q'),
    "c_Q": (_mla(X="[[1e200, 0], [0, 1]]", W_DKV="[[1e-300], [1]]", W_KR="[[0, 0], [0, 1]]",
                 query="W_DQ = [[1e200], [1]]\nW_UQ = [[1e-300, 1e-300, 1e-300]]\n"),
            "values in [mla]'s c_Q = X̂·W_DQ overflow float64 at row 1 (\"a\"); expected smaller X or W_DQ"),
    "c_KV": (_mla(X="[[1e200, 0], [0, 1]]", W_DKV="[[1e200], [1]]", W_KR="[[0, 0], [0, 1]]", W_UK="[[1e-300]]",
                  W_UV="[[1e-300]]", query="W_DQ = [[1e-300], [1]]\nW_UQ = [[1, 1, 1]]\n"),
             "values in [mla]'s c_KV = X̂·W_DKV overflow float64 at row 1 (\"a\"); expected smaller X or W_DKV"),
    "K": (_mla(X="[[1e200, 0], [0, 1]]", W_DKV="[[1], [1]]", W_KR="[[0, 0], [0, 1]]", W_UK="[[1e200]]",
               W_UV="[[1e-300]]", query="W_DQ = [[1e-300], [1]]\nW_UQ = [[1, 1, 1]]\n"),
          'head 1: values in K overflow float64 at row 1 ("a"); expected smaller W_UK or c_KV = X̂·W_DKV'),
    "V": (_mla(X="[[1e200, 0], [0, 1]]", W_DKV="[[1], [1]]", W_KR="[[0, 0], [0, 1]]", W_UK="[[1e-300]]",
               W_UV="[[1e200]]", query="W_DQ = [[1e-300], [1]]\nW_UQ = [[1, 1, 1]]\n"),
          'head 1: values in V overflow float64 at row 1 ("a"); expected smaller W_UV or c_KV = X̂·W_DKV'),
    # the heads' shapes multiply the latent through at load: that product is named, not NumPy's warning
    "W_DQ_times_W_UQ": (_mla(query="W_DQ = [[1e200], [1]]\nW_UQ = [[1e200, 1, 1]]\n"),
                        "[mla]'s W_DQ·W_UQ for head 1 overflows float64; expected smaller W_DQ or W_UQ"),
    "W_DKV_times_W_UV": (_mla(W_DKV="[[1e200], [1]]", W_UV="[[1e200]]"),
                         "[mla]'s W_DKV·W_UV for head 1 overflows float64; expected smaller W_DKV or W_UV"),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("mode", [("--check",), ("--export", "json"), ("--export", "markdown")])
def test_an_mla_overflow_names_the_matrix_that_overflowed(cli: Callable[..., Run], write: Callable[[str], Path],
                                                          case: str, mode: tuple[str, ...]) -> None:
    text, expected = CASES[case]
    line = assert_one_error_line(cli, write, text, expected, *mode)
    assert "b_Q" not in line and ("W_Q" not in line or "W_Q =" in text)
