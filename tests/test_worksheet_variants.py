"""Worksheets of every scenario, the §7 variants included, worked by a student from the printed page.

The checks read the Markdown page only (its tables, headings and answer key) plus the scenario's
mask, scale and RoPE layout, and redo each number with loops written here: the norm's row
statistics and X̂, projections with their bias, RoPE turns with the printed cos and sin, scores,
scaled scores with ALiBi's slope·(j − i), softmax with a sink's extra term, the mix and W_O + b_O.
Every answer-key line is typed into the calculator of tests/test_calculator.py as well.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv_tui import compute, load_scenario
from qkv_tui.core.engine import Computation
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.core.variants.alibi import TABLE as ALIBI
from qkv_tui.edges.worksheet.make import WorksheetError, build
from qkv_tui.kernels.qk_norm import QKNormed
from qkv_tui.kernels.rope import Rotated
from qkv_tui.kernels.softcap import Capped

from .conftest import MODEL_SCENARIOS, SCENARIOS, SOFTMAX_SCENARIOS, Run
from .test_calculator import UnparsableError, check_text, evaluate
from .variants_cases import ModernCase, modern_cases

BLANK = re.compile(r"^\((\d+)\) _+$")
PER_HEAD = {"W_Q", "b_Q", "Q", "ms_Q", "Q̂", "Q'", "scores", "scaled", "capped", "weights", "output", "W_G", "g", "gated"}
PER_KV = {"W_K", "b_K", "W_V", "b_V", "K", "ms_K", "K̂", "V", "K'"}
Key = tuple[str, int]  # (corner name, head index; 0 for tables of the whole page)
Ref = tuple[Key, int, int]


class MissingError(Exception):
    """A blank needs a cell that is neither printed nor filled earlier on the page."""


def unit(text: str) -> float:
    mantissa, _, exponent = text.lstrip("-").partition("e")
    return float(10.0 ** (int(exponent or 0) - len(mantissa.partition(".")[2])))


def number(text: str) -> float:
    return -math.inf if text == "−∞" else float(text)


def near(value: float, text: str) -> bool:
    if text == "−∞":
        return value == -math.inf
    return abs(value - float(text)) <= unit(text) * (1 + 1e-9) + abs(value) * 1e-12


@dataclass
class Grid:
    corner: str
    heading: str
    rows: list[str]
    cols: list[str]
    cells: list[list[str]]


@dataclass
class Sheet:
    """A printed page: its tables by (name, head), its blanks and its answer key."""

    comp: Computation
    text: str
    grids: dict[Key, Grid] = field(default_factory=dict)
    key: dict[int, str] = field(default_factory=dict)
    blanks: dict[Ref, int] = field(default_factory=dict)
    eps: float | None = None
    qk_eps: float | None = None  # QK-norm's, from its rule

    @classmethod
    def read(cls, comp: Computation, text: str) -> Sheet:
        sheet = cls(comp, text)
        names = [h.name for h in comp.scenario.heads]
        lines = text.splitlines()
        section_head = 0
        seen_kv: set[tuple[str, tuple[int, ...]]] = set()
        for i, line in enumerate(lines):
            found = re.match(r"^## \w[\w -]*?(?: \((.+)\))?$", line)
            if found:
                section_head = names.index(found.group(1)) if found.group(1) in names else 0
            if not (line.startswith("| ") and i + 1 < len(lines) and lines[i + 1].startswith("|---")):
                continue
            heading = lines[i - 2].rstrip(":")
            header = [c.strip() for c in line.strip("| ").split(" | ")]
            rows, cells = [], []
            k = i + 2
            while k < len(lines) and lines[k].startswith("| "):
                parts = [c.strip() for c in lines[k].strip("| ").split(" | ")]
                rows.append(parts[0].strip("*"))
                cells.append(parts[1:])
                k += 1
            grid = Grid(header[0], heading, rows, header[1:], cells)
            if grid.corner == "mask":
                continue
            readers = re.search(r"\(K/V head \d+, read by (.+)\)$", heading)
            own = re.search(r" \(([^()]+)\)$", heading)
            if grid.corner in PER_KV and readers:
                heads = tuple(names.index(n) for n in readers.group(1).split(", "))
                assert (grid.corner, heads) not in seen_kv, f"{grid.corner} of K/V heads {heads} printed twice"
                seen_kv.add((grid.corner, heads))
                for h in heads:
                    sheet.grids[(grid.corner, h)] = grid
            elif grid.corner in PER_HEAD | PER_KV:
                given = grid.corner.startswith(("W_", "b_"))
                h = names.index(own.group(1)) if given and own and own.group(1) in names else section_head
                assert (grid.corner, h) not in sheet.grids, (grid.corner, h)
                sheet.grids[(grid.corner, h)] = grid
            else:
                assert (grid.corner, 0) not in sheet.grids or grid.corner == "cos/sin", grid.corner
                d_k = len(grid.cols)
                sheet.grids[(grid.corner, d_k if grid.corner == "cos/sin" else 0)] = grid
        for found_line in re.finditer(r"^- \((\d+)\) (.*)$", text, re.M):
            sheet.key[int(found_line.group(1))] = found_line.group(2)
        eps = re.search(r"eps = (\S+?)\. ", text)
        sheet.eps = float(eps.group(1)) if eps and "- QK-norm" not in text[:eps.start()].rsplit("\n- ", 1)[-1] else None
        qk_eps = re.search(r"^- QK-norm .*\n  eps = (\S+?)\. ", text, re.M)
        sheet.qk_eps = float(qk_eps.group(1)) if qk_eps else None
        done: set[int] = set()
        for key, grid in sheet.grids.items():
            if id(grid) in done:
                continue
            done.add(id(grid))
            for r, row in enumerate(grid.cells):
                for c, cell in enumerate(row):
                    blank = BLANK.match(cell)
                    if blank:
                        sheet.blanks[(key, r, c)] = int(blank.group(1))
        return sheet

    def canonical(self, key: Key) -> Key:
        """Heads that share a K/V head share one printed table: its first reader names it."""
        grid = self.grids[key]
        return next(k for k, g in self.grids.items() if g is grid)

    def has(self, name: str, h: int = 0) -> bool:
        return (name, h) in self.grids


class Student:
    """Fills the page's blanks in page order, from printed cells and blanks filled before."""

    def __init__(self, sheet: Sheet) -> None:
        self.sheet = sheet
        self.sc = sheet.comp.scenario
        self.known: dict[Ref, float] = {}
        for key, grid in sheet.grids.items():
            for r, row in enumerate(grid.cells):
                for c, cell in enumerate(row):
                    if not BLANK.match(cell):
                        self.known[(sheet.canonical(key), r, c)] = number(cell)

    def get(self, name: str, h: int, r: int, c: int) -> float:
        ref = (self.sheet.canonical((name, h)), r, c)
        if ref not in self.known:
            raise MissingError(ref)
        return self.known[ref]

    def work(self, key: Key, i: int, j: int) -> float:
        """One cell, the way the page's rules say to compute it."""
        name, h = key
        get = self.get
        sc, sheet = self.sc, self.sheet
        if name == "stats":
            width = len(sheet.grids[("X", 0)].cols)
            xs = [get("X", 0, i, c) for c in range(width)]
            column = sheet.grids[key].cols[j]
            if column == "ms":
                return sum(x * x for x in xs) / width
            if column == "mean":
                return sum(xs) / width
            mean = get("stats", 0, i, 0)
            return sum((x - mean) ** 2 for x in xs) / width
        if name == "X̂":
            assert sheet.eps is not None
            layer = sheet.grids[("stats", 0)].cols == ["mean", "var"]
            mean = get("stats", 0, i, 0) if layer else 0.0
            spread = get("stats", 0, i, 1 if layer else 0)
            beta = get("β", 0, 0, j) if sheet.has("β") else 0.0
            return (get("X", 0, i, j) - mean) / math.sqrt(spread + sheet.eps) * get("γ", 0, 0, j) + beta
        if name in ("Q", "K", "V"):
            source = "X_ctx" if sc.is_cross and name != "Q" else ("X̂" if sheet.has("X̂") else "X")
            width = len(sheet.grids[(source, 0)].cols)
            total = sum(get(source, 0, i, c) * get(f"W_{name}", h, c, j) for c in range(width))
            return total + (get(f"b_{name}", h, 0, j) if sheet.has(f"b_{name}", h) else 0.0)
        if name in ("ms_Q", "ms_K"):
            role = name[-1]
            qk = sc.qk_norm
            assert qk is not None
            owners = [h] if qk.over == "head" else (range(len(sc.heads)) if role == "Q" else
                                                    sorted({sc.kv_head(g): g for g in reversed(range(len(sc.heads)))}.values()))
            xs = [get(role, g, i, c) for g in owners for c in range(len(sheet.grids[(role, g)].cols))]
            return sum(x * x for x in xs) / len(xs)
        if name in ("Q̂", "K̂"):
            role = "Q" if name == "Q̂" else "K"
            assert sc.qk_norm is not None and sheet.qk_eps is not None
            d_k = len(sheet.grids[key].cols)
            offset = 0 if sc.qk_norm.over == "head" else (h if role == "Q" else sc.kv_head(h)) * d_k
            gamma = get(f"γ_{role.lower()}", 0, 0, offset + j)
            return get(role, h, i, j) / math.sqrt(get(f"ms_{role}", h, i, 0) + sheet.qk_eps) * gamma
        if name in ("Q'", "K'"):
            assert sc.rope is not None
            d_k = len(sheet.grids[key].cols)
            r = int(d_k * sc.rope.partial)  # partial rotary: the first r dims turn, the rest are copied
            source = name[0] + ("̂" if sc.qk_norm is not None else "")
            if j >= r:
                return get(source, h, i, j)
            half = r // 2
            pairs = [(2 * p, 2 * p + 1) for p in range(half)] if sc.rope.layout == "interleaved" else \
                [(p, p + half) for p in range(half)]
            p = next(n for n, pair in enumerate(pairs) if j in pair)
            a, b = pairs[p]
            cos, sin = get("cos/sin", r, i, 2 * p), get("cos/sin", r, i, 2 * p + 1)
            va, vb = get(source, h, i, a), get(source, h, i, b)
            return va * cos - vb * sin if j == a else va * sin + vb * cos
        if name == "scores":
            q, k = ("Q'", "K'") if sc.rope is not None else ("Q̂", "K̂") if sc.qk_norm is not None else ("Q", "K")
            d_k = len(sheet.grids[(q, h)].cols)
            return sum(get(q, h, i, c) * get(k, h, j, c) for c in range(d_k))
        cap = sc.heads[h].softcap
        if name == "capped":  # c·tanh(scaled / c), then the bias and the mask (docs/scenario-format.md, "softcap")
            assert cap is not None
            if not sc.allow[i, j]:
                return -math.inf
            value = cap * math.tanh(get("scaled", h, i, j) / cap)
            if sheet.has("slope"):
                value += get("slope", 0, 0, h) * (get("position", 0, 0, j) - get("position", 0, 0, i))
            return value
        if name == "scaled":
            d_k = len(sheet.grids[("Q", h)].cols)
            divisor = math.sqrt(d_k) if sc.scale is None else sc.scale
            if cap is not None:  # the bias and the mask come after the cap
                return get("scores", h, i, j) / divisor
            if not sc.allow[i, j]:
                return -math.inf
            value = get("scores", h, i, j) / divisor
            if sheet.has("slope"):
                value += get("slope", 0, 0, h) * (get("position", 0, 0, j) - get("position", 0, 0, i))
            return value
        if name == "weights":
            logits = "capped" if cap is not None else "scaled"
            row = [get(logits, h, i, c) for c in range(sc.m) if sc.allow[i, c]]
            sink = None
            if sheet.has("sink") and sc.heads[h].name in sheet.grids[("sink", 0)].cols:
                sink = get("sink", 0, 0, sheet.grids[("sink", 0)].cols.index(sc.heads[h].name))
            top = max(row) if sink is None else max(*row, sink)
            total = sum(math.exp(v - top) for v in row) + (math.exp(sink - top) if sink is not None else 0.0)
            return 0.0 if not sc.allow[i, j] else math.exp(get(logits, h, i, j) - top) / total
        if name == "output":
            return sum(get("weights", h, i, k) * get("V", h, k, j) for k in range(sc.m))
        if name == "g":  # the output gate: σ(X̂·W_G)
            source = "X̂" if sheet.has("X̂") else "X"
            width = len(sheet.grids[(source, 0)].cols)
            z = sum(get(source, 0, i, c) * get("W_G", h, c, j) for c in range(width))
            return 1 / (1 + math.exp(-z))
        if name == "gated":
            return get("output", h, i, j) * get("g", h, i, j)
        if name == "concat":
            widths = [len(sheet.grids[("output", g)].cols) for g in range(len(sc.heads))]
            g = 0
            while j >= widths[g]:
                j -= widths[g]
                g += 1
            return get("gated" if sheet.has("gated", g) else "output", g, i, j)
        if name == "final":
            source = ("concat", 0) if sheet.has("concat") else ("gated", 0) if sheet.has("gated") else ("output", 0)
            width = len(sheet.grids[source].cols)
            total = sum(get(*source, i, c) * get("W_O", 0, c, j) for c in range(width))
            return total + (get("b_O", 0, 0, j) if sheet.has("b_O") else 0.0)
        raise AssertionError(name)


