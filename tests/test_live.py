"""The live instrument: edit (each kind of input), undo, save, reload, the palette, screenshots,
autoplay and themes. Pilot tests drive the app by its keys; timers are called, never waited for."""

from __future__ import annotations

import difflib
import math
import shutil
import tomllib
from pathlib import Path

import numpy as np
import pytest
from rich.style import Style

from qkv_tui import load_scenario
from qkv_tui.core.cell_edit import EditError, InputCell, apply_edit, edit, input_cells, parse_address, parse_number, save_text
from qkv_tui.core.scenario import builtin_dir
from qkv_tui.edges import config
from qkv_tui.ui import themes
from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.edit_prompt import DropEditsScreen, EditScreen, ReloadScreen
from qkv_tui.ui.widgets.matrix import MatrixView

from .conftest import ROOT, notices

SIZE = (120, 40)


def copy(tmp_path: Path, name: str = "i_love_ai") -> Path:
    target = tmp_path / f"my_{name}.toml"
    shutil.copy(ROOT / "scenarios" / f"{name}.toml", target)
    return target


def attention_by_loops(X, W_Q, W_K, W_V, allow, scale):
    """One head with plain loops: the reference every edit is checked against."""
    n, m = len(X), len(X)
    Q = [[sum(X[i][k] * W_Q[k][c] for k in range(len(W_Q))) for c in range(len(W_Q[0]))] for i in range(n)]
    K = [[sum(X[j][k] * W_K[k][c] for k in range(len(W_K))) for c in range(len(W_K[0]))] for j in range(m)]
    V = [[sum(X[j][k] * W_V[k][c] for k in range(len(W_V))) for c in range(len(W_V[0]))] for j in range(m)]
    out = []
    for i in range(n):
        s = [sum(a * b for a, b in zip(Q[i], K[j])) / scale if allow[i][j] else -math.inf for j in range(m)]
        top = max(s)
        e = [math.exp(v - top) for v in s]
        out.append([sum(e[j] / sum(e) * V[j][c] for j in range(m)) for c in range(len(V[0]))])
    return np.array(out)


# --- the pure edit ---------------------------------------------------------------------------


def test_an_edited_x_recomputes_everything_downstream() -> None:
    sc = load_scenario("i_love_ai")
    new, comp = edit(sc, InputCell("X", None, 1, 0), "3")
    X = sc.X.tolist()
    X[1][0] = 3.0
    head = sc.heads[0]
    want = attention_by_loops(X, head.W_Q.tolist(), head.W_K.tolist(), head.W_V.tolist(), sc.allow.tolist(), math.sqrt(3))
    assert np.allclose(comp.output, want)
    assert sc.X[1, 0] == 0 and new.X[1, 0] == 3  # the original is untouched


@pytest.mark.parametrize(("name", "cell", "check"), [
    ("cross_attention", InputCell("context_X", None, 0, 1), lambda s: s.context_X[0, 1]),
    ("two_heads", InputCell("W_Q", 1, 0, 1), lambda s: s.heads[1].W_Q[0, 1]),
    ("two_heads", InputCell("W_K", 0, 2, 0), lambda s: s.heads[0].W_K[2, 0]),
    ("split_heads", InputCell("W_V", 1, 3, 0), lambda s: s.heads[1].W_V[3, 0]),
    ("two_heads", InputCell("W_O", None, 4, 1), lambda s: s.W_O[4, 1]),
    ("i_love_ai", InputCell("scale"), lambda s: s.scale),
])
def test_each_kind_of_input(name: str, cell: InputCell, check) -> None:
    sc = load_scenario(name)
    new, comp = edit(sc, cell, "-1.5" if cell.matrix != "scale" else "2.5")
    assert check(new) == (-1.5 if cell.matrix != "scale" else 2.5)
    assert cell in input_cells(sc)
    if cell.matrix == "scale":
        assert comp.heads[0].scale == 2.5 and np.allclose(comp.heads[0].scaled, comp.heads[0].scores / 2.5)


def test_a_mask_cell_toggles() -> None:
    sc = load_scenario("causal_mask")
    new, comp = edit(sc, InputCell("mask", None, 0, 2), "1")
    assert new.allow[0, 2] and new.mask_kind == "custom"
    assert comp.heads[0].weights[0, 2] > 0
    with pytest.raises(EditError, match="attend no key"):
        apply_edit(sc, InputCell("mask", None, 0, 0), "0")  # I sees only itself: masking it leaves nothing


@pytest.mark.parametrize("text", ["abc", "", "2²", "nan", "inf", "1e999", "1,5", "--1"])
def test_bad_numbers_are_one_line_reasons(text: str) -> None:
    with pytest.raises(EditError) as caught:
        parse_number(text)
    assert "\n" not in str(caught.value) and str(caught.value)


def test_scale_must_be_positive() -> None:
    with pytest.raises(EditError, match="> 0"):
        apply_edit(load_scenario("i_love_ai"), InputCell("scale"), "0")


def test_addresses() -> None:
    sc = load_scenario("two_heads")
    assert parse_address(sc, "2") == (None, "2")
    assert parse_address(sc, "X[love,3] = 7") == (InputCell("X", None, 1, 3), " 7")
    assert parse_address(sc, "W_K[1,0] (head 2) = 1")[0] == InputCell("W_K", 1, 1, 0)
    assert parse_address(sc, "scale=1")[0] == InputCell("scale")
    assert parse_address(sc, "mask[AI,I] = 0")[0] == InputCell("mask", None, 2, 0)
    for bad in ("Q[0,0] = 1", "X[nobody,0] = 1", "X[0,9] = 1", "W_Q[0,0] (head 9) = 1", "X = 1"):
        with pytest.raises(EditError):
            parse_address(sc, bad)


