"""The reader's fast path for large matrices gives exactly what tomllib gives, errors included."""

from __future__ import annotations

import math
import re
import sys
import tomllib
import tracemalloc
from collections.abc import Callable
from types import FrameType
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qkv_tui.core import tomlfile
from qkv_tui.core.tomlfile import NumberGrid, ReadError, parse_toml

# Numbers as a person or a program writes them: shortest reprs, long decimals, integers,
# signed zeros, exponents with leading zeros.
number_text = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.integers(-(10**30), 10**30).map(str),
    st.sampled_from(["0", "-0", "+0", "-0.0", "0.0", "+1.5", "1e06", "1E-5", "-2.5e+3", "1e400", "-1e400", "5e-324"]),
    st.tuples(st.integers(0, 10**20), st.integers(0, 10**40)).map(lambda p: f"{p[0]}.{p[1]:040d}"),
)


@st.composite
def grid_text(draw: st.DrawFn) -> str:
    rows, cols = draw(st.integers(1, 40)), draw(st.integers(1, 30))
    sep = draw(st.sampled_from([", ", ",", " , ", ",\t"]))
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    one_line = draw(st.booleans())
    lines = []
    for _ in range(rows):
        cells = [draw(number_text) for _ in range(cols)]
        trailing = "," if draw(st.booleans()) else ""
        lines.append("[" + sep.join(cells) + trailing + "]")
    joiner = ", " if one_line else "," + newline + "  "
    return "[" + ("" if one_line else newline + "  ") + joiner.join(lines) + ("" if one_line else newline) + "]"


def same(a: object, b: object) -> bool:
    """Equal, with floats compared bit for bit (the sign of zero included)."""
    if isinstance(a, NumberGrid):
        a = a.values.tolist()
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, float) or isinstance(b, float):
        fa, fb = float(a), float(b)  # type: ignore[arg-type]
        return (fa == fb and math.copysign(1, fa) == math.copysign(1, fb)) or (math.isnan(fa) and math.isnan(fb))
    return a == b


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(grid=grid_text(), before=st.sampled_from(["", 'title = "a = [[1]]"\n', "# X = [[1, 2]]\n"]),
       after=st.sampled_from(["", " # a comment", "\n[[heads]]\nname = 'h'"]))
def test_fast_grids_equal_tomllib(grid: str, before: str, after: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tomlfile, "_FAST_MIN_CHARS", 8)  # the same for every example: no reset needed
    text = f'{before}X = {grid}{after}\nY = 1\n'
    expected = tomllib.loads(text)
    got = parse_toml(text)
    assert same(got, expected)


def test_large_grid_takes_the_fast_path_and_keeps_integer_zero_positive() -> None:
    rows = ",\n".join("[" + ", ".join(["-0", "3", "-7"] * 100) + "]" for _ in range(20))
    doc = parse_toml(f"X = [\n{rows}\n]\n")
    grid = doc["X"]
    assert isinstance(grid, NumberGrid) and grid.integers
    assert grid.values.shape == (20, 300)
    assert not np.signbit(grid.values[:, 0]).any()  # tomllib's -0 is the integer 0
    assert same(grid, tomllib.loads(f"X = [\n{rows}\n]\n")["X"])


@pytest.mark.parametrize("odd", ["1_000", "0x10", "inf", "nan", "# c\n", "01", "1.", ".5", "true", '"1"'])
def test_anything_unusual_is_left_to_tomllib(odd: str) -> None:
    rows = ",\n".join("[" + ", ".join(["1.25"] * 200) + "]" for _ in range(5))
    text = f"X = [\n{rows},\n[{odd}" + ", 1.25" * 199 + "]\n]\n"
    try:
        expected = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        with pytest.raises(ReadError, match="TOML syntax error"):
            parse_toml(text)
        return
    got = parse_toml(text)
    assert isinstance(got["X"], list) and same(got, expected)


