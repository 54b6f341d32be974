"""A YaRN attention factor past float64's comfort is named when the rotation or the scores overflow.

With attention_factor = 1e308 the Q_rot message said "expected smaller Q" and with 1e200 the scores' said
"expected smaller Q and K", where Q and K are the seed's small numbers: a multiplies cos and sin (so the
scores carry a²), and shrinking it alone makes the file compute."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from qkv_tui.core.engine import ComputeError, compute
from qkv_tui.core.scenario import builtin_dir, parse_scenario

from .conftest import Run

BUILTIN = (builtin_dir() / "rope_scaling.toml").read_text(encoding="utf-8")
ORIGINAL = "original_max_position_embeddings = 256\n"


def with_factor(a: str) -> str:
    assert ORIGINAL in BUILTIN
    return BUILTIN.replace(ORIGINAL, f"{ORIGINAL}attention_factor = {a}\n", 1)


@pytest.mark.parametrize(("a", "matrix"), [("1e308", "Q_rot"), ("1e200", "scores")])
def test_the_attention_factor_is_named(a: str, matrix: str) -> None:
    with pytest.raises(ComputeError) as caught:
        compute(parse_scenario(with_factor(a), "f.toml"))
    assert f"values in {matrix} overflow float64" in caught.value.fact
    assert caught.value.hint.startswith(f"expected a smaller [rope.scaling] attention_factor (a = {float(a):g}")
    compute(parse_scenario(with_factor("1.5"), "f.toml"))  # the same Q and K with a small a: it was a


def test_the_cli_says_it_in_one_line(cli: Callable[..., Run], write: Callable[[str], Path]) -> None:
    run = cli("--check", str(write(with_factor("1e200"))))
    assert run.code == 2 and run.err.count("\n") == 1
    assert "attention_factor (a = 1e+200 multiplies cos and sin, so the scores carry a²)" in run.err