@pytest.mark.parametrize(("name", "cell"), [
    ("i_love_ai", InputCell("X", None, 1, 0)),
    ("two_heads", InputCell("W_V", 1, 0, 0)),
    ("split_heads", InputCell("W_K", 1, 2, 1)),
    ("two_heads", InputCell("W_O", None, 0, 0)),
    ("cross_attention", InputCell("context_X", None, 2, 2)),
    ("causal_mask", InputCell("mask", None, 1, 2)),
    ("padding_mask", InputCell("mask", None, 0, 3)),
    ("custom_mask", InputCell("mask", None, 0, 2)),
    ("i_love_ai", InputCell("scale")),
])
def test_save_round_trip_keeps_comments(name: str, cell: InputCell) -> None:
    path = ROOT / "scenarios" / f"{name}.toml"
    original = path.read_text(encoding="utf-8")
    sc = load_scenario(path)
    new = apply_edit(sc, cell, "1" if cell.matrix == "mask" else "0.25")
    text = save_text(original, new, [cell])
    again = load_scenario_text(text)
    assert np.array_equal(again.X, new.X) and np.array_equal(again.allow, new.allow)
    for a, b in zip(again.heads, new.heads):
        assert all(np.array_equal(getattr(a, r), getattr(b, r)) for r in ("W_Q", "W_K", "W_V"))
    assert again.scale == new.scale
    if new.W_O is not None:
        assert np.array_equal(again.W_O, new.W_O)
    if new.context_X is not None:
        assert np.array_equal(again.context_X, new.context_X)
    comments = [line for line in original.splitlines() if line.lstrip().startswith("#") or "  # " in line]
    for line in comments:
        if cell.matrix != "mask" or "mask" not in line:
            assert line.split("#", 1)[1] in text  # every comment survives
    diff = [d for d in difflib.ndiff(original.splitlines(), text.splitlines()) if d[:1] in "+-"]
    assert len(diff) <= 4, diff  # only the edited line changes (or the one line a new key takes)


def load_scenario_text(text: str):
    from qkv_tui.core.scenario import parse_scenario

    return parse_scenario(text, "saved.toml")


def test_save_refuses_a_model_scenario() -> None:
    sc = load_scenario("i_love_ai")
    with pytest.raises(EditError, match="model"):
        save_text('[model]\nsource = "glassllm:en"\ntext = "hi"\n', sc, [InputCell("X", None, 0, 0)])


# --- the app: edit, undo, save -----------------------------------------------------------------


async def type_edit(pilot, text: str) -> None:
    await pilot.press("e")
    await pilot.pause()
    field = pilot.app.screen.query_one("#edit-input")
    field.value = text
    await pilot.press("enter")
    await pilot.pause()


async def test_edit_in_the_app_keeps_the_position_and_marks_changes(tmp_path: Path) -> None:
    app = QKVApp(str(copy(tmp_path)))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3", "right")  # scores[I,love], which reads Q[I] and K[love]
        before = app.position
        await type_edit(pilot, "X[love,0] = 3")
        assert app.position == before
        assert app.scenario.X[1, 0] == 3
        assert app.comp.heads[0].scores[0, 1] == 8  # Q[I]·K[love] = 2·2 + 0·1 + 1·4
        screen = app.live.mark(app.presenter.frame(app.position, app.modes))
        marked = {p.key: p.changed for p in screen.focus + screen.extra}
        assert (0, 1) in marked["scores@0"] and (1, 0) in marked["X@None"]
        assert "edited" in str(app.query_one("FormulaLine").render())
        await pilot.press("right")  # the marks last until the next step
        screen = app.live.mark(app.presenter.frame(app.position, app.modes))
        assert not any(p.changed for p in screen.focus + screen.extra)


async def test_bad_input_changes_nothing(tmp_path: Path) -> None:
    app = QKVApp("causal_mask")
    async with app.run_test(size=SIZE) as pilot:
        comp = app.comp
        await type_edit(pilot, "abc")
        assert isinstance(app.screen, EditScreen)
        assert "not a number" in str(app.screen.query_one("#edit-error").render())
        app.screen.query_one("#edit-input").value = "mask[I,I] = 0"
        await pilot.press("enter")
        await pilot.pause()
        assert "attend no key" in str(app.screen.query_one("#edit-error").render())
        await pilot.press("escape")
        await pilot.pause()
        assert app.comp is comp and not app.live.dirty


async def test_arrow_keys_move_among_input_cells() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2", "right")  # Q[I,1] reads X[I] and W_Q[:,1]
        await pilot.press("e")
        await pilot.pause()
        assert app.screen.cell == InputCell("X", None, 0, 0)
        await pilot.press("down", "down", "up")
        assert app.screen.cell == InputCell("X", None, 0, 1)
        assert app.screen.query_one("#edit-input").value == "0"
        await pilot.press("up", "up")
        assert app.screen.cell == input_cells(app.scenario)[-1]  # wraps round to the last mask cell


