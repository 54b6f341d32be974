"""Every scenario ``--check`` accepts makes a worksheet: the page works from rounded numbers, and where that
arithmetic cannot go on (a root the page prints as 0 that the backward pass divides by, a product past float64),
the page says which tables it leaves out in a line of its own rather than exiting 2. Generated scenarios
(tests/variants_cases.py's combined variants, tests/strategies_backward.py's [mla], [linear] and [deltanet], with
float64's extreme values, a tiny QK-norm eps or soft-cap, and a [backward] table) in markdown, html and Typst; a
few as a PDF."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import load_scenario
from qkv_tui.edges.arithmetic import arithmetic_policy
from qkv_tui.edges.cli import main
from qkv_tui.edges.worksheet.make import build
from qkv_tui.edges.worksheet.render.typst import source
from qkv_tui.edges.worksheet.sheet import sheet

from .strategies_backward import backward_scenarios
from .strategies_latent_state import EXTREME
from .variants_cases import modern_cases, toml_value

TINY = st.sampled_from([1e-300, 5e-324, 1e-160, 1e-30, 1e-6, 0.5])


@st.composite
def accepted_or_not(draw: st.DrawFn) -> str:
    """A scenario that --check may accept or refuse: the combined variants with extreme inputs, a norm or QK-norm
    with a tiny eps, a tiny soft-cap and a [backward] target; or a state or latent layer with its [backward] table."""
    kind = draw(st.sampled_from(["modern", "modern", "modern", "mla", "linear", "deltanet"]))
    if kind != "modern":
        return draw(backward_scenarios(kind, extreme=draw(st.booleans())))
    case = draw(modern_cases())
    text = case.toml
    if draw(st.booleans()):  # a row of zeros, or float64's edges, in X
        X = [[draw(EXTREME) for _ in row] for row in case.X]
        text = text.replace(f"X = {toml_value(case.X)}", f"X = {toml_value(X)}", 1)
    top = []
    if draw(st.booleans()):
        top.append(f"softcap = {draw(TINY)!r}")
    if top:
        start = text.index("\n[") if "\n[" in text else len(text)
        text = text[:start] + "\n" + "\n".join(top) + text[start:]
    if "[norm]\n" in text and "eps = " not in text and draw(st.booleans()):
        text = text.replace("[norm]\n", f"[norm]\neps = {draw(TINY)!r}\n", 1)
    if draw(st.booleans()):
        text += f'\n[qk_norm]\nover = "head"\neps = {draw(TINY)!r}\n'
    d_out = len(case.W_O[0]) if case.W_O else sum(len(h["W_V"][0]) for h in case.heads)
    pick = EXTREME if draw(st.booleans()) else st.sampled_from([0.0, 1.0, -0.5, 2.0])
    target = [[draw(pick) for _ in range(d_out)] for _ in range(case.n)]
    text += f"\n[backward]\ntarget = {toml_value(target)}\n"
    return text


def export(path: Path, fmt: str, out: Path) -> int:
    return main(["--export", "worksheet", "--format", fmt, "--blanks", "100%", "-o", str(out), str(path)])


def typst_source(path: Path) -> str:
    with arithmetic_policy(str(path)):
        return source(sheet(build(compute(load_scenario(path)), "100%")))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(text=accepted_or_not())
def test_every_accepted_scenario_makes_a_worksheet(text: str, tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "case.toml"
    path.write_text(text, encoding="utf-8")
    if main(["--check", str(path)]) != 0:
        capsys.readouterr()
        return
    for fmt in ("markdown", "html"):
        assert export(path, fmt, tmp_path / f"sheet.{fmt}") == 0, (fmt, capsys.readouterr().err, text)
    assert typst_source(path).startswith("#set document")
    capsys.readouterr()


def scenario(eps: str, row: str = "[0, 0, 0, 0]", extra: str = "") -> str:
    return f'''title = "tiny eps"
tokens = ["I", "love", "AI"]
X = [[1, 0, 1, 0], {row}, [1, 1, 0, 0]]
{extra}
[attention]
num_heads = 1
W_Q = [[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0]]
W_K = [[0, 1, 0], [1, 0, 0], [0, 0, 1], [1, 0, 1]]
W_V = [[1, 0, 0], [0, 1, 0], [0, 0, 1], [0, 0, 0]]

[qk_norm]
over = "head"
eps = {eps}

[backward]
target = [[1, 0, 1], [1, 1, 0], [0, 1, 1]]
'''


def test_a_root_printed_as_zero_leaves_the_backward_tables_out_in_a_line(tmp_path: Path, capsys: Any) -> None:
    """love's Q and K are 0 and eps 1e-300: r = 1e-150 prints as 0 at the page's 15 decimals at most, and the
    backward pass would divide 0 by it."""
    path = tmp_path / "eps.toml"
    path.write_text(scenario("1e-300"), encoding="utf-8")
    assert main(["--check", str(path)]) == 0
    assert export(path, "markdown", tmp_path / "sheet.md") == 0, capsys.readouterr().err
    page = (tmp_path / "sheet.md").read_text(encoding="utf-8")
    assert "## Backward" not in page and "Answer key" in page
    rule = next(line for line in page.splitlines() if line.startswith("- [backward]"))
    assert "r_Q" in rule and "love" in rule and "1e-300" in rule, rule


@pytest.mark.parametrize(("eps", "row"), [("1e-300", "[0, 0, 0, 0]"), ("5e-324", "[0, 0, 0, 0]"),
                                          ("1e-30", "[0, 1e-160, 0, 0]")])
def test_a_tiny_eps_typesets(tmp_path: Path, capsys: Any, eps: str, row: str) -> None:
    path = tmp_path / "eps.toml"
    path.write_text(scenario(eps, row), encoding="utf-8")
    if main(["--check", str(path)]) != 0:
        pytest.skip(capsys.readouterr().err)
    assert export(path, "pdf", tmp_path / "sheet.pdf") == 0, capsys.readouterr().err
    assert (tmp_path / "sheet.pdf").read_bytes().startswith(b"%PDF")
