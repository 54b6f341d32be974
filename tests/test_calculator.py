"""Every arithmetic line checks out on a calculator.

THE RULE: each ``=`` of a line, recomputed from the numbers shown on its left, gives the
number shown on its right within one unit of that number's last digit (and a plain sum or
difference of shown decimals gives it exactly, as a calculator does). The checker below is
written independently of qkv_tui.teach.arith: its own tokenizer, parser and evaluator for
products, sums, differences, divisions, e^x, √, max and vectors. It reads the text only.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv_tui import compute, load_scenario
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.display.view import View
from qkv_tui.edges.export_markdown import to_markdown
from qkv_tui.teach.handcalc import compute_hand
from qkv_tui.teach.stepper import Position
from qkv_tui.teach.trace import Trace

from .builtins import builtin
from .conftest import SCENARIOS
from .strategies import Case, cases

# --- a small calculator ---------------------------------------------------------------------

TOKEN = re.compile(r"\s*(−∞|∞|e\^|√|max\(|tanh\(|ln\(|-?\d+(?:\.\d+)?(?:e[+-]\d+)?|[()\[\],·/+−])")
Value = float | np.ndarray


class UnparsableError(Exception):
    pass


def tokens(text: str) -> list[str]:
    out, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = TOKEN.match(text, pos)
        if not m:
            raise UnparsableError(text)
        out.append(m.group(1))
        pos = m.end()
    return out


class Parser:
    def __init__(self, text: str) -> None:
        self.toks = tokens(text)
        self.i = 0

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (expected is not None and tok != expected):
            raise UnparsableError(f"expected {expected!r} at {self.i} in {self.toks}")
        self.i += 1
        return tok

    def parse(self) -> Value:
        value = self.expr()
        if self.peek() is not None:
            raise UnparsableError(f"trailing {self.toks[self.i:]}")
        return value

    def expr(self) -> Value:
        value = self.term()
        while self.peek() in ("+", "−"):
            op = self.take()
            rhs = self.term()
            value = value + rhs if op == "+" else value - rhs
        return value

    def term(self) -> Value:
        value = self.unary()
        while self.peek() in ("·", "/"):
            op = self.take()
            rhs = self.unary()
            value = value * rhs if op == "·" else value / rhs
        return value

    def unary(self) -> Value:
        if self.peek() == "e^":
            self.take()
            x = self.unary()
            return math.exp(x) if not isinstance(x, np.ndarray) else np.exp(x)
        if self.peek() == "√":
            self.take()
            return math.sqrt(self.unary())
        return self.primary()

    def items(self, close: str) -> list[Value]:
        values = [self.expr()]
        while self.peek() == ",":
            self.take()
            values.append(self.expr())
        self.take(close)
        return values

    def primary(self) -> Value:
        tok = self.take()
        if tok == "(":
            value = self.expr()
            self.take(")")
            return value
        if tok == "max(":
            return max(self.items(")"))
        if tok == "ln(":  # [ssd]'s softplus, ln(1 + eˢ)
            (x,) = self.items(")")
            return np.log(x) if isinstance(x, np.ndarray) else math.log(x)
        if tok == "tanh(":  # the soft-cap's c·tanh(s/c)
            (x,) = self.items(")")
            return np.tanh(x) if isinstance(x, np.ndarray) else math.tanh(x)
        if tok == "[":
            return np.array(self.items("]"), dtype=float)
        if tok == "−∞":
            return -math.inf
        if tok == "∞":
            return math.inf
        if re.fullmatch(r"-?\d.*", tok):
            return float(tok)
        raise UnparsableError(tok)


def evaluate(text: str) -> Value:
    return Parser(text).parse()


def literal(text: str) -> list[str] | None:
    """The numbers of a side that is only a number or a vector of numbers, else None."""
    t = text.strip()
    parts = [p.strip() for p in t[1:-1].split(",")] if t.startswith("[") and t.endswith("]") else [t]
    parts = [p[1:-1] if p.startswith("(") and p.endswith(")") else p for p in parts]
    if all(re.fullmatch(r"-?\d+(\.\d+)?(e[+-]\d+)?|−∞|∞", p) for p in parts):
        return parts
    return None


def unit_of(number: str) -> float:
    mantissa, _, exponent = number.lstrip("-").partition("e")
    decimals = len(mantissa.partition(".")[2])
    return float(10.0 ** (int(exponent or 0) - decimals))


def close(calc: float, number: str, exact: bool = False) -> bool:
    if number in ("−∞", "∞"):
        return calc == (-math.inf if number == "−∞" else math.inf)
    if math.isnan(calc) or math.isinf(calc):
        return False
    noise = abs(calc) * 1e-12  # float64 arithmetic in this checker
    tol = unit_of(number) * (1e-6 if exact else 1 + 1e-9) + noise
    return abs(calc - float(number)) <= tol


def decimals_of(text: str) -> int:
    return max((len(m.group(1)) for m in re.finditer(r"\d\.(\d+)", text)), default=0)


def split_top(text: str, seps: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """Split at separators outside parentheses and brackets: (parts, separators)."""
    parts, found, depth, start, i = [], [], 0, 0, 0
    while i < len(text):
        ch = text[i]
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif depth == 0:
            for sep in seps:
                if text.startswith(sep, i):
                    parts.append(text[start:i])
                    found.append(sep)
                    i += len(sep)
                    start = i
                    break
            else:
                i += 1
                continue
            continue
        i += 1
    parts.append(text[start:])
    return [p.strip() for p in parts], found


# --- checking lines -------------------------------------------------------------------------


@dataclass
class Report:
    checked: int = 0  # links recomputed
    kinds: set[str] = field(default_factory=set)
    failures: list[str] = field(default_factory=list)

    def fail(self, line: str, why: str) -> None:
        self.failures.append(f"{why}\n    in: {line}")


def check_link(left: str, right: str, line: str, report: Report) -> None:
    """left = right, where right is shown; recursive where right still holds expressions."""
    numbers = literal(right)
    if numbers is not None:
        try:
            value = evaluate(left)
        except (UnparsableError, ValueError, OverflowError, ZeroDivisionError):
            return  # a symbolic side (Q[I]·K[love], Σ e^s): nothing to recompute
        values = list(np.atleast_1d(value)) if isinstance(value, np.ndarray) else [value]
        if len(values) != len(numbers):
            report.fail(line, f"{left!r} has {len(values)} components, {right!r} {len(numbers)}")
            return
        # a sum or difference of shown decimals is exact on a calculator
        exact = (bool(re.fullmatch(r"[\d.\s+−()-]+", left)) and decimals_of(left) <= decimals_of(right)
                 and "e" not in right)
        for v, n in zip(values, numbers):
            if not close(float(v), n, exact):
                report.fail(line, f"{left} = {v!r}, but the line shows {n}")
        report.checked += 1
        for kind in ("e^", "√", "max(", "ln(", "/", "·", "+", "−", "["):
            if kind in left:
                report.kinds.add(kind)
        return
    if left == right:
        return
    for seps in ((" + ", " − "), ("·", " / ")):
        lp, ls = split_top(left, seps)
        rp, rs = split_top(right, seps)
        if len(lp) > 1 and len(lp) == len(rp) and ls == rs:
            for a, b in zip(lp, rp):
                check_link(a, b, line, report)
            return
    if left.startswith("e^") and right.startswith("e^"):
        check_link(left[2:], right[2:], line, report)
        return
    if left.startswith("tanh(") and right.startswith("tanh(") and left.endswith(")") and right.endswith(")"):
        check_link(left[5:-1], right[5:-1], line, report)
        report.kinds.add("tanh")
        return
    if left.startswith("ln(") and right.startswith("ln(") and left.endswith(")") and right.endswith(")"):
        check_link(left[3:-1], right[3:-1], line, report)
        report.kinds.add("ln")
        return
    if left.startswith("(") and left.endswith(")"):
        check_link(left[1:-1], right, line, report)
        return
    if _wrapped(right):  # (a·b + c·d) / r = (ab + cd) / r: the step inside the parentheses, by hand
        check_link(left, right[1:-1], line, report)
        return
    try:
        evaluate(left)
        evaluate(right)
    except (UnparsableError, ValueError, OverflowError, ZeroDivisionError):
        return
    report.fail(line, f"cannot match {left!r} = {right!r} step by step")


def _wrapped(text: str) -> bool:
    """True where one pair of parentheses holds the whole text: "(0.00 + 2.76)", not "(a)·(b)"."""
    if not (text.startswith("(") and text.endswith(")")):
        return False
    depth = 0
    for i, ch in enumerate(text):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and i < len(text) - 1:
            return False
    return True


ANNOTATION = re.compile(r"(, masked → −∞| \(masked\))$")


def check_chain(text: str, line: str, report: Report, whole: bool) -> None:
    sides = [s.strip() for s in text.split(" = ")]
    if len(sides) < 2:
        return
    if ": " in sides[0]:
        sides[0] = sides[0].rsplit(": ", 1)[1]
    sides[-1] = ANNOTATION.sub("", sides[-1])
    for a, b in itertools.pairwise(sides):
        check_link(a, b, line, report)
    if whole and literal(sides[-1]) is not None:  # exact mode: every side is the result, not only the next
        for side in sides[:-2]:
            check_link(side, sides[-1], line, report)


def check_line(line: str, report: Report, whole: bool = True) -> None:
    for segment in line.split("; "):
        if " | " in segment and "→" in segment:  # a list of exponentials and their sum
            items, _, total = segment.partition("  →  ")
            results = []
            for item in items.split(" | "):
                check_chain(item, line, report, whole)
                results.append(item.rsplit(" = ", 1)[-1].strip())
            shown = total.rsplit(" = ", 1)[-1].strip()
            if "…" not in items and literal(shown):
                check_link(" + ".join(results), shown, line, report)
                report.kinds.add("Σ")
        else:
            for piece in segment.split(" | "):
                check_chain(piece, line, report, whole)


def check_text(text: str, whole: bool = True) -> Report:
    report = Report()
    for line in text.splitlines():
        check_line(line, report, whole)
    return report


def assert_holds(report: Report) -> None:
    assert not report.failures, f"{len(report.failures)} lines fail the rule:\n" + "\n".join(report.failures[:20])
    assert report.checked > 0


# --- the checker itself can fail ----------------------------------------------------------------


def test_the_checker_catches_the_old_lines() -> None:
    # copied from the export before this rule: the exact e^(5/√3) shown as e^2.887's value
    old = [
        "      same as without the max: e^2.887 / Σ e^s = 17.935 / 25.368 = 0.707",
        "      same as without the max: e^1.155 / Σ e^s = 3.173 / 18.894 = 0.168",
        "      same as without the max: e^2.309 / Σ e^s = 10.068 / 18.894 = 0.533",
        "    weights[I,I] = e^(0.577 − 2.887) / 1.414 = e^-2.309 / 1.414 = 0.099 / 1.414 = 0.070",
    ]
    for line in old:
        report = Report()
        check_line(line, report)
        assert report.failures, line
    assert "17.939" in check_text("e^2.887 = 17.935").failures[0] or check_text("e^2.887 = 17.935").failures


@pytest.mark.parametrize("line", [
    "e^2.887 = 17.939",
    "weights[I,I] = e^(0.577 − 2.887) / 1.414 = e^-2.310 / 1.414 = 0.099 / 1.414 = 0.070",
    "out[love] = 0.333·[1, 0, 1] + 0.333·[1, 2, 0] + 0.333·[1, 1, 0] = [1.000, 1.000, 0.333]",
    "row max = max(0.577, −∞, 1.732) = 1.732; subtracting it keeps every exponent ≤ 0",
    "e^(s − max): e^-2.310 = 0.099 | e^0.000 = 1.000 | e^-1.155 = 0.315  →  Σ = 1.414",
    "scaled[I,love] = 5 / √3 = 2.887, masked → −∞",
    "Q[a,0] = X[a]·W_Q[:,0] = 0.12·0.35 + 1·(-0.5) = 0.042 + (-0.500) = -0.458",
])
def test_the_checker_accepts_true_lines(line: str) -> None:
    report = Report()
    check_line(line, report)
    assert not report.failures and report.checked > 0


@pytest.mark.parametrize("line", [
    "e^2.887 = 17.941",
    "out[love] = 0.333·[1, 0, 1] + 0.333·[1, 2, 0] = [0.666, 0.668, 0.333]",
    "row max = max(0.577, 2.887, 1.732) = 1.732",
    "e^(s − max): e^-2.310 = 0.099 | e^0.000 = 1.000  →  Σ = 1.100",
    "scaled[I,love] = 5 / √3 = 2.889",
    "x = 0.12·0.35 + 0.5·0.5 = 0.042 + 0.250 = 0.293",
    "x = 2 / 25 = 0.06",
])
def test_the_checker_rejects_false_lines(line: str) -> None:
    report = Report()
    check_line(line, report)
    assert report.failures


# --- the Markdown export ------------------------------------------------------------------------


def each_scenario() -> list[Any]:
    """Every built-in scenario, the variant ones (norm, rotation, biases, sinks) included."""
    return [pytest.param(path, id=path.stem) for path in SCENARIOS]


@pytest.mark.parametrize("decimals", range(1, 9))
@pytest.mark.parametrize("path", each_scenario())
def test_every_markdown_line_checks_out(path, decimals: int) -> None:
    comp = builtin(path)
    report = check_text(to_markdown(comp, decimals))
    assert_holds(report)
    # a head that keeps a state ([linear], [deltanet], [ssd]) has no softmax: no row max, no list of exponentials
    state = comp.scenario.linear is not None or comp.scenario.deltanet is not None or "ssd" in comp.scenario.parts
    assert ({"·", "+", "/", "e^"} if state else {"·", "+", "/", "e^", "max(", "Σ"}) <= report.kinds
    if any(head.scale_is_default for head in comp.heads):
        assert "√" in report.kinds


@settings(max_examples=40, deadline=None)
@given(cases(), st.integers(1, 8))
def test_generated_markdown_checks_out(case: Case, decimals: int) -> None:
    comp = compute(parse_scenario(case.toml, "generated.toml"))
    assert_holds(check_text(to_markdown(comp, decimals)))


# --- the app's explanation ------------------------------------------------------------------------


def explanation_text(view: View, decimals: int) -> str:
    lines = []
    for i in range(len(view.trace)):
        ex = view.explain(Position(i, view.trace.segment_at(i).head or 0), decimals)
        lines += [ex.arithmetic, *ex.details]
    return "\n".join(lines)


@pytest.mark.parametrize("decimals", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("path", each_scenario())
def test_every_explanation_line_checks_out(path, decimals: int) -> None:
    comp = builtin(path)
    assert_holds(check_text(explanation_text(View(Trace(comp)), decimals)))


@pytest.mark.parametrize("decimals", [1, 2, 3, 4])
@pytest.mark.parametrize("path", each_scenario())
def test_hand_rounded_lines_check_out_step_by_step(path, decimals: int) -> None:
    # by hand each step is rounded before the next, so each "=" holds, not first-to-last
    comp = compute_hand(builtin(path), decimals)
    assert_holds(check_text(explanation_text(View(Trace(comp)), decimals), whole=False))


@settings(max_examples=30, deadline=None)
@given(cases(), st.integers(1, 8), st.booleans())
def test_generated_explanations_check_out(case: Case, decimals: int, hand: bool) -> None:
    comp = compute(parse_scenario(case.toml, "generated.toml"))
    if hand:
        comp = compute_hand(comp, decimals)
    assert_holds(check_text(explanation_text(View(Trace(comp)), decimals), whole=not hand))


def test_extreme_scores_never_divide_by_zero(write) -> None:
    # Σe^s underflows to 0 for scores near −800: only the max-subtracted form is shown, and it holds
    text = ('tokens = ["a", "b"]\nX = [[1], [1]]\nscale = 1\n'
            "[[heads]]\nW_Q = [[1]]\nW_K = [[-800]]\nW_V = [[1]]\n")
    trace = Trace(compute(load_scenario(write(text))))
    lines = [line for i in range(len(trace)) for line in (trace.op(i).arithmetic, *trace.op(i).details)]
    assert not any("without the max" in line for line in lines)
    assert_holds(check_text("\n".join(lines)))


def test_hand_rounding_of_far_apart_scores_never_divides_by_zero(write) -> None:
    # scores of −8 at 3 decimals: by hand every e^s rounds to 0.000, so Σ e^s would be 0
    text = ('tokens = ["a", "b"]\nX = [[1], [1]]\nscale = 1\n'
            "[[heads]]\nW_Q = [[1]]\nW_K = [[-8]]\nW_V = [[1]]\n")
    trace = Trace(compute_hand(compute(load_scenario(write(text))), 3))
    lines = [line for i in range(len(trace)) for line in (trace.op(i).arithmetic, *trace.op(i).details)]
    assert not any("without the max" in line for line in lines)
    assert_holds(check_text("\n".join(lines), whole=False))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-3, 3, allow_nan=False), min_size=17, max_size=60), st.integers(1, 6))
def test_long_sums_would_check_out_if_every_term_were_shown(values: list[float], decimals: int) -> None:
    """A dot product too long to print is still worked so that its hidden terms, written out at the
    line's precision, give the shown result."""
    from qkv_tui.core.fmt import fmt
    from qkv_tui.teach.arith import dot_line

    a = np.array(values)
    b = np.array(values[::-1]) / 3
    result = fmt(float(a @ b), False, decimals)
    line = dot_line(a, b, False, False, result, decimals)
    assert "more …" in line
    shown_places = max(len(t.partition(".")[2]) for t in re.findall(r"-?\d+\.\d+", line.rsplit(" = ", 1)[0]))
    total = math.fsum(float(f"{x:.{shown_places}f}") * float(f"{y:.{shown_places}f}") for x, y in zip(a, b))
    assert close(total, result)


@pytest.mark.parametrize("decimals", [1, 2, 3, 5])
def test_hidden_terms_round_as_a_student_writes_them(decimals: int) -> None:
    """Entries on a rounding tie (0.125 at 2 decimals) read as their correctly rounded text, which
    np.round (binary scaling) does not always give: the hidden middle of a long sum must use the text."""
    from qkv_tui.core.fmt import fmt
    from qkv_tui.teach.arith import _as_shown

    rng = np.random.default_rng(decimals)
    ties = (np.floor(rng.uniform(-3e4, 3e4, 400)) + 0.5) / 10**decimals
    want = [float(fmt(float(x), False, decimals)) for x in ties]
    assert _as_shown(ties, False, decimals).tolist() == want
