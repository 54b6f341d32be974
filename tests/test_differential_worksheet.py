"""The worksheet of a differential head (teach/stages/differential_sheet.py): read from the Markdown page itself, as a
student with a calculator would.

With nothing blank, every printed number of a differential table is recomputed here from the printed numbers before
it, with loops written from contracts §14 (each map's half of Q and K, √d, the softmax, λ from the printed λ vectors,
p₁ − λ·p₂, weights·V, the RMS sub-norm, the (1 − λ_init) factor), within one unit of its last digit; with every cell
blank, each answer-key line's printed numbers give its answer on a calculator; and the answers stay within a few units
of the engine's exact numbers. What has no page yet is one line.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from qkv_tui import compute
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.core.variants.differential import TABLE as DIFFERENTIAL
from qkv_tui.edges.worksheet.make import WorksheetError, build
from qkv_tui.kernels.differential import DiffForward

from .test_worksheet import answer_of, evaluate, number, parse_page, unit

BUILTIN = Path(__file__).resolve().parents[1] / "scenarios" / "differential.toml"
GQA = '''
tokens = ["a", "b", "c", "d"]
X = [[1, 0, 1], [0, 1, 0], [1, 1, 0], [0, 1, 1]]
mask = "causal"

[norm]
kind = "rms"
gamma = [1, 0.5, 2]

[attention]
num_heads = 2
num_kv_heads = 1
W_Q = [[1, 0, 0.5, 0, 0, 1, 0, -0.5], [0, 1, 0, 0.5, 1, 0, 0.5, 0], [0.5, 0, 1, 0, 0, 0.5, 1, 0]]
W_K = [[1, 0, 0, 1], [0, 1, 1, 0], [0.5, 0.5, 0, 0]]
W_V = [[1, 0, 0, 1], [0, 1, 0, 0], [0, 0, 1, 1]]

[output]
W_O = [[1, 0], [0, 1], [1, 1], [0, 0], [1, 0], [0, 1], [0.5, 0.5], [1, -1]]

[differential]
lambda_q1 = [[0.3, -0.2], [0.1, 0.4]]
lambda_k1 = [[0.5, 0.1], [-0.3, 0.2]]
lambda_q2 = [[0.2, 0.2], [0.4, -0.1]]
lambda_k2 = [[-0.1, 0.3], [0.2, 0.2]]
layer = 1
gamma = [1, 1.2, 0.8, 1.1]
'''
CASES = {"builtin": BUILTIN.read_text(encoding="utf-8"), "gqa_norm_gains": GQA}
PER_HEAD = ("Q", "K", "V", "scores₁", "scaled₁", "p₁", "scores₂", "scaled₂", "p₂", "λ vectors", "λ", "weights",
            "mixed", "ms", "normed", "output")


def _tables(page: str, heads: int) -> tuple[dict[str, list[list[str]]], dict[int, str]]:
    """The page's tables by corner, ``name.h`` for a head's (in page order: head 0's section, then head 1's)."""
    parsed, key = parse_page(page)
    seen: dict[str, int] = {}
    out: dict[str, list[list[str]]] = {}
    for corner, grid in parsed:
        if corner in PER_HEAD:
            n = seen.get(corner, 0)
            seen[corner] = n + 1
            # K and V print once per K/V head: under grouped heads the second head reads the first's
            out[f"{corner}.{n}"] = grid
        else:
            out[corner] = grid
    assert all(seen.get(name, 0) in (0, heads) or name in ("K", "V") for name in PER_HEAD), seen
    return out, key


def _num(grid: list[list[str]]) -> np.ndarray:
    return np.array([[number(c) for c in row] for row in grid])


def _close(printed: list[list[str]], want: np.ndarray, what: str) -> None:
    for i, row in enumerate(printed):
        for j, cell in enumerate(row):
            if cell == "−∞":
                assert want[i, j] == -math.inf, (what, i, j)
                continue
            assert abs(float(cell) - want[i, j]) <= unit(cell) + 1e-9, (what, i, j, cell, want[i, j])


@pytest.mark.parametrize("name", list(CASES))
def test_every_printed_number_recomputes_from_the_page(name: str) -> None:
    sc = parse_scenario(CASES[name], f"{name}.toml")
    df = DIFFERENTIAL.of(sc)
    assert df is not None
    page = build(compute(sc), "0", 0).markdown()
    t, _ = _tables(page, len(sc.heads))
    d = df.d
    for h in range(len(sc.heads)):
        g = 0 if "K.1" not in t else h  # grouped: one K/V head, printed once
        Q, K, V = _num(t[f"Q.{h}"]), _num(t[f"K.{g}"]), _num(t[f"V.{g}"])
        maps = []
        for a, cols in ((1, slice(0, d)), (2, slice(d, 2 * d))):
            s = "₁" if a == 1 else "₂"
            _close(t[f"scores{s}.{h}"], Q[:, cols] @ K[:, cols].T, f"scores{s}")
            scaled = np.where(sc.allow, _num(t[f"scores{s}.{h}"]) / math.sqrt(d), -math.inf)
            _close(t[f"scaled{s}.{h}"], scaled, f"scaled{s}")
            printed = _num(t[f"scaled{s}.{h}"])
            e = np.where(sc.allow, np.exp(printed - printed.max(axis=1, keepdims=True)), 0.0)
            _close(t[f"p{s}.{h}"], e / e.sum(axis=1, keepdims=True), f"p{s}")
            maps.append(_num(t[f"p{s}.{h}"]))
        vec = _num(t[f"λ vectors.{h}"])
        np.testing.assert_array_equal(vec, np.stack([getattr(df, k)[h] for k in
                                                     ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2")]))
        lam = _num(t[f"λ.{h}"])[0]
        _close(t[f"λ.{h}"], np.array([[vec[0] @ vec[1], math.exp(lam[0]), vec[2] @ vec[3], math.exp(lam[2]),
                                        lam[1] - lam[3] + df.lambda_init]]), "λ")
        _close(t[f"weights.{h}"], np.where(sc.allow, maps[0] - lam[4] * maps[1], 0.0), "weights")
        _close(t[f"mixed.{h}"], _num(t[f"weights.{h}"]) @ V, "mixed")
        mixed = _num(t[f"mixed.{h}"])
        _close(t[f"ms.{h}"], (mixed * mixed).mean(axis=1, keepdims=True), "ms")
        gains = np.ones(2 * d) if df.gamma is None else df.gamma
        _close(t[f"normed.{h}"], mixed / np.sqrt(_num(t[f"ms.{h}"]) + df.eps) * gains, "normed")
        factor = round(1 - df.lambda_init, 3)
        _close(t[f"output.{h}"], factor * _num(t[f"normed.{h}"]), "output")


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("decimals", [2, 3])
def test_every_key_line_checks_out_and_stays_near_the_engine(name: str, decimals: int) -> None:
    comp = compute(parse_scenario(CASES[name], f"{name}.toml"))
    page = build(comp, "100%", 1, decimals).markdown()
    _, key = _tables(page, len(comp.heads))
    checked = 0
    for line in key.values():
        answer = answer_of(line)
        for step in line.split(" = ")[1:-1]:
            if re.search(r"[A-Za-z_]\[", step):
                continue
            assert abs(evaluate(step) - number(answer)) <= unit(answer) + 1e-9, (line, step)
            checked += 1
    assert checked > 200
    # the differential tables' answers against the engine's exact numbers (the page drifts by a few units)
    for line in key.values():
        found = re.match(r"(p₁|p₂|weights|output)\[(\w+),(\w+)\]", line)
        if found is None:
            continue
        head = _head_of(page, line)
        f = comp.heads[head].need(DiffForward)
        exact = {"p₁": f.map_1.weights, "p₂": f.map_2.weights, "weights": f.weights, "output": f.output}[found.group(1)]
        row = comp.scenario.labels.index(found.group(2))
        col = (comp.scenario.key_labels.index(found.group(3)) if found.group(1) != "output" else int(found.group(3)))
        assert abs(number(answer_of(line)) - float(exact[row, col])) <= 30 * 10.0 ** -decimals, line


def _head_of(page: str, line: str) -> int:
    """The head whose section holds the blank the key line answers (its number, in page order)."""
    n = int(re.search(r"^- \((\d+)\) " + re.escape(line) + "$", page, re.M).group(1))  # type: ignore[union-attr]
    body = page.split("## Answer key")[0] if "## Answer key" in page else page
    at = body.index(f"({n}) ")
    sections = [m for m in re.finditer(r"^## .*\((plain head|tilted head|head 1|head 2)\)$", body, re.M) if m.start() < at]
    return 0 if not sections or sections[-1].group(1) in ("plain head", "head 1") else 1


@pytest.mark.parametrize(("extra", "needle"), [
    ('\n[rope]\nlayout = "half"\n', "with [rope] (each half turned on its own) is not written yet"),
    ("\nsoftcap = 3\n", "with a soft-cap is not written yet"),
])
def test_what_has_no_page_yet_is_one_line(cli, tmp_path: Path, extra: str, needle: str) -> None:
    text = BUILTIN.read_text(encoding="utf-8")
    head, _, rest = text.partition("[[heads]]")
    path = tmp_path / "d.toml"
    path.write_text(head + extra + "\n[[heads]]" + rest, encoding="utf-8")
    with pytest.raises(WorksheetError, match=re.escape(needle)):
        build(compute(parse_scenario(path.read_text(encoding="utf-8"), str(path))))
    run = cli("--export", "worksheet", str(path))
    assert run.code == 2 and run.err.count("\n") == 1 and needle in run.err, run.err


def test_with_backward_the_page_reads_the_differential_heads_backwards() -> None:
    """tests/test_differential_worksheet_backward.py checks the backward tables' numbers and lines."""
    text = BUILTIN.read_text(encoding="utf-8") + (
        "\n[backward]\ntarget = [[0, 0, 0, 0, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0, 0, 0], [0, 0, 0, 1, 0, 0, 0, 0]]\n")
    page = build(compute(parse_scenario(text, "d.toml")), "30%", 0).markdown()
    assert "not written yet" not in page
    assert "## Subtract" in page and "dW_Q" in page and "dλ vectors" in page


def test_the_html_and_typst_pages_print_the_differential_tables() -> None:
    from qkv_tui.edges.worksheet.render import html, typst
    from qkv_tui.edges.worksheet.sheet import sheet

    page = sheet(build(compute(parse_scenario(CASES["gqa_norm_gains"], "g.toml")), "30%", 2))
    for out in (html.render(page), typst.source(page)):
        assert "λ" in out and "p₁" in out and "mixed" in out and "Sub-norm" in out
