"""Every command accepts what ``--check`` accepts (docs/scenario-format.md; docs/reference.md, the command line).

Extreme but valid scenarios: numbers near float64's limits and near 0, tiny and huge scales, huge
ALiBi slopes, norms, rotations, biases and sinks. Either the engine's one overflow rule refuses a
scenario, for every command alike, with one error line; or every export succeeds (the JSON parses
strictly), and every operation of the trace, exact and by hand, builds its text.
"""

from __future__ import annotations

import io
import json
import math
import re
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import load_scenario, parse_scenario
from qkv_tui.display.view import View
from qkv_tui.edges.cli import main
from qkv_tui.edges.export_json import to_json
from qkv_tui.edges.export_markdown import to_markdown
from qkv_tui.teach.handcalc import compute_hand
from qkv_tui.teach.trace import Trace

from .test_calculator import assert_holds, check_text, explanation_text

EXPORTS = ("json", "markdown", "toml", "worksheet")
# an overflow the code does not expect would show as a NumPy warning before it shows as a wrong number
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def strict_json(text: str) -> Any:
    def refuse(constant: str) -> Any:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def every_text(trace: Trace) -> list[str]:
    return [line for i in range(len(trace)) for line in (trace.op(i).arithmetic, *trace.op(i).details)]


def assert_one_error_line(err: str, path: Path) -> None:
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: "), err
    assert "Traceback" not in err


def assert_every_command_agrees_with_check(path: Path) -> None:
    code, _, err = run("--check", str(path))
    if code == 2:  # refused: by every command alike
        assert_one_error_line(err, path)
        for fmt in EXPORTS:
            code, out, err2 = run("--export", fmt, str(path))
            assert (code, out) == (2, ""), (fmt, err2)
            assert_one_error_line(err2, path)
        return
    assert code == 0, err
    for fmt in EXPORTS:
        code, out, err = run("--export", fmt, str(path))
        assert code == 0, (fmt, err)
        if fmt == "json":
            strict_json(out)
    comp = compute(load_scenario(path))
    every_text(Trace(comp))
    every_text(Trace(compute_hand(comp, 3)))


# --- generated extreme scenarios --------------------------------------------------------------

EXTREME = st.sampled_from([0, 1, -1, 0.5, -2.5, 3, 1e-300, -1e-300, 5e-324, 1e-160, 1e153, -1e153, 1.2e154,
                           -1.4e154, 1e200, -1e300, 1.7e308, -1.7e308])
SCALES = st.sampled_from([None, 1e-300, 1e-12, 1e-4, 4e-4, 1.0, 1e12, 1e300, 1.7e308])
SLOPES = st.sampled_from([0.5, -0.25, 1e-300, 1e154, 1e308, -1e308])
EPS = st.sampled_from([1e-5, 1e-300, 1e300])