async def test_enter_on_the_offered_value_changes_nothing() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4", "e")  # the Scale stage offers the scale: √3, every digit
        await pilot.pause()
        assert app.screen.query_one("#edit-input").value == repr(math.sqrt(3))
        await pilot.press("enter")
        await pilot.pause()
        assert not isinstance(app.screen, EditScreen)
        assert not app.live.undo_stack and not app.live.dirty and app.scenario.scale is None


async def test_undo_as_many_times_as_edits(tmp_path: Path) -> None:
    app = QKVApp(str(copy(tmp_path)))
    async with app.run_test(size=SIZE) as pilot:
        original = app.comp.output.copy()
        await type_edit(pilot, "X[I,0] = 2")
        await type_edit(pilot, "W_V[0,0] = 5")
        await type_edit(pilot, "scale = 1")
        assert app.scenario.scale == 1
        await pilot.press("u")
        assert app.scenario.scale is None and app.scenario.heads[0].W_V[0, 0] == 5
        await pilot.press("u", "u")
        assert np.array_equal(app.comp.output, original)
        await pilot.press("u")  # nothing left: says so, changes nothing
        assert np.array_equal(app.comp.output, original)


async def test_save_writes_the_file_keeping_comments(tmp_path: Path) -> None:
    path = copy(tmp_path)
    app = QKVApp(str(path))
    async with app.run_test(size=SIZE) as pilot:
        await type_edit(pilot, "X[love,0] = 2.5")
        await type_edit(pilot, "W_Q[0,0] = 4")
        await type_edit(pilot, "X[I,3] = 1")
        await pilot.press("u")  # undone before saving: the file keeps its value
        await pilot.press("ctrl+s")
        await pilot.pause()
        text = path.read_text()
        assert "[2.5, 1, 0, 1],   # love" in text and "# I" in text and "# AI" in text
        assert tomllib.loads(text)["heads"][0]["W_Q"][0][0] == 4
        assert tomllib.loads(text)["X"][0] == [1, 0, 1, 0]
        assert not app.live.dirty
        await pilot.pause()
        app.live.poll()  # our own write is not a change on disk to reload
        assert app.scenario.X[1, 0] == 2.5 and app.live.undo_stack


async def test_a_builtin_is_never_written_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    before = (builtin_dir() / "i_love_ai.toml").read_bytes()
    app = QKVApp("i_love_ai")
    async with app.run_test(size=SIZE) as pilot:
        await type_edit(pilot, "X[love,0] = 9")
        await pilot.press("ctrl+s")
        await pilot.pause()
        copy_path = tmp_path / "i_love_ai.toml"
        assert "[9, 1, 0, 1],   # love" in copy_path.read_text()  # a copy here, comments and all
        assert app.live.path == copy_path
        await type_edit(pilot, "X[I,0] = 8")
        await pilot.press("ctrl+s")  # now it writes the copy it follows
        await pilot.pause()
        assert tomllib.loads(copy_path.read_text())["X"][0][0] == 8
    assert (builtin_dir() / "i_love_ai.toml").read_bytes() == before
    other = QKVApp(str(builtin_dir() / "i_love_ai.toml"))
    async with other.run_test(size=SIZE) as pilot:
        await type_edit(pilot, "X[I,0] = 7")
        await pilot.press("ctrl+s")  # the copy exists: it is not written over either
        await pilot.pause()
        assert any("exists already" in n.message for n in notices(other))
        assert tomllib.loads(copy_path.read_text())["X"][0][0] == 8
    assert (builtin_dir() / "i_love_ai.toml").read_bytes() == before


# --- reload ------------------------------------------------------------------------------------


async def test_reload_follows_the_file(tmp_path: Path) -> None:
    path = copy(tmp_path)
    app = QKVApp(str(path))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("5", "right", "right")
        where = app.position
        path.write_text(path.read_text().replace("[0, 1, 0, 1],   # love", "[4, 1, 0, 1],   # love"))
        app.live.stamp = None  # a same-second rewrite of the same size: make the change certain
        app.live.poll()
        await pilot.pause()
        assert app.scenario.X[1, 0] == 4 and app.position == where
        # a bad file: its error on screen, the last good computation stays
        good = app.comp
        path.write_text("tokens = [\n")
        app.live.poll()
        await pilot.pause()
        assert app.comp is good
        errors = [n.message for n in notices(app) if n.severity == "error"]
        assert errors and errors[-1].startswith(f"error: {path}: line ")
        await pilot.press("right")  # still stepping through the last good state
        assert app.position.index == where.index + 1
        path.unlink()
        app.live.poll()
        await pilot.pause()
        assert "gone" in [n.message for n in notices(app)][-1] and app.comp is good
        shutil.copy(ROOT / "scenarios" / "two_heads.toml", path)  # back, and different: a second head
        app.live.poll()
        await pilot.pause()
        assert len(app.comp.heads) == 2 and app.position.index == where.index + 1
        await pilot.press("end", "r")
        await pilot.pause()
        assert app.position.index == len(app.trace) - 1


async def test_a_reload_under_an_open_prompt(tmp_path: Path) -> None:
    path = copy(tmp_path)
    app = QKVApp(str(path))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("e")
        await pilot.pause()
        text = path.read_text().replace('tokens = ["I", "love", "AI"]', 'tokens = ["I", "love"]')
        path.write_text(text.replace("  [1, 1, 0, 0],   # AI\n", ""))  # one token fewer
        app.live.stamp = None
        app.live.poll()
        await pilot.pause()
        assert app.scenario.n == 2
        app.screen.query_one("#edit-input").value = "X[AI,0] = 5"  # a row the new file no longer has
        await pilot.press("enter")
        await pilot.pause()
        assert "changed on disk" in str(app.screen.query_one("#edit-error").render())
        assert app.scenario.n == 2 and not app.live.dirty


