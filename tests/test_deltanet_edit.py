"""Editing [deltanet]'s g and β (and the weights that compute them): their own edit targets (dn_g, dn_beta, …:
[norm]'s beta is another array), recomputed, undone, saved keeping the file's comments, reloaded."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import numpy as np
import pytest

from qkv_tui import compute, load_scenario
from qkv_tui.core.cell_edit import EditError, InputCell, edit, input_cells, parse_address, save_text, value_of
from qkv_tui.core.scenario import builtin_dir, parse_scenario
from qkv_tui.kernels.deltanet import DeltaForward
from qkv_tui.ui.app import QKVApp

COMPUTED = '''
[deltanet]
W_a = [[1], [0], [0], [1]]
A_log = [0.5]
dt_bias = [-1]
W_b = [[0], [1], [1], [0]]
'''


def _computed() -> str:
    text = (builtin_dir() / "deltanet.toml").read_text(encoding="utf-8")
    return text.split("[deltanet]")[0] + COMPUTED.lstrip()


def test_every_deltanet_input_is_a_cell_of_its_own() -> None:
    sc = load_scenario("deltanet")
    labels = [c.label(sc) for c in input_cells(sc) if c.matrix.startswith("dn_")]
    assert labels == ["dn_g[I,0]", "dn_g[love,0]", "dn_g[AI,0]", "dn_beta[I,0]", "dn_beta[love,0]", "dn_beta[AI,0]"]
    weights = parse_scenario(_computed(), "w.toml")
    assert [c.label(weights) for c in input_cells(weights) if c.matrix.startswith("dn_")] == [
        "dn_W_a[0,0]", "dn_W_a[1,0]", "dn_W_a[2,0]", "dn_W_a[3,0]", "dn_A_log[0]", "dn_dt_bias[0]",
        "dn_W_b[0,0]", "dn_W_b[1,0]", "dn_W_b[2,0]", "dn_W_b[3,0]"]


@pytest.mark.parametrize("typed,label", [("g[love,0] = -1", "dn_g[love,0]"), ("dn_g[2,0] = -2", "dn_g[AI,0]"),
                                         ("beta[I,0] = 0.25", "dn_beta[I,0]"), ("dn_beta[love,0] = 0", "dn_beta[love,0]")])
def test_the_prompt_takes_the_files_names_and_the_targets(typed: str, label: str) -> None:
    sc = load_scenario("deltanet")
    cell, value = parse_address(sc, typed)
    assert cell is not None and cell.label(sc) == label
    new, comp = edit(sc, cell, value)
    assert value_of(new, cell) == float(value)
    assert not np.array_equal(comp.heads[0].output, edit(sc, cell, str(value_of(sc, cell)))[1].heads[0].output)


def test_beta_with_one_index_is_still_the_norms() -> None:
    text = (builtin_dir() / "deltanet.toml").read_text(encoding="utf-8")
    text = text.replace('mask = "causal"\n', 'mask = "causal"\n[norm]\nkind = "layer"\n', 1)
    sc = parse_scenario(text, "n.toml")
    assert parse_address(sc, "beta[1] = 0.5")[0] == InputCell("beta", None, 0, 1)
    assert parse_address(sc, "beta[love,0] = 0.5")[0] == InputCell("dn_beta", None, 1, 0)


def test_a_positive_g_is_refused_in_one_line() -> None:
    sc = load_scenario("deltanet")
    cell, value = parse_address(sc, "g[I,0] = 0.5")
    assert cell is not None
    with pytest.raises(EditError, match=r"^g = 0.5; expected g <= 0 \(a log decay"):
        edit(sc, cell, value)


@pytest.mark.parametrize("typed,key,where", [("W_a[3,0] = 2", "W_a", (3, 0)), ("A_log[0] = -1", "A_log", (0,)),
                                             ("dt_bias[0] = 0.5", "dt_bias", (0,)), ("W_b[1,0] = -3", "W_b", (1, 0))])
def test_the_weights_edit_recompute_and_save(typed: str, key: str, where: tuple[int, ...]) -> None:
    text = _computed()
    sc = parse_scenario(text, "w.toml")
    cell, value = parse_address(sc, typed)
    assert cell is not None
    new, comp = edit(sc, cell, value)
    before = edit(sc, cell, str(value_of(sc, cell)))[1]
    moved = comp.heads[0].part(DeltaForward)
    assert moved is not None and before.heads[0].part(DeltaForward) is not None
    gate = moved.beta if key == "W_b" else moved.g
    was = before.heads[0].need(DeltaForward)
    assert not np.array_equal(gate, was.beta if key == "W_b" else was.g)
    saved = tomllib.loads(save_text(text, new, [cell]))["deltanet"][key]
    for i in where:
        saved = saved[i]
    assert saved == float(value)


# --- the app ---------------------------------------------------------------------------------


async def _type(pilot, text: str | None = None) -> None:  # type: ignore[no-untyped-def]
    await pilot.press("e")
    await pilot.pause()
    if text is not None:
        pilot.app.screen.query_one("#edit-input").value = text
        await pilot.press("enter")
        await pilot.pause()


async def test_editing_g_in_the_app_changes_the_state_undoes_saves_and_reloads(tmp_path: Path) -> None:
    path = tmp_path / "deltanet.toml"
    shutil.copy(builtin_dir() / "deltanet.toml", path)
    app = QKVApp(str(path))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("4", "right")  # the Delta stage: the decay S' = S·e^g of the first token
        await _type(pilot)
        assert app.screen.cell.matrix == "dn_g"  # e offers the g the operation reads
        await pilot.press("escape")
        before = app.comp.heads[0].part(DeltaForward)
        assert before is not None
        await _type(pilot, "g[love,0] = -2")
        after = app.comp.heads[0].part(DeltaForward)
        assert after is not None and float(app.scenario.deltanet.g[1, 0]) == -2.0
        assert not np.array_equal(after.S, before.S) and not np.array_equal(after.output, before.output)
        assert np.array_equal(after.S[0], before.S[0])  # the first token's state is older than the edit
        await pilot.press("u")
        assert float(app.scenario.deltanet.g[1, 0]) == -0.5
        assert np.array_equal(app.comp.heads[0].part(DeltaForward).S, before.S)
        await _type(pilot, "beta[AI,0] = 0.75")
        await _type(pilot, "g[love,0] = -2")
        await pilot.press("ctrl+s")
        await pilot.pause()
    text = path.read_text(encoding="utf-8")
    assert "# I" in text and "# love" in text  # the comments kept
    data = tomllib.loads(text)["deltanet"]
    assert data["g"] == [[-0.5], [-2], [-0.5]] and data["beta"] == [[1.0], [0.5], [0.75]]
    again = QKVApp(str(path))
    async with again.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        dn = again.comp.heads[0].part(DeltaForward)
        assert dn is not None and float(again.scenario.deltanet.g[1, 0]) == -2.0
        assert np.array_equal(dn.output, compute(parse_scenario(text, 'saved.toml')).heads[0].output)
        assert float(again.scenario.deltanet.beta[2, 0]) == 0.75