def test_errors_after_a_large_grid_keep_their_line_and_column(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = ",\n".join("[" + ", ".join(["0.5"] * 300) + "]" for _ in range(10))
    assert isinstance(parse_toml(f"X = [\n{rows}\n]\n")["X"], NumberGrid)
    tails = ("] junk\n", "]\nY = [1, 2\nZ = 3\n", "]\n[[heads]\n", "]\nY = 1\nY = 2\n", "]\nW = '''x\n", "] # ok\nV = \n")
    for tail in tails:
        text = f"X = [\n{rows}\n{tail}"
        messages = []
        for limit in (8, 10**9):  # the fast path, then tomllib alone
            monkeypatch.setattr(tomlfile, "_FAST_MIN_CHARS", limit)
            with pytest.raises(ReadError) as caught:
                parse_toml(text)
            messages.append(caught.value.message)
        assert messages[0] == messages[1] and messages[0].startswith("line "), messages


def test_duplicate_keys_are_still_refused() -> None:
    rows = ",\n".join("[" + ", ".join(["2"] * 500) + "]" for _ in range(3))
    with pytest.raises(ReadError, match=r"^line 6: TOML syntax error: X is given twice in this table \(first at line 1\)"):
        parse_toml(f"X = [\n{rows}\n]\nX = [\n{rows}\n]\n")


def test_grids_inside_multiline_strings_stay_text() -> None:
    rows = ",\n".join("[" + ", ".join(["2"] * 500) + "]" for _ in range(3))
    text = f'description = """\nX = [\n{rows}\n]\n"""\n'
    assert parse_toml(text) == tomllib.loads(text)


def test_scenario_from_a_large_file_equals_the_slow_path(monkeypatch: pytest.MonkeyPatch) -> None:
    from qkv_tui.core.scenario import parse_scenario

    rng = np.random.default_rng(3)
    X = rng.standard_normal((64, 32))
    W = rng.standard_normal((32, 8))

    def mat(a: np.ndarray) -> str:
        return "[\n" + ",\n".join("  [" + ", ".join(map(repr, row)) + "]" for row in a.tolist()) + "\n]"

    allow = np.tril(np.ones((64, 64), dtype=int))
    text = (f"tokens = [{', '.join(f'{chr(34)}t{i}{chr(34)}' for i in range(64))}]\nX = {mat(X)}\n"
            f"[mask]\nkind = \"custom\"\nallow = [{', '.join(str(r.tolist()) for r in allow)}]\n"
            f"[[heads]]\nW_Q = {mat(W)}\nW_K = {mat(W)}\nW_V = {mat(W)}\n")
    fast = parse_scenario(text, "fast.toml")
    monkeypatch.setattr(tomlfile, "_FAST_MIN_CHARS", 10**9)
    slow = parse_scenario(text, "slow.toml")
    assert np.array_equal(fast.X, slow.X) and np.array_equal(fast.X, X)
    assert np.array_equal(fast.allow, slow.allow) and np.array_equal(fast.allow, allow == 1)
    assert np.array_equal(fast.heads[0].W_V, slow.heads[0].W_V)


def test_bad_values_in_a_large_grid_get_the_slow_paths_message(monkeypatch: pytest.MonkeyPatch) -> None:
    from qkv_tui.core.scenario import ScenarioError, parse_scenario

    allow = [[1] * 300 for _ in range(3)]
    allow[1][7] = 2
    a3 = ", ".join(['"a"'] * 3)
    text = (f"tokens = [{a3}]\nX = [[1], [2], [3]]\n"
            f"[mask]\nkind = \"custom\"\nallow = {allow}\n[[heads]]\nW_Q = [[1]]\nW_K = [[1]]\nW_V = [[1]]\n")
    text = text.replace("[mask]", "[context]\ntokens = [" + ", ".join(['"k"'] * 300) + "]\nX = ["
                        + ", ".join(["[1]"] * 300) + "]\n[mask]")
    messages = []
    for limit in (8, 10**9):
        monkeypatch.setattr(tomlfile, "_FAST_MIN_CHARS", limit)
        with pytest.raises(ScenarioError) as caught:
            parse_scenario(text, "f.toml")
        messages.append(caught.value.message)
    assert messages[0] == messages[1] == (
        '[mask] allow row 2 ("a"), column 8 ("k") must be 1/0 or true/false, got a number (2)')


def test_infinite_values_in_a_large_grid(monkeypatch: pytest.MonkeyPatch) -> None:
    from qkv_tui.core.scenario import ScenarioError, parse_scenario

    row = ", ".join(["1.5"] * 300)
    text = ('tokens = ["a", "b"]\nX = [[' + row + "], [" + row.replace("1.5", "1e999", 1) + "]]\n"
            "[[heads]]\nW_Q = [[1]]\nW_K = [[1]]\nW_V = [[1]]\n")
    with pytest.raises(ScenarioError, match=r'X row 2 \("b"\), column 1 is inf; expected a finite number'):
        parse_scenario(text, "f.toml")


# --- long strings: the pre-scan and the label check stay linear and small ------------------

# One of each TOML string kind, with the exceptions its pattern must step over: escapes,
# lone quotes and pairs of quotes inside the multi-line kinds, a new line where one is legal.
LONG_STRINGS = {
    "basic": lambda body: '"' + body.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + ' \\"quoted\\" \\\\"',
    "multi-line basic": lambda body: '"""\n' + body.replace("\\", "\\\\") + ' a "quote", ""two"" \\""" and\\\n end""""',
    "literal": lambda body: "'" + body.replace("\n", " ").replace("\\", "/") + " \\ '",
    "multi-line literal": lambda body: "'''\n" + body.replace("\\", "/") + " a 'quote', ''two'' end'''''",
}
LINE = 'A line of the description, with a "quote", a \\ and a tab\t.\n'


def _traced_peak(run: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("kind", sorted(LONG_STRINGS))
def test_the_scanners_step_over_a_long_string_in_constant_memory(kind: str) -> None:
    """Both scanners match a 1 MB string in one step whose memory does not grow with it (the old
    alternation took ~150 bytes per character: 7 GB for a 52 MB description)."""
    value = LONG_STRINGS[kind](LINE * 16_000)
    text = f"description = {value}\nX = [[1]]\n"
    assert tomllib.loads(text)["description"].lstrip("\n").startswith("A line")  # valid TOML
    start = text.index("=") + 2
    found: list[re.Match[str] | None] = []
    scan = tomlfile._scan()  # compiled on first use: outside the measured step, as _Scan's lexer below
    tomlfile._lex()
    peak = _traced_peak(lambda: found.append(scan.search(text, start)))
    assert found[0] is not None and found[0].lastgroup == "skip" and found[0].group() == value
    assert peak < 64_000, f"{peak:,} bytes to scan a {len(value):,}-character string"
    scans: list[tomlfile._Scan] = []
    peak = _traced_peak(lambda: scans.append(tomlfile._Scan(text, len(text))))
    assert scans[0].unclosed_string is None and scans[0].stack == [] and scans[0].last_end == len(text) - 1
    assert peak < 64_000, f"{peak:,} bytes to lex a {len(value):,}-character string"


def test_a_long_description_is_checked_in_bounded_python_work() -> None:
    """A 1 MB description costs tomllib's own parse and a few copies of the text: memory within 4
    times its size, and a count of Python lines in qkv_tui that does not grow with it (the label
    check once walked it a character at a time)."""
    from qkv_tui.core.scenario import parse_scenario

    body = LINE * 16_000
    text = ("description = '''\n" + body.replace("\\", "/") + "'''\n"
            'tokens = ["I"]\nX = [[1, 0]]\n[[heads]]\nW_Q = [[1], [0]]\nW_K = [[1], [0]]\nW_V = [[1], [0]]\n')
    lines = 0

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        if "qkv_tui" not in frame.f_code.co_filename:
            return None  # tomllib and the standard library run untraced

        def count(frame: FrameType, event: str, arg: object) -> Any:
            nonlocal lines
            lines += event == "line"
            return count

        return count

    def run() -> None:
        sys.settrace(tracer)
        try:
            sc = parse_scenario(text, "f.toml")
        finally:
            sys.settrace(None)
        assert sc.description == body.replace("\\", "/")

    peak = _traced_peak(run)
    assert peak < 4 * len(text), f"{peak:,} bytes for a {len(text):,}-character file"
    assert lines < 5_000, f"{lines:,} Python lines run in qkv_tui for one long description"