async def test_reload_asks_before_it_drops_unsaved_edits(tmp_path: Path) -> None:
    path = copy(tmp_path)
    app = QKVApp(str(path))
    async with app.run_test(size=SIZE) as pilot:
        await type_edit(pilot, "X[I,0] = 7")
        await pilot.press("r")
        await pilot.pause()
        assert isinstance(app.screen, ReloadScreen)  # it asks, and says what would be lost
        question = str(app.screen.query_one("#drop-question").render())
        assert f"Reload {path.name} from disk?" in question and "X[I,0] = 7 (the file: 1)" in question
        await pilot.press("escape")  # keeps them
        await pilot.pause()
        assert not isinstance(app.screen, ReloadScreen) and app.scenario.X[0, 0] == 7 and app.live.dirty
        await pilot.press("r", "r")  # r again confirms
        await pilot.pause()
        assert app.scenario.X[0, 0] == 1 and not app.live.undo_stack and not app.live.dirty
        assert "1 unsaved edit dropped" in [n.message for n in notices(app)][-1]
        await type_edit(pilot, "X[I,0] = 6")
        await pilot.press("r", "y")  # so does y
        await pilot.pause()
        assert app.scenario.X[0, 0] == 1
        await pilot.press("r")  # nothing unsaved: it reloads at once
        await pilot.pause()
        assert not isinstance(app.screen, ReloadScreen)


async def test_a_change_on_disk_never_replaces_unsaved_edits(tmp_path: Path) -> None:
    path = copy(tmp_path)
    app = QKVApp(str(path))
    async with app.run_test(size=SIZE) as pilot:
        await type_edit(pilot, "X[I,0] = 7")
        path.write_text(path.read_text().replace("[0, 1, 0, 1],   # love", "[4, 1, 0, 1],   # love"))
        app.live.stamp = None  # a same-second rewrite of the same size: make the change certain
        app.live.poll()
        app.live.poll()  # said once, not every second
        await pilot.pause()
        assert app.scenario.X[0, 0] == 7 and app.scenario.X[1, 0] == 0  # the edits stay, the file waits
        warnings = [n.message for n in notices(app) if n.severity == "warning"]
        assert len(warnings) == 1 and "changed on disk" in warnings[0] and "ctrl+s writes your edits into it" in warnings[0]
        await pilot.press("ctrl+s")  # the edit goes into the changed file, whose own change is kept
        await pilot.pause()
        on_disk = tomllib.loads(path.read_text())["X"]
        assert on_disk[0][0] == 7 and on_disk[1][0] == 4
        assert app.scenario.X[0, 0] == 7 and app.scenario.X[1, 0] == 4 and not app.live.dirty  # the screen shows it
        # once every edit is undone, a change on disk is followed again by itself
        await type_edit(pilot, "X[AI,0] = 5")
        path.write_text(path.read_text().replace("[1, 1, 0, 0],   # AI", "[1, 1, 0, 3],   # AI"))
        app.live.stamp = None
        app.live.poll()
        await pilot.pause()
        assert app.scenario.X[2, 3] == 0
        await pilot.press("u")
        app.live.poll()
        await pilot.pause()
        assert app.scenario.X[2, 3] == 3 and app.scenario.X[2, 0] == 1


async def test_edits_are_not_written_into_a_file_whose_shapes_changed(tmp_path: Path) -> None:
    path = copy(tmp_path)
    app = QKVApp(str(path))
    async with app.run_test(size=SIZE) as pilot:
        await type_edit(pilot, "X[AI,0] = 5")
        text = path.read_text().replace('tokens = ["I", "love", "AI"]', 'tokens = ["I", "love"]')
        path.write_text(text.replace("  [1, 1, 0, 0],   # AI\n", ""))  # one token fewer: no row for AI's edit
        written = path.read_text()
        app.live.stamp = None
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert path.read_text() == written and app.live.dirty  # nothing written, nothing lost
        errors = [n.message for n in notices(app) if n.severity == "error"]
        assert errors and "other shapes" in errors[-1]


async def test_the_file_watch_keeps_the_error_of_a_save_that_could_not_merge(tmp_path: Path) -> None:
    """The poll that notices the change on disk after ctrl+s refused to merge into it must not clear that error
    with its own announcement (it did, when the poll's timer fired between the save and the next look)."""
    path = copy(tmp_path)
    app = QKVApp(str(path))
    async with app.run_test(size=SIZE) as pilot:
        await type_edit(pilot, "X[AI,0] = 5")
        text = path.read_text().replace('tokens = ["I", "love", "AI"]', 'tokens = ["I", "love"]')
        path.write_text(text.replace("  [1, 1, 0, 0],   # AI\n", ""))
        await pilot.press("ctrl+s")
        await pilot.pause()
        app.live.poll()  # the file watch's tick, now rather than whenever its timer fires
        await pilot.pause()
        errors = [n.message for n in notices(app) if n.severity == "error"]
        assert errors and "other shapes" in errors[-1]
        assert not [n for n in notices(app) if "changed on disk, but the screen keeps" in n.message]


