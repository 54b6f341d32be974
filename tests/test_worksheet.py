"""Worksheets: every blank computable from the page, every number re-computable, answers against the engine.

The checks here read the Markdown page itself (its tables and its answer key) and redo the
arithmetic with loops, as a student with a calculator would: they never ask the worksheet
module how it computed anything.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv_tui import compute, load_scenario
from qkv_tui.core.engine import Computation
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.core.variants import differential, indexer
from qkv_tui.core.variants.alibi import TABLE as ALIBI
from qkv_tui.edges.worksheet.make import build, parse_blanks

from .conftest import SCENARIOS, Run
from .strategies import Case, cases

BLANK = re.compile(r"^\((\d+)\) _+$")
Grid = list[list[str]]


def parse_page(page: str) -> tuple[list[tuple[str, Grid]], dict[int, str]]:
    """The page's tables in order (corner name, cells as printed) and the answer key (number -> working)."""
    tables: list[tuple[str, Grid]] = []
    lines = page.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("| ") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            corner = lines[i].split(" | ")[0][2:]
            rows: Grid = []
            i += 2
            while i < len(lines) and lines[i].startswith("| "):
                cells = [c.strip() for c in lines[i].strip("| ").split(" | ")]
                rows.append(cells[1:])
                i += 1
            tables.append((corner, rows))
            continue
        i += 1
    key = {int(m.group(1)): m.group(2) for m in re.finditer(r"^- \((\d+)\) (.*)$", page, re.M)}
    return tables, key


def unit(text: str) -> float:
    """One unit of the last printed digit: 1 for "5", 0.001 for "0.707"."""
    return 10.0 ** -len(text.split(".")[1]) if "." in text else 1.0


def number(text: str) -> float:
    return -math.inf if text == "−∞" else float(text)


class Page:
    """A worksheet as printed, with a student's loops to fill it."""

    def __init__(self, comp: Computation, page: str) -> None:
        self.comp = comp
        self.sc = comp.scenario
        parsed, self.key = parse_page(page)
        self.tables: dict[str, Grid] = {}
        counts: dict[str, int] = {}
        for corner, grid in parsed:
            if corner == "mask":
                continue
            n = counts.get(corner, 0)
            counts[corner] = n + 1
            per_head = corner in ("W_Q", "W_K", "W_V", "Q", "K", "V", "scores", "scaled", "weights", "output")
            self.tables[f"{corner}.{n}" if per_head else corner] = grid
        self.blanks: dict[tuple[str, int, int], int] = {}
        for name, grid in self.tables.items():
            for i, row in enumerate(grid):
                for j, cell in enumerate(row):
                    found = BLANK.match(cell)
                    if found:
                        self.blanks[(name, i, j)] = int(found.group(1))

    def order(self) -> list[tuple[str, int, int]]:
        """The blanks in page order (table by table, row-major)."""
        return sorted(self.blanks, key=lambda c: self.blanks[c])

    def deps(self, name: str, i: int, j: int) -> list[tuple[str, int, int]]:
        """Which printed cells a cell is worked from, written out independently of the module."""
        base, _, h = name.partition(".")
        sc = self.sc
        X = "X_ctx" if sc.is_cross and base in ("K", "V") else "X"
        width = len(self.tables[X][0]) if base in ("Q", "K", "V") else 0
        if base in ("Q", "K", "V"):
            return [(X, i, k) for k in range(width)] + [(f"W_{base}.{h}", k, j) for k in range(width)]
        if base == "scores":
            d_k = len(self.tables[f"Q.{h}"][0])
            return [(f"Q.{h}", i, k) for k in range(d_k)] + [(f"K.{h}", j, k) for k in range(d_k)]
        if base == "scaled":
            return [(f"scores.{h}", i, j)]
        if base == "weights":
            return [(f"scaled.{h}", i, k) for k in range(sc.m)]
        if base == "output":
            return [(f"weights.{h}", i, k) for k in range(sc.m)] + [(f"V.{h}", k, j) for k in range(sc.m)]
        if base == "final":
            width = len(self.tables["concat"][0]) if "concat" in self.tables else len(self.tables["output.0"][0])
            src = "concat" if "concat" in self.tables else "output.0"
            return [(src, i, k) for k in range(width)] + [("W_O", k, j) for k in range(width)]
        raise AssertionError(name)

    def work(self, name: str, i: int, j: int, get: Callable[[str, int, int], float]) -> float:
        """A student's loop for one cell, from the printed operands."""
        base, _, h = name.partition(".")
        sc = self.sc
        deps = self.deps(name, i, j)
        if base in ("Q", "K", "V", "scores", "output", "final"):
            half = len(deps) // 2
            return sum(get(*a) * get(*b) for a, b in zip(deps[:half], deps[half:]))
        if base == "scaled":
            divisor = math.sqrt(len(self.tables[f"Q.{h}"][0])) if sc.scale is None else sc.scale
            return -math.inf if not sc.allow[i, j] else get(*deps[0]) / divisor
        if base == "weights":
            row = [get(*d) for d in deps]
            top = max(row)
            exps = [math.exp(v - top) for v in row]
            return exps[j] / sum(exps)
        raise AssertionError(name)