def _toml(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(float(value)) if isinstance(value, float) else str(value)


@st.composite
def extreme_scenarios(draw: st.DrawFn) -> str:
    n = draw(st.integers(1, 3))
    d_model = draw(st.integers(1, 3))
    rope = draw(st.booleans())
    heads = draw(st.integers(1, 2))

    def matrix(rows: int, cols: int) -> list[list[Any]]:
        return draw(st.lists(st.lists(EXTREME, min_size=cols, max_size=cols), min_size=rows, max_size=rows))

    def vector(size: int) -> list[Any]:
        return draw(st.lists(EXTREME, min_size=size, max_size=size))

    lines = [f"tokens = {json.dumps([f't{i}' for i in range(n)])}", f"X = {_toml(matrix(n, d_model))}"]
    alibi = draw(st.booleans())
    if alibi or draw(st.booleans()):  # ALiBi needs a causal mask: without one every drawing would be refused
        lines.append('mask = "causal"')
    if (scale := draw(SCALES)) is not None:
        lines.append(f"scale = {scale!r}")
    tables = []
    if draw(st.booleans()):
        kind = draw(st.sampled_from(["rms", "layer"]))
        tables += ["[norm]", f'kind = "{kind}"', f"eps = {draw(EPS)!r}"]
        if draw(st.booleans()):
            tables.append(f"gamma = {_toml(vector(d_model))}")
        if kind == "layer" and draw(st.booleans()):
            tables.append(f"beta = {_toml(vector(d_model))}")
    if rope:
        layout = draw(st.sampled_from(["interleaved", "half"]))
        tables += ["[rope]", f'layout = "{layout}"', f"base = {draw(st.sampled_from([10000.0, 1.5, 1e300]))!r}"]
    if alibi:
        tables += ["[alibi]", f"slopes = {_toml([draw(SLOPES) for _ in range(heads)])}"]
    d_vs = []
    for _ in range(heads):
        d_k = 2 if rope else draw(st.integers(1, 2))
        d_v = draw(st.integers(1, 2))
        d_vs.append(d_v)
        tables += ["[[heads]]", f"W_Q = {_toml(matrix(d_model, d_k))}", f"W_K = {_toml(matrix(d_model, d_k))}",
                   f"W_V = {_toml(matrix(d_model, d_v))}"]
        for role, width in (("b_Q", d_k), ("b_K", d_k), ("b_V", d_v)):
            if draw(st.booleans()):
                tables.append(f"{role} = {_toml(vector(width))}")
        if draw(st.booleans()):
            tables.append(f"sink = {_toml(draw(EXTREME))}")
    if draw(st.booleans()):
        d_out = draw(st.integers(1, 2))
        tables += ["[output]", f"W_O = {_toml(matrix(sum(d_vs), d_out))}"]
        if draw(st.booleans()):
            tables.append(f"b_O = {_toml(vector(d_out))}")
    return "\n".join(lines + tables) + "\n"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(extreme_scenarios())
def test_every_command_accepts_what_check_accepts(text: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "extreme.toml"
        path.write_text(text, encoding="utf-8")
        assert_every_command_agrees_with_check(path)


def test_the_generator_reaches_both_outcomes() -> None:
    """The property above is not vacuous: the fixed examples include accepted and refused scenarios."""
    outcomes: set[int] = set()

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(extreme_scenarios())
    def probe(text: str) -> None:
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "extreme.toml"
            path.write_text(text, encoding="utf-8")
            outcomes.add(run("--check", str(path))[0])

    probe()
    assert outcomes == {0, 2}


# --- the fuzzer's cases, one by one ------------------------------------------------------------

BASE = 'tokens = ["a", "b", "c"]\nX = [[1, 0], [0, 1], [1, 1]]\n'
HEAD = "[[heads]]\nW_Q = [[1, 0], [0, 1]]\nW_K = [[1, 0], [0, 1]]\nW_V = [[1, 0], [0, 1]]\n"


@pytest.mark.parametrize("scale", [4e-4, 1e-4, 1e-12, 1e-300])
@pytest.mark.parametrize("alibi", [False, True], ids=["plain", "alibi"])
def test_a_tiny_scale_shows_lines_that_recompute(scale: float, alibi: bool, write) -> None:
    """A scale below 0.0005 read 0.000 at three decimals, and the Scale line divided by it."""
    text = BASE + f"scale = {scale!r}\n" + ('mask = "causal"\n[alibi]\nslopes = [0.5]\n' if alibi else "") + HEAD
    path = write(text)
    assert_every_command_agrees_with_check(path)
    comp = compute(load_scenario(path))
    lines = [line for line in every_text(Trace(comp)) if line.startswith("scaled[")]
    assert lines and all("/ 0.000 " not in line for line in lines)
    for decimals in (1, 3, 8):
        assert_holds(check_text(explanation_text(View(Trace(comp)), decimals)))
    assert_holds(check_text(to_markdown(comp)))
    hand = compute_hand(comp, 3)
    assert_holds(check_text(explanation_text(View(Trace(hand)), 3), whole=False))


def test_a_huge_slope_is_refused_by_every_command(write) -> None:
    """An ALiBi slope near 1e308 made a bias of inf, which --export json wrote bare (not JSON) with exit 0."""
    path = write(BASE + 'mask = "causal"\n[alibi]\nslopes = [1e308]\n' + HEAD)
    assert_every_command_agrees_with_check(path)
    code, _, err = run("--check", str(path))
    assert code == 2
    assert err == (f'error: {path}: head 1: values in bias overflow float64 at row 1 ("a"), key "c";'
                   " expected a smaller ALiBi slope (the bias is slope·(j − i))\n")


def test_the_json_writer_never_writes_bare_infinity() -> None:
    """Whatever reaches it, the writer refuses non-finite numbers rather than write invalid JSON."""
    comp = compute(parse_scenario(BASE + 'mask = "causal"\n' + HEAD, "masked.toml"))
    strict_json(to_json(comp))  # masked −∞ is null
    head = comp.heads[0]
    broken = head.scaled.copy()
    broken[0, 0] = math.inf
    from dataclasses import replace

    with pytest.raises(ValueError, match="JSON cannot write"):
        to_json(replace(comp, heads=(replace(head, scaled=broken),)))


NEAR_SQUARE_LIMIT = ('tokens = ["a", "b"]\nX = [[1.5e154, 0], [1, 2]]\n[norm]\nkind = "{kind}"\n'
                     "[[heads]]\nW_Q = [[1, 0], [0, 1]]\nW_K = [[1, 0], [0, 1]]\nW_V = [[1, 0], [0, 1]]\n")


@pytest.mark.parametrize("kind", ["rms", "layer"])
def test_a_norm_near_the_square_limit_is_computed_and_shown(kind: str, write) -> None:
    """1.5e154 squared is past float64, its mean square (1.125e308) is not: the Norm line's arithmetic
    overflowed (markdown and worksheet exited 2 on a file --check accepts), and the engine's X_norm was 0."""
    path = write(NEAR_SQUARE_LIMIT.format(kind=kind))
    assert_every_command_agrees_with_check(path)
    comp = compute(load_scenario(path))
    assert comp.norm is not None
    want = [math.sqrt(2), 0.0] if kind == "rms" else [1.0, -1.0]
    assert comp.norm.X_norm[0].tolist() == pytest.approx(want, rel=1e-6, abs=1e-6)
    stats = [d for i in range(len(Trace(comp))) for d in Trace(comp).op(i).details if d.startswith(("ms(a)", "var(a)"))]
    assert stats and all("e+154" in line or "e+307" in line for line in stats)


def test_a_mean_square_past_float64_is_refused_by_every_command(write) -> None:
    path = write(NEAR_SQUARE_LIMIT.replace("[1.5e154, 0]", "[1e154, 2e154]").format(kind="rms"))
    assert_every_command_agrees_with_check(path)
    code, _, err = run("--check", str(path))
    assert code == 2 and 'the mean square of X row 1 ("a") overflows float64' in err


# --- long Norm sums -------------------------------------------------------------------------------


def _norm_stats(trace: Trace) -> list[str]:
    seg = next(s for s in trace.segments if s.stage == "norm")
    return [d for d in trace.op(seg.start).details if d.startswith(("ms(", "mean(", "var("))]


@pytest.mark.parametrize("kind", ["rms", "layer"])
@pytest.mark.parametrize("decimals", [2, 3, 6])
def test_long_norm_sums_are_elided_and_still_add_up(kind: str, decimals: int) -> None:
    """With d_model 128 the Norm stage printed all 128 squares: now the ends, and the hidden terms' sum."""
    d_model = 128
    X = [[round(math.sin(i * 7 + r) * (1 + i % 5), 3) for i in range(d_model)] for r in range(2)]
    text = (f'tokens = ["a", "b"]\nX = {_toml(X)}\n[norm]\nkind = "{kind}"\n'
            f"[[heads]]\nW_Q = {_toml([[1]] * d_model)}\nW_K = {_toml([[1]] * d_model)}\nW_V = {_toml([[1]] * d_model)}\n")
    trace = Trace(compute(parse_scenario(text, "wide.toml")))
    seg = next(s for s in trace.segments if s.stage == "norm")
    lines = [d for d in trace.op(seg.start, decimals).details if d.startswith(("ms(", "mean(", "var("))]
    assert len(lines) == (1 if kind == "rms" else 2)
    for line in lines:
        assert "… 120 more, Σ = " in line and len(line) < 600, line  # all 128 terms took over 2,000 characters
        # redo it: the shown terms, plus the hidden terms' sum, over 128
        body, _, result = line.rpartition(" = ")
        inside = body[body.index("= (") + 3: body.rindex(") / ")]
        head, _, rest = inside.partition(" + … 120 more, Σ = ")
        hidden, _, tail = rest.partition(" … + ")
        total = sum(_term(t) for t in [*head.split(" + "), *tail.split(" + ")]) + float(hidden)
        unit = 10.0 ** -len(result.partition(".")[2])
        assert abs(total / d_model - float(result)) <= unit * (1 + 1e-9), line


def _term(text: str) -> float:
    """``(-0.841)·(-0.841)``, ``(0.5 − 0.25)·(0.5 − 0.25)`` or ``0.5``, as a calculator reads it."""
    def value(t: str) -> float:
        t = t.strip()
        if t.startswith("(") and t.endswith(")"):
            t = t[1:-1]
        left, sep, right = t.partition(" − ")
        return float(left.strip("()")) - float(right.strip("()")) if sep else float(t.strip("()"))

    factors = re.split(r"(?<=\))·(?=\()|(?<=\d)·(?=[\d(])", text)
    product = 1.0
    for f in factors:
        product *= value(f)
    return product