async def test_edited_means_different_from_the_file(tmp_path: Path) -> None:
    app = QKVApp(str(copy(tmp_path)))
    async with app.run_test(size=SIZE) as pilot:
        def edited() -> bool:
            return "edited" in str(app.query_one("FormulaLine").render())

        await type_edit(pilot, "X[I,0] = 7")
        await type_edit(pilot, "W_Q[0,0] = 3")
        assert edited() and app.live.dirty == [InputCell("X", None, 0, 0), InputCell("W_Q", 0, 0, 0)]
        await pilot.press("u", "u")  # every edit undone: the file's values, so not edited
        assert not edited() and not app.live.dirty
        await type_edit(pilot, "X[I,0] = 7")
        await type_edit(pilot, "X[I,0] = 1")  # typed back to the file's value
        assert not edited() and not app.live.dirty
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert "No edits to save." in [n.message for n in notices(app)]
        await type_edit(pilot, "X[I,0] = 2")
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert not edited()  # saved: the file holds it
        await pilot.press("u")  # back to 7? no: to 1, which the file no longer holds
        assert app.scenario.X[0, 0] == 1 and edited()


async def test_opening_another_scenario_asks_before_it_drops_unsaved_edits(tmp_path: Path) -> None:
    app = QKVApp(str(copy(tmp_path)))
    async with app.run_test(size=SIZE) as pilot:
        await type_edit(pilot, "X[I,0] = 7")
        command = {c.title: c for c in app.get_system_commands(app.screen)}
        command["Open built-in scenario: two_heads"].callback()
        await pilot.pause()
        assert isinstance(app.screen, DropEditsScreen)
        assert "Open two_heads.toml?" in str(app.screen.query_one("#drop-question").render())
        await pilot.press("escape")
        assert app.scenario.X[0, 0] == 7 and len(app.scenario.heads) == 1
        command["Open built-in scenario: two_heads"].callback()
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()
        assert len(app.scenario.heads) == 2 and not app.live.dirty


async def test_a_failed_open_says_so_until_the_file_is_fixed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "lesson.toml"
    bad.write_text("tokens = [\n")
    app = QKVApp("i_love_ai")
    async with app.run_test(size=SIZE) as pilot:
        command = {c.title: c for c in app.get_system_commands(app.screen)}
        command["Open file: lesson.toml"].callback()
        await pilot.pause()

        def errors() -> list[str]:
            return [n.message for n in notices(app) if n.severity == "error"]

        assert len(errors()) == 1 and "line " in errors()[0]
        app.live.poll()
        assert len(errors()) == 1  # unchanged file: the error stays
        bad.write_text('tokens = ["a"]\nX = [[1]]\n')  # valid TOML, still not a scenario: the new reason replaces it
        app.live.failed = (bad, None)  # a same-second rewrite: make the change certain
        app.live.poll()
        await pilot.pause()
        assert len(errors()) == 1 and "line " not in errors()[0]
        shutil.copy(ROOT / "scenarios" / "causal_mask.toml", bad)  # fixed
        app.live.failed = (bad, None)
        app.live.poll()
        await pilot.pause()
        assert not errors() and "lesson.toml loads now" in [n.message for n in notices(app)][-1]
        assert app.live.failed is None and app.scenario.title == "I love AI"  # it did not open by itself


async def test_a_shorter_file_keeps_what_position_it_can(tmp_path: Path) -> None:
    path = copy(tmp_path, "two_heads")
    app = QKVApp(str(path))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("end")
        shutil.copy(ROOT / "scenarios" / "i_love_ai.toml", path)
        await pilot.press("r")
        await pilot.pause()
        assert app.position.index == len(app.trace) - 1 and app.position.head == 0


# --- the palette -------------------------------------------------------------------------------


async def test_palette_jumps_to_a_stage() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"stage 5")
        await app.workers.wait_for_complete()  # the palette searches in a worker: wait for it to finish
        await pilot.pause()
        assert "Stage 5" in str(app.screen.query_one("CommandList").get_option_at_index(0).prompt)
        await pilot.press("enter")
        await pilot.pause()
        assert app.trace.op(app.position.index).segment.stage == "softmax"
        assert app.position.index == app.trace.runs[4].start


async def test_palette_offers_every_action_and_keeps_textuals_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "lesson.toml").write_text((ROOT / "scenarios" / "causal_mask.toml").read_text())
    monkeypatch.chdir(tmp_path)
    app = QKVApp("two_heads")
    async with app.run_test(size=SIZE):
        titles = [c.title for c in app.get_system_commands(app.screen)]
        for builtin in ("Theme", "Keys", "Screenshot", "Quit"):
            assert builtin in titles
        for ours in ("Edit an input value", "Undo the last edit", "Reload the file", "Autoplay", "Go to operation…",
                     "Stage 8: W_O", "Head: head 2", "Open built-in scenario: cross_attention", "Open file: lesson.toml",
                     "Theme: light"):
            assert ours in titles
        command = {c.title: c for c in app.get_system_commands(app.screen)}
        command["Open file: lesson.toml"].callback()
        assert app.scenario.mask_kind == "causal" and app.position.index == 0
        assert app.live.path == tmp_path / "lesson.toml"
        command["Head: head 2"].callback()  # a command from before the switch: harmless
        command["Theme: light"].callback()
        assert app.theme == "textual-light"