def student(page: Page) -> tuple[dict[tuple[str, int, int], float], dict[tuple[str, int, int], float]]:
    """Fill every blank in page order from what is printed and what was filled before; fail if one cannot be."""
    known: dict[tuple[str, int, int], float] = {}
    for name, grid in page.tables.items():
        for i, row in enumerate(grid):
            for j, cell in enumerate(row):
                if (name, i, j) not in page.blanks:
                    known[(name, i, j)] = number(cell)
    filled: dict[tuple[str, int, int], float] = {}
    for cell in page.order():
        missing = [d for d in page.deps(*cell) if d not in known]
        assert not missing, f"blank {page.blanks[cell]} at {cell} needs {missing}, which are neither printed nor filled earlier"
        value = page.work(*cell, lambda *c: known[c])
        filled[cell] = value
        # the student checks the answer against the key (below), then works on from the key's number:
        # a tie rounded the other way would otherwise be carried, and doubled, into later cells
        known[cell] = number(answer_of(page.key[page.blanks[cell]]))
    return filled, known


def answer_of(working: str) -> str:
    return working.rsplit(" = ", 1)[1]


def evaluate(expr: str) -> float:
    """A printed working's arithmetic, as typed into a calculator."""
    text = expr.replace("·", "*").replace("−", "-").replace("e^", "exp").replace("√", "sqrt ")
    text = re.sub(r"sqrt (\d+)", r"sqrt(\1)", text)
    return float(eval(text, {"__builtins__": {}}, {"exp": math.exp, "sqrt": math.sqrt}))


def check_page(comp: Computation, blanks: str, seed: int) -> Page:
    page_text = build(comp, blanks, seed).markdown()
    page = Page(comp, page_text)
    filled, known = student(page)
    # every blank, worked by the student, matches the answer key within one unit of its last digit
    assert sorted(page.blanks.values()) == list(range(1, len(page.blanks) + 1)) == sorted(page.key)
    for cell, n in page.blanks.items():
        answer = answer_of(page.key[n])
        assert abs(filled[cell] - number(answer)) <= unit(answer) + 1e-9, (n, page.key[n], filled[cell])
        # and each step of the printed working re-computes to the answer
        steps = page.key[n].split(" = ")
        for step in steps[1:-1]:
            if re.search(r"[A-Za-z_]\[", step):  # symbolic (X[I]·W_Q[:,0]), not numbers
                continue
            assert abs(evaluate(step) - number(answer)) <= unit(answer) + 1e-9, (n, step, answer)
    # every printed computed number re-computes from the printed operands within one unit
    def get(name: str, i: int, j: int) -> float:
        return known[(name, i, j)]

    for name, grid in page.tables.items():
        if name.split(".")[0] in ("X", "X_ctx", "W_Q", "W_K", "W_V", "W_O", "concat"):
            continue
        for i, row in enumerate(grid):
            for j, cell in enumerate(row):
                if (name, i, j) in page.blanks:
                    continue
                want = page.work(name, i, j, get)
                if math.isinf(want):
                    assert cell == "−∞"
                    continue
                assert abs(want - number(cell)) <= unit(cell) + 1e-9, (name, i, j, cell, want)
    return page


def engine_value(comp: Computation, name: str, i: int, j: int) -> float:
    base, _, h = name.partition(".")
    if base == "final":
        return float(comp.output[i, j])
    head = comp.heads[int(h)]
    return float(getattr(head, "masked" if base == "scaled" else base)[i, j])


