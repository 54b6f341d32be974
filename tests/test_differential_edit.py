"""Editing [differential]'s λ vectors (every cell of every one, a row per head) and the sub-norm's gains
(``gamma_sub``: [norm]'s is ``gamma``), recomputed, refused in one line where e^ would overflow, written back into
the file keeping its comments, and read back to the same numbers (core/variants/differential_edit.py)."""

from __future__ import annotations

import math
import shutil
import tomllib
from pathlib import Path

import numpy as np
import pytest

from qkv_tui import compute
from qkv_tui.core.cell_edit import EditError, changed_cells, edit, input_cells, parse_address, save_text
from qkv_tui.core.scenario import builtin_dir, parse_scenario
from qkv_tui.core.variants.differential import TABLE as DIFFERENTIAL
from qkv_tui.kernels.differential import DiffForward
from qkv_tui.ui.app import QKVApp

LAMBDAS = ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2")


def _text(gains: bool = True) -> str:
    text = (builtin_dir() / "differential.toml").read_text(encoding="utf-8")
    return text + ("gamma = [1, 1.5, 0.5, 1]   # the sub-norm's gains\n" if gains else "")


def test_every_lambda_cell_and_gain_is_an_input_cell() -> None:
    sc = parse_scenario(_text(), "d.toml")
    mine = [c for c in input_cells(sc) if c.matrix in (*LAMBDAS, "gamma_sub")]
    assert [c.label(sc) for c in mine] == [f"{k}[{r},{c}]" for k in LAMBDAS for r in range(2) for c in range(2)] + [
        f"gamma_sub[{i}]" for i in range(4)]
    assert not [c for c in input_cells(parse_scenario(_text(False), "d.toml")) if c.matrix == "gamma_sub"]


@pytest.mark.parametrize("key", LAMBDAS)
@pytest.mark.parametrize(("row", "col"), [(0, 0), (1, 1)])
def test_each_lambda_cell_moves_lambda_as_the_formula_says(key: str, row: int, col: int) -> None:
    sc = parse_scenario(_text(), "d.toml")
    cell, value = parse_address(sc, f"{key}[{row},{col}] = 0.75")
    assert cell is not None and (cell.matrix, cell.row, cell.col) == (key, row, col)
    new, comp = edit(sc, cell, value)
    df = DIFFERENTIAL.of(new)
    assert df is not None and float(getattr(df, key)[row, col]) == 0.75
    lam = comp.heads[row].need(DiffForward).lam.value
    want = (math.exp(float(df.lambda_q1[row] @ df.lambda_k1[row])) - math.exp(float(df.lambda_q2[row] @ df.lambda_k2[row]))
            + df.lambda_init)
    assert lam == pytest.approx(want, rel=1e-12)
    other = comp.heads[1 - row].need(DiffForward).lam.value  # the other head's row is untouched
    assert other == compute(sc).heads[1 - row].need(DiffForward).lam.value
    text = save_text(_text(), new, changed_cells(sc, new))
    back = parse_scenario(text, "saved.toml")
    assert DIFFERENTIAL.of(back) is not None
    for k in LAMBDAS:
        np.testing.assert_array_equal(getattr(DIFFERENTIAL.of(back), k), getattr(df, k))
    assert "# the sub-norm's gains" in text and "# [K₁ | K₂]" in text  # the file's comments kept


def test_a_gain_edit_writes_differentials_own_gamma() -> None:
    sc = parse_scenario(_text(), "d.toml")
    cell, value = parse_address(sc, "gamma_sub[2] = 2")
    new, comp = edit(sc, cell, value)
    assert DIFFERENTIAL.of(new) is not None and DIFFERENTIAL.of(new).gamma is not None
    assert float(DIFFERENTIAL.of(new).gamma[2]) == 2.0 and new.norm is None
    text = save_text(_text(), new, changed_cells(sc, new))
    assert tomllib.loads(text)["differential"]["gamma"] == [1, 1.5, 2, 1]
    np.testing.assert_array_equal(compute(parse_scenario(text, "s.toml")).output, comp.output)


def test_an_edit_whose_exponential_overflows_is_one_line() -> None:
    sc = parse_scenario(_text(), "d.toml")
    for text in ("lambda_k1[1,0] = 0", "lambda_q1[1,0] = 1e4"):  # λ_q1·λ_k1 = 1e4 · 0 = 0 still
        sc, _ = edit(sc, *parse_address(sc, text))  # type: ignore[arg-type]
    with pytest.raises(EditError) as caught:  # then 1e4 · 1: e^10000 is past float64
        edit(sc, *parse_address(sc, "lambda_k1[1,0] = 1"))  # type: ignore[arg-type]
    assert "overflows float64" in str(caught.value) and "\n" not in str(caught.value)


def test_the_first_edit_past_float64_is_refused_too() -> None:
    sc = parse_scenario(_text(), "d.toml")
    with pytest.raises(EditError) as caught:
        edit(sc, *parse_address(sc, "lambda_k1[1,0] = 1e4"))  # type: ignore[arg-type]  # 0.5 · 1e4 = 5000
    assert "lambda_q1·lambda_k1 of head 2 would be 5000" in str(caught.value)


async def test_editing_a_lambda_vector_in_the_app_recomputes_saves_and_reloads(tmp_path: Path) -> None:
    path = tmp_path / "differential.toml"
    shutil.copy(builtin_dir() / "differential.toml", path)
    app = QKVApp(str(path))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        before = app.comp.heads[1].need(DiffForward)
        await pilot.press("e")
        await pilot.pause()
        app.screen.query_one("#edit-input").value = "lambda_q2[1,1] = -0.5"
        await pilot.press("enter")
        await pilot.pause()
        after = app.comp.heads[1].need(DiffForward)
        assert float(DIFFERENTIAL.of(app.scenario).lambda_q2[1, 1]) == -0.5
        assert after.lam.value == pytest.approx(math.exp(0.1) - math.exp(0.1) + 0.2)  # e^(−0.5·−0.2) = e^0.1
        assert not np.array_equal(after.weights, before.weights)
        await pilot.press("u")
        assert float(DIFFERENTIAL.of(app.scenario).lambda_q2[1, 1]) == 0.5
        await pilot.press("e")
        await pilot.pause()
        app.screen.query_one("#edit-input").value = "lambda_q2[1,1] = -0.5"
        await pilot.press("enter")
        await pilot.pause()
        await pilot.press("ctrl+s")
        await pilot.pause()
    text = path.read_text(encoding="utf-8")
    assert tomllib.loads(text)["differential"]["lambda_q2"] == [[0, 0], [0, -0.5]]
    assert "# the paper's λ_init at layer 0" in text
    again = QKVApp(str(path))
    async with again.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert again.comp.heads[1].need(DiffForward).lam.value == pytest.approx(0.2)