async def test_palette_opens_the_packaged_built_in_never_a_same_named_local_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    local = (builtin_dir() / "i_love_ai.toml").read_text().replace('title = "I love AI"', 'title = "my copy"')
    (tmp_path / "i_love_ai.toml").write_text(local.replace("X = [", "X = [[9, 9, 9, 9],", 1).replace(
        'tokens = ["I", "love", "AI"]', 'tokens = ["x", "I", "love", "AI"]'))
    assert load_scenario(str(tmp_path / "i_love_ai.toml")).title == "my copy"  # a valid file that differs
    monkeypatch.chdir(tmp_path)
    app = QKVApp("two_heads")
    async with app.run_test(size=SIZE):
        command = {c.title: c for c in app.get_system_commands(app.screen)}
        command["Open built-in scenario: i_love_ai"].callback()
        assert app.scenario.title == "I love AI" and app.scenario.tokens == ("I", "love", "AI")
        assert np.array_equal(app.scenario.X, load_scenario(builtin_dir() / "i_love_ai.toml").X)
        assert app.live.path == builtin_dir() / "i_love_ai.toml"  # reload and the file watch follow it too


# --- screenshots, autoplay, themes -------------------------------------------------------------------


async def test_screenshot_is_written_to_the_current_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    app = QKVApp("i_love_ai")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3", "right", "s")
        target = tmp_path / "i_love_ai-op32-score.svg"  # scenario, operation 32 of 66, its stage
        for _ in range(200):  # written by a thread: wait for it, not for a clock
            await pilot.pause(0.02)
            if target.exists() and target.read_text().rstrip().endswith("</svg>"):
                break
        assert "scores[I,love]" in target.read_text().replace("&#160;", " ")


async def written(pilot, target: Path) -> str:
    """The SVG once its thread has written it whole (waits for the file, not for a clock)."""
    for _ in range(300):
        await pilot.pause(0.02)
        if target.exists() and target.read_text().rstrip().endswith("</svg>"):
            return target.read_text().replace("&#160;", " ")
    raise AssertionError(f"{target} was not written")


@pytest.mark.parametrize(("name", "keys", "expected"), [
    ("i_love_ai", ["t", "right", "right", "right"], "i_love_ai-tiles-step04.svg"),  # was …-decode-step4
    ("causal_mask", ["k", "right"], "causal_mask-cache-step2.svg"),
    ("two_heads", ["k", "c", "right", "tab"], "two_heads-cache-chunked-step2-head2.svg"),
    ("i_love_ai", ["3", "right", "m"], "i_love_ai-map-op32.svg"),  # was the trace's name, and s did nothing
    ("two_heads", ["3", "right", "m", "tab"], "two_heads-map-op032-head2.svg"),  # the map's own head
    ("i_love_ai", ["question_mark"], "i_love_ai-help.svg"),
    ("two_heads", ["5", "right", "tab"], "two_heads-op104-softmax-head2.svg"),
])
async def test_a_screenshot_is_named_for_its_view_and_place(name: str, keys: list[str], expected: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    app = QKVApp(name)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*keys, "s")
        await written(pilot, tmp_path / expected)
        assert [p.name for p in tmp_path.iterdir()] == [expected]


async def test_screenshots_never_overwrite_and_never_show_a_toast(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "i_love_ai-op04-project.svg").write_text("a teacher's own file")
    app = QKVApp("i_love_ai")
    async with app.run_test(size=SIZE, notifications=True) as pilot:  # toasts drawn, as in a terminal
        await pilot.press("2")  # op 4: Q[I,0]
        app.notify("a toast that is showing", timeout=60)
        await pilot.pause()
        await pilot.press("s")
        second = await written(pilot, tmp_path / "i_love_ai-op04-project-2.svg")
        await pilot.pause()
        assert any("Saved screenshot" in n.message for n in notices(app))  # announced, after the picture
        await pilot.press("s")  # with that announcement on screen
        third = await written(pilot, tmp_path / "i_love_ai-op04-project-3.svg")
        assert (tmp_path / "i_love_ai-op04-project.svg").read_text() == "a teacher's own file"
        for svg in (second, third):
            assert "Q[I,0]" in svg  # the screen itself
            assert "a toast that is showing" not in svg and "Saved screenshot" not in svg
        assert not app.screen.has_class("-screenshot")  # toasts show again
        assert app.live.screenshot() == "i_love_ai-op04-project-4.svg"  # a name given out is not given twice
        assert app.live.screenshot() == "i_love_ai-op04-project-5.svg"
        for n in (4, 5):  # both written before the app closes (a thread still writing when it has gone cannot report)
            await written(pilot, tmp_path / f"i_love_ai-op04-project-{n}.svg")


async def test_autoplay_steps_and_any_key_stops_it() -> None:
    app = QKVApp("i_love_ai")
    app.live.speeds = (4000.0, 2000.0, 1000.0, 500.0)  # the real timers never fire: the test ticks by hand
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("a")
        assert app.live.playing
        start = app.position.index
        app.live.tick()
        app.live.tick()
        assert app.position.index == start + 2
        slow = app.live.speed
        await pilot.press("greater_than_sign")
        assert app.live.playing and app.live.speed == slow + 1
        assert "▶ 0.001/s" in str(app.query_one("FormulaLine").render())
        await pilot.press("x")
        assert not app.live.playing and app.position.index == start + 2
        await pilot.press("end", "a")  # from the end, it starts again at the beginning
        assert app.live.playing and app.position.index == 0
        await pilot.press("right")  # a step key stops it and is used up doing so
        assert not app.live.playing and app.position.index == 0
        await pilot.press("a")
        app.live.tick()
        await pilot.press("end")
        await pilot.press("end")
        app.live.timer_stop()
        await pilot.press("a")
        await pilot.press("end")  # stops
        await pilot.press("end")
        app.live.tick()  # a tick after the end stops by itself
        assert not app.live.playing