def classic(path: Path) -> bool:
    """A scenario without the §7 variants: this page model knows its tables (test_worksheet_variants knows them all)."""
    sc = load_scenario(path)
    return (sc.norm is None and sc.qk_norm is None and sc.rope is None and ALIBI.of(sc) is None and sc.num_kv_heads is None
            and sc.linear is None and sc.deltanet is None  # their pages: tests/test_linear_attention.py
            and differential.TABLE.of(sc) is None  # no page yet: refused in one line (tests/test_differential_builtin.py)
            and indexer.TABLE.of(sc) is None  # no page yet: refused in one line (tests/test_dsa_builtin.py)
            and "ssd" not in sc.parts  # no page yet either: refused in one line (tests/test_ssd_builtin.py)
            and sc.backward is None  # its backward tables: tests/test_worksheet_backward.py
            and sc.b_O is None and sc.mla is None and all(h.b_Q is None and h.b_K is None and h.b_V is None and h.sink is None
                                       and h.softcap is None for h in sc.heads))


@pytest.mark.parametrize("path", [p for p in SCENARIOS if classic(p)], ids=lambda p: p.stem)
@pytest.mark.parametrize(("blanks", "seed"), [("25%", 0), ("100%", 1), ("7", 2)])
def test_builtin_worksheets(path, blanks: str, seed: int) -> None:
    comp = compute(load_scenario(path))
    page = check_page(comp, blanks, seed)
    for cell, n in page.blanks.items():
        answer = number(answer_of(page.key[n]))
        exact = engine_value(comp, *cell)
        # the page works from rounded numbers, so it drifts from the engine by a few units at most
        assert abs(answer - exact) <= 0.005 * max(1.0, abs(exact)), (cell, answer, exact)
        if cell[0].split(".")[0] in ("Q", "K", "V", "scores") and comp.scenario.X.round().tolist() == comp.scenario.X.tolist():
            assert answer == pytest.approx(exact, abs=1e-9)  # whole-number inputs: these are exact


@settings(max_examples=40, deadline=None)
@given(cases(), st.sampled_from(["30%", "100%", "3"]), st.integers(0, 5))
def test_generated_worksheets(case: Case, blanks: str, seed: int) -> None:
    comp = compute(parse_scenario(case.toml, "generated.toml"))
    check_page(comp, blanks, seed)


def test_the_seed_numbers_are_on_the_page() -> None:
    page = build(compute(load_scenario("i_love_ai")), "0").markdown()
    assert "| **I** | 0.070 | 0.707 | 0.223 |" in page
    assert "| **I** | 1.000 | 1.637 | 0.070 |" in page
    assert "(No blanks on this page.)" in page


def test_how_many_blanks() -> None:
    comp = compute(load_scenario("i_love_ai"))
    # computed cells that may be blank: Q, K, V (9 each), scores, scaled, weights (9 each), output (9)
    assert len(build(comp, "100%").blanks) == 63
    assert len(build(comp, "12").blanks) == 12
    assert len(build(comp, "25%").blanks) == round(0.25 * 63)
    assert len(build(comp, "1000").blanks) == 63
    spread = build(comp, "7")
    assert {b.table for b in spread.blanks} == {"Q.0", "K.0", "V.0", "scores.0", "scaled.0", "weights.0", "output.0"}
    masked = compute(load_scenario("causal_mask"))
    softmax_blanks = [b for b in build(masked, "100%").blanks if b.table.startswith(("scaled", "weights"))]
    assert softmax_blanks and all(masked.scenario.allow[b.row, b.col] for b in softmax_blanks)


def test_the_same_seed_gives_the_same_page() -> None:
    comp = compute(load_scenario("two_heads"))
    assert build(comp, "30%", 4).markdown() == build(comp, "30%", 4).markdown()
    pages = {build(comp, "30%", seed).markdown() for seed in range(5)}
    assert len(pages) > 1


@pytest.mark.parametrize(
    ("spec", "parsed"), [("12", (12, None)), ("0", (0, None)), ("25%", (None, 0.25)), (" 100% ", (None, 1.0))]
)
def test_parse_blanks(spec: str, parsed: tuple[int | None, float | None]) -> None:
    assert parse_blanks(spec) == parsed


@pytest.mark.parametrize("spec", ["x", "-1", "101%", "nan%", "1.5", ""])
def test_bad_blanks_is_one_line(cli: Callable[..., Run], spec: str) -> None:
    run = cli("--export", "worksheet", "--blanks", spec, "i_love_ai")
    assert run.code == 2 and run.out == ""
    assert run.err.count("\n") == 1 and run.err.startswith("error: --blanks")


def test_cli_worksheet(cli: Callable[..., Run]) -> None:
    run = cli("--export", "worksheet", "--blanks", "5", "--seed", "9", "cross_attention")
    assert run.code == 0 and run.err == ""
    assert run.out.startswith("# Worksheet: ") and "## Answer key" in run.out
    assert run.out.count("______") == 5
    assert run.out == cli("--export", "worksheet", "--blanks", "5", "--seed", "9", "cross_attention").out
