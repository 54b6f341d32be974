"""[v_norm] (Gemma 3n's value norm): every value row RMS-normed without a gain, checked against an independent
NumPy computation; the Project stage's cells show the division by each row's root; the TOML export keeps it;
what it cannot go with, and the worksheet, are one line; the cost counts its roots and divisions."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.core.variants import v_norm
from qkv_tui.edges.export_markdown import to_markdown
from qkv_tui.edges.export_toml import to_toml

X = [[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]]
W_Q = [[1, 0, 1, 0], [0, 1, 0, 1], [1, 0, 0, 1], [0, 1, 1, 0]]
W_K = [[0, 0], [1, 1], [0, 1], [1, 0]]
W_V = [[1, 2], [0, 1], [3, 0], [1, 1]]
TEXT = f"""tokens = ["I", "love", "AI"]
X = {X}
mask = "causal"

[attention]
num_heads = 2
num_kv_heads = 1
W_Q = {W_Q}
W_K = {W_K}
W_V = {W_V}

[v_norm]
eps = 0.5
"""


def test_values_are_rms_normed_row_by_row_and_the_heads_read_them() -> None:
    comp = compute(parse_scenario(TEXT, "vn.toml"))
    u = np.array(X, float) @ np.array(W_V, float)  # (3, 2)
    V = u / np.sqrt((u**2).mean(axis=1, keepdims=True) + 0.5)
    Xf, Wq, Wk = np.array(X, float), np.array(W_Q, float), np.array(W_K, float)
    for h, head in enumerate(comp.heads):
        np.testing.assert_allclose(head.V, V, rtol=1e-15)
        s = (Xf @ Wq[:, 2 * h:2 * h + 2]) @ (Xf @ Wk).T / np.sqrt(2)
        s = np.where(np.tril(np.ones((3, 3), bool)), s, -np.inf)
        w = np.exp(s - s.max(axis=1, keepdims=True))
        np.testing.assert_allclose(head.output, (w / w.sum(axis=1, keepdims=True)) @ V, rtol=1e-14)


def test_the_project_stage_divides_each_cell_by_its_rows_root() -> None:
    md = to_markdown(compute(parse_scenario(TEXT, "vn.toml")))
    # row I: X·W_V = [4, 2], mean of squares 10, √(10 + 0.5) = 3.240
    assert "V[I,0] = (X[I]·W_V[:,0]) / rms[I] = (1·1 + 0·0 + 1·3 + 0·1) / 3.240 = 4 / 3.240 = 1.234" in md
    assert "V = RMSNorm(X·W_V), each row divided by √(mean of its squares + eps)" in md


def test_the_toml_export_keeps_the_norm() -> None:
    again = parse_scenario(to_toml(parse_scenario(TEXT, "vn.toml")), "again.toml")
    assert v_norm.TABLE.of(again) == 0.5
    assert v_norm.TABLE.of(parse_scenario(TEXT.replace("eps = 0.5\n", ""), "vn.toml")) == 1e-6  # Gemma 3n's default


@pytest.mark.parametrize(("extra", "needle"), [
    ("[value_scale]\nfactor = 2\n", "[v_norm] cannot be used with [value_scale]: the norm would undo the scale"),
    ("[backward]\ntarget = [[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]\n", "[v_norm] cannot be used with [backward]"),
    ("[v_norm]\neps = 0\n", "[v_norm] eps = 0; expected a finite number > 0"),
])
def test_what_it_cannot_go_with_is_one_line(cli: Any, write: Any, extra: str, needle: str) -> None:
    text = TEXT.replace("[v_norm]\neps = 0.5\n", "") + extra if extra.startswith("[v_norm]") else TEXT + extra
    run = cli("--check", str(write(text)))
    assert run.code == 2 and run.out == "" and run.err.count("\n") == 1, run.err
    assert needle in run.err, run.err


def test_the_worksheet_is_one_line_and_the_cost_counts_roots_and_divisions(cli: Any, write: Any) -> None:
    path = str(write(TEXT))
    run = cli("--export", "worksheet", path)
    assert run.code == 2 and run.err.count("\n") == 1 and "a worksheet of [v_norm] is not written yet" in run.err
    run = cli("--export", "cost", path)
    prefill = next(s for s in json.loads(run.out)["stages"] if s["stage"] == "project" and s["phase"] == "prefill")
    assert prefill["other_ops"] == 3 + 3 * 2  # a root per row of the one K/V head, a division per cell