def highlights(app: QKVApp) -> dict[str, Style]:
    """The highlights as a pane draws them in the theme in force (qkv.tcss)."""
    view = app.query(MatrixView).first()
    return {name: view.look(name) for name in ("current", "operand", "row-max", "changed", "masked")}


async def test_light_theme_and_palette() -> None:
    app = QKVApp("i_love_ai", theme="light")
    async with app.run_test(size=SIZE) as pilot:
        assert app.theme == "textual-light" and highlights(app)["current"].bgcolor.name == "#f08000"
        app.theme = "textual-dark"
        await pilot.pause()
        assert highlights(app)["current"].bgcolor.name == "#ffd75f"


def test_theme_is_remembered_only_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert config.saved_theme() is None
    assert config.save_theme("light") == tmp_path / "qkv-tui" / "config.toml"
    assert config.saved_theme() == "light"
    (tmp_path / "qkv-tui" / "config.toml").write_text('theme = "neon"\n')
    assert config.saved_theme() is None
    run = cli("--save-theme", "i_love_ai")
    assert run.code == 2 and run.err.startswith("error: --save-theme needs --theme")
    assert config.saved_theme() is None  # a refused flag writes nothing


def test_cli_passes_the_theme(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from qkv_tui.edges import cli

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    seen: list[str | None] = []

    class Recorder(QKVApp):
        def run(self, *args, **kwargs):  # the app is not started: what it was given is enough
            seen.append(self.live.theme)

    monkeypatch.setattr("qkv_tui.ui.app.QKVApp", Recorder)
    monkeypatch.setattr(cli, "terminal_problem", lambda: None)  # the app is not started: no terminal needed
    assert cli.main(["i_love_ai"]) == 0
    assert cli.main(["--theme", "light", "--save-theme", "i_love_ai"]) == 0
    assert cli.main(["i_love_ai"]) == 0  # remembered
    assert cli.main(["--theme", "dark", "i_love_ai"]) == 0  # a flag wins over the file, and is not saved
    assert cli.main(["i_love_ai"]) == 0
    assert seen == ["dark", "light", "light", "dark", "light"]


async def test_highlights_differ_in_more_than_hue() -> None:
    """Current cell, operands, row maximum, changed and masked cells: distinct in greyscale and in attributes."""
    def luminance(color) -> float:
        if color is None:
            return -1.0
        r, g, b = color.get_truecolor()
        return 0.2126 * r + 0.7152 * g + 0.0722 * b

    app = QKVApp("i_love_ai")
    async with app.run_test(size=SIZE) as pilot:
        palettes = []
        for theme in themes.THEMES.values():
            app.theme = theme
            await pilot.pause()
            palettes.append((highlights(app), app.query(MatrixView).first().heat_ends))
    for palette, (heat_low, heat_high) in palettes:
        looks = {
            name: (round(luminance(style.bgcolor) / 40), round(luminance(style.color) / 40), bool(style.bold),
                   bool(style.underline), bool(style.italic), bool(style.dim))
            for name, style in palette.items()
        }
        assert len(set(looks.values())) == len(looks), looks
        # the current cell: dark text on a lighter box; the cells it reads: light text on a darker box
        current, operand = palette["current"], palette["operand"]
        assert luminance(current.color) < luminance(current.bgcolor) and luminance(operand.color) > luminance(operand.bgcolor)
        assert luminance(current.bgcolor) - luminance(operand.bgcolor) > 60
        for style in (current, operand, palette["changed"]):  # text readable on its box
            assert abs(luminance(style.bgcolor) - luminance(style.color)) > 100
        # and the current cell's box is no shade of the weights' heat map
        heat = [0.2126 * lo + 0.7152 * mid + 0.0722 * hi for lo, mid, hi in (heat_low, heat_high)]
        assert all(abs(luminance(current.bgcolor) - h) > 35 for h in heat)


# --- snapshots (each rendered to PNG, and to greyscale for the themes, and looked at) ----------------

SIZES = pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=["120x40", "80x24"])


class TestLiveSnapshots:
    @SIZES
    def test_palette(self, snap_compare, size: tuple[int, int]) -> None:
        async def run_before(pilot) -> None:
            await pilot.press("ctrl+p")
            await pilot.press(*"stage")
            await pilot.app.workers.wait_for_complete()  # the palette searches in a worker: wait for it to finish
            await pilot.pause()

        assert snap_compare(QKVApp("i_love_ai"), run_before=run_before, terminal_size=size)

    @SIZES
    def test_edited(self, snap_compare, size: tuple[int, int]) -> None:
        async def run_before(pilot) -> None:
            await pilot.press("3", "right")
            await type_edit(pilot, "X[love,0] = 3")

        assert snap_compare(QKVApp("i_love_ai"), run_before=run_before, terminal_size=size)

    @SIZES
    def test_light_theme(self, snap_compare, size: tuple[int, int]) -> None:
        # the softmax of a causal mask: the current cell, its operands, row maxima and masked cells at once
        assert snap_compare(QKVApp("causal_mask", theme="light"), press=["5", "right", "right", "right", "right"],
                            terminal_size=size)

    def test_light_theme_edited(self, snap_compare) -> None:
        async def run_before(pilot) -> None:
            await pilot.press("4", "right", "right", "right")
            await type_edit(pilot, "X[I,1] = 2")

        assert snap_compare(QKVApp("causal_mask", theme="light"), run_before=run_before, terminal_size=(120, 40))