INPUTS = ("X", "X_ctx", "position", "γ", "β", "γ_q", "γ_k", "W_Q", "b_Q", "W_K", "b_K", "W_V", "b_V", "W_O", "b_O", "slope",
          "sink", "cos/sin", "W_G")


def answer_of(working: str) -> str:
    return working.rsplit(" = ", 1)[1]


def check_line(working: str) -> int:
    """Every side of an answer-key line made of numbers gives the answer within one unit; returns how many did."""
    sides = working.split(" = ")
    answer = sides[-1]
    checked = 0
    for side in sides[1:-1]:
        try:
            value = evaluate(side)
        except (UnparsableError, ValueError):
            continue  # a symbolic side: Q[I]·W_Q[:,0], e^(s − m)
        assert near(float(value), answer), f"{side} = {value}, but the key says {answer}\n  in: {working}"
        checked += 1
    return checked


def check_sheet(comp: Computation, blanks: str, seed: int, decimals: int) -> tuple[Sheet, dict[Ref, float]]:
    text = build(comp, blanks, seed, decimals).markdown()
    sheet = Sheet.read(comp, text)
    full = Sheet.read(comp, build(comp, "0", seed, decimals).markdown())
    sc = comp.scenario
    assert sorted(sheet.blanks.values()) == list(range(1, len(sheet.blanks) + 1)) == sorted(sheet.key)
    # every answer-key line recomputes on a calculator, and its answer is the cell as it would be printed
    for ref, n in sheet.blanks.items():
        working = sheet.key[n]
        assert check_line(working) >= 1, working
        (name, h), r, c = ref
        printed = full.grids[full.canonical((name, h))].cells[r][c]
        assert answer_of(working) == printed, (n, working, printed)
        label = full.grids[(name, h)].cols[c] if name == "stats" else name
        row = full.grids[(name, h)].rows[r]
        assert working.startswith(f"{label}[{row}"), (working, label, row)
    # and the calculator of test_calculator agrees, side by side (a plain sum of printed decimals exactly)
    report = check_text("\n".join(sheet.key.values()))
    assert not report.failures, report.failures[:3]
    # the student fills the blanks in page order, from what is printed and filled before
    student = Student(sheet)
    filled: dict[Ref, float] = {}
    for ref in sorted(sheet.blanks, key=lambda b: sheet.blanks[b]):
        try:
            value = student.work(*ref)
        except MissingError as exc:
            raise AssertionError(f"blank {sheet.blanks[ref]} at {ref} needs {exc}, not printed nor filled before") from None
        answer = answer_of(sheet.key[sheet.blanks[ref]])
        assert near(value, answer), (sheet.key[sheet.blanks[ref]], value)
        filled[ref] = value
        student.known[ref] = number(answer)  # the student checks the key, then works on from its number
    # every computed number on the page recomputes from the printed numbers it is worked from
    checked = 0
    for key, grid in sheet.grids.items():
        if key != sheet.canonical(key) or key[0] in INPUTS:
            continue
        for r, row in enumerate(grid.cells):
            for c, cell in enumerate(row):
                if BLANK.match(cell):
                    continue
                want = student.work(key, r, c)
                assert near(want, cell), (key, r, c, cell, want)
                checked += 1
    # the cos/sin table holds the angles' cos and sin, to its printed digits
    if sc.rope is not None:
        for (name, d_k), grid in sheet.grids.items():
            if name != "cos/sin":
                continue
            # d_k here is the table's width: the rotated dims r (all of d_k without partial rotary)
            thetas = np.array([sc.rope.base ** (-2 * k / d_k) for k in range(d_k // 2)])
            if sc.rope.scaling is not None:  # checked against transformers' own in test_rope_scaling.py
                thetas = sc.rope.scaling.apply(sc.rope.base, d_k, thetas)
            factor = sc.rope.attention_factor
            for r, row in enumerate(grid.cells):
                p = student.get("position", 0, 0, r)
                for c, cell in enumerate(row):
                    angle = p * thetas[c // 2]
                    assert near(factor * (math.cos(angle) if c % 2 == 0 else math.sin(angle)), cell), (r, c, cell)
    assert checked + len(filled) > 0
    return sheet, filled


def engine(comp: Computation, key: Key, r: int, c: int) -> float | None:
    name, h = key
    head = comp.heads[h]
    rot, qkn = head.part(Rotated), head.part(QKNormed)
    arrays = {"Q": head.Q, "K": head.K, "V": head.V, "Q'": None if rot is None else rot.Q_rot,
              "K'": None if rot is None else rot.K_rot, "scores": head.scores,
              "Q̂": None if qkn is None else qkn.Q_norm, "K̂": None if qkn is None else qkn.K_norm,
              "scaled": head.masked if head.part(Capped) is None else head.scaled, "capped": head.masked,
              "weights": head.weights, "output": head.output, "final": comp.output,
              "X̂": comp.norm.X_norm if comp.norm is not None else None}
    array = arrays.get(name)
    return None if array is None else float(array[r, c])


# this page model recomputes the softmax's tables; [linear]'s and [deltanet]'s pages (φ, A, the state token by
# token) are checked by tests/test_linear_attention.py, [mla]'s by tests/test_mla.py, learn_to_look's backward
# tables by tests/test_worksheet_backward.py (mla_learns is mla's sheet with a target), next_token_adamw's by
# tests/test_cross_entropy_worksheet.py
@pytest.mark.parametrize("path", [p for p in SOFTMAX_SCENARIOS
                                  if p.stem not in ("mla", "mla_learns", "learn_to_look", "next_token_adamw")],
                         ids=lambda p: p.stem)
@pytest.mark.parametrize(("blanks", "seed", "decimals"), [("25%", 0, 3), ("100%", 1, 3), ("7", 2, 2), ("60%", 3, 4),
                                                           ("100%", 4, 1)])
def test_every_builtin_worksheet_checks_out(path, blanks: str, seed: int, decimals: int) -> None:
    comp = compute(load_scenario(path))
    sheet, _ = check_sheet(comp, blanks, seed, decimals)
    if decimals != 3:
        return
    for ref, n in sheet.blanks.items():
        exact = engine(comp, ref[0], ref[1], ref[2])
        if exact is None or math.isinf(exact):
            continue
        answer = number(answer_of(sheet.key[n]))
        # the page works from rounded numbers, so it drifts from the engine by a few units at most
        assert abs(answer - exact) <= 0.005 * max(1.0, abs(exact)), (ref, answer, exact)


@pytest.mark.parametrize("path", [p for p in SCENARIOS if p.stem in ("pre_norm", "rope", "rope_layouts", "alibi",
                                                                     "sink", "gqa", "mqa", "sliding_window")],
                         ids=lambda p: p.stem)
def test_each_variant_has_its_tables_and_terms(path) -> None:
    comp = compute(load_scenario(path))
    ws = build(comp, "100%", 0)
    text = ws.markdown()
    sheet = Sheet.read(comp, text)
    key = "\n".join(sheet.key.values())
    sc = comp.scenario
    if sc.norm is not None:
        assert sheet.has("X̂") and sheet.has("stats")
        assert "X̂[I,0] = X[I,0] / √(ms[I] + eps)·γ[0] = 1 / √(0.500 + 1e-05)·1 = 1.414" in key
        assert "Q[I,0] = X̂[I]·W_Q[:,0]" in key
    if sc.rope is not None:
        assert sheet.has("Q'") and sheet.has("K'") and sheet.has("cos/sin", 4)
        assert f"(RoPE, {sc.rope.layout} layout)" in text and "scores[I,I] = Q'[I]·K'[I]" in key
        assert ("Q'[love,0] = Q[love,0]·cos(1·θ₀) − Q[love,1]·sin(1·θ₀) = 0·0.5403 − 2·0.8415 = -1.683" in key) == \
            (sc.rope.layout == "interleaved")
    if ALIBI.of(sc) is not None:
        assert "scaled[cat,the] = scores[cat,the] / √1 + slope·(j − i) = 1 / √1 + 0.5·(0 − 1) = 0.500" in key
    if any(h.sink is not None for h in sc.heads):
        assert re.search(r"\+ e\^\(1 − [\d.]+\)\) = ", key)
        weights = sheet.grids[("weights", 0)]
        full = Sheet.read(comp, build(comp, "0", 0).markdown()).grids[("weights", 0)]
        assert weights is not None and all(sum(float(x) for x in row) < 0.99 for row in full.cells)
    if sc.num_kv_heads is not None:
        readers = len(sc.heads) // sc.num_kv_heads
        assert text.count("\nK = X·W_K (K/V head") == sc.num_kv_heads
        assert text.count("\nV = X·W_V (K/V head") == sc.num_kv_heads
        assert text.count("its K and V are in") == len(sc.heads) - sc.num_kv_heads
        assert readers > 1
    if sc.window is not None:
        assert "mask: sliding" in text


def test_biases_add_their_term() -> None:
    comp = compute(parse_scenario(
        'tokens = ["a", "b"]\nX = [[1, 2], [0, -1]]\n[[heads]]\nW_Q = [[1, 0], [0, 1]]\nW_K = [[1, 0], [0, 1]]\n'
        'W_V = [[1], [1]]\nb_Q = [0.5, -1]\nb_K = [0.25, 0]\nb_V = [1.5]\n[output]\nW_O = [[2]]\nb_O = [-0.5]\n', "b.toml"))
    sheet, _ = check_sheet(comp, "100%", 0, 3)
    key = "\n".join(sheet.key.values())
    assert "Q[a,1] = X[a]·W_Q[:,1] + b_Q[1] = 1·0 + 2·1 + (-1) = 1" in key
    assert "V[b,0] = X[b]·W_V[:,0] + b_V[0] = 0·1 + (-1)·1 + 1.5 = 0.500" in key
    assert re.search(r"final\[a,0\] = output\[a\]·W_O\[:,0\] \+ b_O\[0\] = [\d.]+·2 \+ \(-0\.5\) = ", key)
    assert sheet.has("b_Q") and sheet.has("b_O")


def test_layer_norm_centres_and_shifts() -> None:
    comp = compute(parse_scenario(
        'tokens = ["a", "b"]\nX = [[1, 2, 3], [0, -1, 4]]\n[norm]\nkind = "layer"\ngamma = [1, 2, 0.5]\n'
        'beta = [0, 0.25, -1]\neps = 0.5\n[[heads]]\nW_Q = [[1], [0], [1]]\nW_K = [[1], [1], [0]]\nW_V = [[1], [0], [0]]\n',
        "ln.toml"))
    sheet, _ = check_sheet(comp, "100%", 0, 3)
    key = "\n".join(sheet.key.values())
    assert "mean[a] = (X[a,0] + … + X[a,2]) / 3 = (1 + 2 + 3) / 3 = 2.000" in key
    assert ("var[a] = ((X[a,0] − mean[a])² + … + (X[a,2] − mean[a])²) / 3 = ((1 − 2.000)·(1 − 2.000) + (2 − 2.000)·(2 − 2.000)"
            " + (3 − 2.000)·(3 − 2.000)) / 3 = 0.667") in key
    assert "X̂[a,1] = (X[a,1] − mean[a]) / √(var[a] + eps)·γ[1] + β[1] = (2 − 2.000) / √(0.667 + 0.5)·2 + 0.25 = 0.250" in key


def test_a_real_models_head_is_refused_by_size(cli: Callable[..., Run]) -> None:
    if not MODEL_SCENARIOS:
        pytest.skip("no model scenario shipped")
    pytest.importorskip("glassllm")
    run = cli("--export", "worksheet", MODEL_SCENARIOS[0].stem)
    assert run.code == 2 and run.out == "" and run.err.count("\n") == 1
    assert "too large for a worksheet worked by hand: X has 128 columns" in run.err
    assert "Use --export markdown" in run.err


def test_too_large_names_every_reason() -> None:
    wide = "[" + ", ".join(["1"] * 17) + "]"
    comp = compute(parse_scenario(f'tokens = ["a"]\nX = [{wide}]\n[[heads]]\nW_Q = [{", ".join(["[1]"] * 17)}]\n'
                                  f'W_K = [{", ".join(["[1]"] * 17)}]\nW_V = [{", ".join(["[1]"] * 17)}]\n', "w.toml"))
    with pytest.raises(WorksheetError, match="X has 17 columns"):
        build(comp)


@settings(max_examples=int(__import__("os").environ.get("WS_N", "40")), deadline=None)
@given(modern_cases(), st.sampled_from(["30%", "100%", "3"]), st.integers(0, 5), st.integers(1, 5))
def test_generated_modern_worksheets(case: ModernCase, blanks: str, seed: int, decimals: int) -> None:
    comp = compute(parse_scenario(case.toml, "generated.toml"))
    check_sheet(comp, blanks, seed, decimals)