# --- §7 inputs: norm gains and shifts, biases, sinks, shared K/V heads ------------------------------

BIASED = """
tokens = ["a", "b", "c"]
X = [[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]]
mask = "causal"

[norm]
kind = "layer"   # beta left out: all 0

[attention]
num_heads = 2
num_kv_heads = 1
W_Q = [[1, 0, 0, 1], [0, 1, 1, 0], [1, 0, 1, 1], [0, 1, 0, 0]]
W_K = [[0, 1], [1, 0], [0, 1], [1, 1]]
W_V = [[1, 0], [0, 1], [1, 1], [0, 0]]
b_Q = [0.5, 0, 0, -0.5]
b_K = [0, 1]       # one K/V head, shared by both query heads
b_V = [0.25, 0]
sinks = [0.5, -1]

[output]
W_O = [[1, 0], [0, 1], [1, 1], [0, 0]]
b_O = [0, 0.5]
"""


@pytest.mark.parametrize(("cell", "text", "check"), [
    (InputCell("gamma", None, 0, 1), "2", lambda s: s.norm.gamma[1]),
    (InputCell("beta", None, 0, 3), "0.5", lambda s: s.norm.beta[3]),
    (InputCell("b_Q", 1, 0, 0), "3", lambda s: s.heads[1].b_Q[0]),
    (InputCell("b_O", None, 0, 1), "-2", lambda s: s.b_O[1]),
    (InputCell("sink", 1), "0.25", lambda s: s.heads[1].sink),
])
def test_modern_inputs_edit_and_save(tmp_path: Path, cell: InputCell, text: str, check) -> None:
    from qkv_tui.core.scenario import parse_scenario

    sc = parse_scenario(BIASED, "biased.toml")
    assert cell in input_cells(sc)
    new, comp = edit(sc, cell, text)
    assert check(new) == float(text)
    saved = parse_scenario(save_text(BIASED, new, [cell]), "saved.toml")
    assert check(saved) == float(text)
    assert np.array_equal(compute_of(saved).output, comp.output)


def test_shared_kv_heads_change_together_and_save_in_place() -> None:
    from qkv_tui.core.scenario import parse_scenario

    sc = parse_scenario(BIASED, "biased.toml")
    for cell in (InputCell("W_K", 1, 2, 0), InputCell("b_K", 0, 0, 1), InputCell("W_V", 0, 0, 1)):
        new, comp = edit(sc, cell, "7")
        source = "b_K" if cell.matrix == "b_K" else cell.matrix
        for head in new.heads:  # both query heads read the one K/V head: both see the edit
            value = getattr(head, source)
            assert (value[cell.col] if value.ndim == 1 else value[cell.row, cell.col]) == 7
        saved = parse_scenario(save_text(BIASED, new, [cell]), "saved.toml")
        assert np.array_equal(compute_of(saved).output, comp.output)
    gqa = load_scenario("gqa")
    new, comp = edit(gqa, InputCell("W_K", 3, 1, 1), "5")  # head 4 reads K/V head 2, as head 3 does
    assert [h.W_K[1, 1] for h in new.heads] == [gqa.heads[0].W_K[1, 1], gqa.heads[1].W_K[1, 1], 5, 5]
    text = save_text((ROOT / "scenarios" / "gqa.toml").read_text(), new, [InputCell("W_K", 3, 1, 1)])
    assert "  [1, 0,   1, 5]," in text and "#     K/V head 1   K/V head 2" in text
    assert np.array_equal(compute_of(load_scenario_text(text)).output, comp.output)


def test_a_sliding_window_cell_becomes_a_custom_mask() -> None:
    sc = load_scenario("sliding_window")
    i, j = next((i, j) for i in range(sc.n) for j in range(i) if not sc.allow[i, j])
    new, _ = edit(sc, InputCell("mask", None, i, j), "1")
    assert new.mask_kind == "custom" and new.window is None and new.allow[i, j]
    path = ROOT / "scenarios" / "sliding_window.toml"
    again = load_scenario_text(save_text(path.read_text(), new, [InputCell("mask", None, i, j)]))
    assert again.mask_kind == "custom" and np.array_equal(again.allow, new.allow)


async def test_editing_a_gain_in_the_app(tmp_path: Path) -> None:
    path = copy(tmp_path, "pre_norm")
    app = QKVApp(str(path))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("end")
        await type_edit(pilot, "gamma[0] = 3")
        assert app.scenario.norm.gamma[0] == 3 and app.live.dirty
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert tomllib.loads(path.read_text())["norm"]["gamma"] == [3, 1.0, 1.0, 1.0]


def compute_of(sc):
    from qkv_tui import compute

    return compute(sc)


async def test_typing_in_the_edit_box_replaces_the_shown_value(tmp_path: Path) -> None:
    """Found by a reviewer: the box opened with the value and the cursor after it, so typing 2 gave 12."""
    app = QKVApp(str(copy(tmp_path)))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("e")
        await pilot.pause()
        field = app.screen.query_one("#edit-input")
        shown = field.value
        await pilot.press("7")
        assert field.value == "7" and shown != "7"
