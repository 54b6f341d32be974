"""The built-in kda in the app: it opens, every operation shows (stepped one by one to the last), the Gates stage
works each channel's g and the Delta stage decays a state row by its own channel's e^g, at 80×24 and 120×40; the
decode view carries the state row by row and the tiles view says there are none."""

from __future__ import annotations

import pytest

from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.panels import ExplainPanel, FormulaLine


def explanation(app: QKVApp) -> str:
    return app.query_one(ExplainPanel).plain


def stage_line(app: QKVApp) -> str:
    return str(app.query_one(FormulaLine).render())


SIZES = pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=["120x40", "80x24"])


@SIZES
async def test_it_opens_and_steps_to_the_last_operation(size: tuple[int, int]) -> None:
    app = QKVApp("kda")
    async with app.run_test(size=size) as pilot:
        seen: set[str] = set()
        while app.check_action("next", ()) is not None:
            await pilot.press("right")
            seen.add(explanation(app).split("\n", 1)[0])
        assert app.position.index == app.stepper.last_index
        assert "o[AI,1] = S_AI[:,1]·q[AI]" in explanation(app)
        assert "each channel fades at its own rate" in explanation(app)
        assert len(seen) > 40


async def test_the_gates_stage_works_each_channel() -> None:
    app = QKVApp("kda")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("4", "right", "right", "right")  # g[love,0]: the channel index after the token
        assert "Gates" in stage_line(app)
        text = explanation(app)
        assert "g[love,0] = −e^A_log·softplus(a[love,0]) = −1·softplus(-3.000) = −1·0.049 = -0.049" in text
        assert "a[love,0] = (X[love]·W_fa)·W_fb[:,0] + dt_bias[0]" in text


async def test_the_delta_stage_decays_each_row_by_its_own_channel() -> None:
    app = QKVApp("kda")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("5", *["right"] * 16)  # love's S'[1,0]
        text = explanation(app)
        assert "S'_love[1,0] = S_I[1,0]·e^g[love,1] = 0.707·0.119 = 0.084" in text
        assert "Gated DeltaNet is the case where every channel's g is equal; here they differ" in text


async def test_the_decode_view_carries_the_state_row_by_row() -> None:
    app = QKVApp("kda")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("k", "right")
        assert "S'[1] = S_prev[1]·e^g[1] = [0.707, 0.000]·0.119 = [0.084, 0.000]" in explanation(app)


async def test_e_on_a_channel_decay_opens_the_tokens_x_and_an_edit_of_beta_keeps_the_channels(tmp_path) -> None:
    import shutil
    import tomllib
    from pathlib import Path

    path = tmp_path / "kda.toml"
    shutil.copy(Path(__file__).resolve().parents[1] / "scenarios" / "kda.toml", path)
    app = QKVApp(str(path))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("5", *["right"] * 16)  # love's S'[1,0], which reads e^g[love,1]
        await pilot.press("e")
        await pilot.pause()
        assert app.screen.cell.matrix == "X" and app.screen.cell.row == 1  # g per channel is computed from X
        await pilot.press("escape")
        before = app.comp.heads[0].output
        await pilot.press("e")
        await pilot.pause()
        app.screen.query_one("#edit-input").value = "beta[love,0] = 0.5"
        await pilot.press("enter")
        await pilot.pause()
        assert app.scenario.deltanet.channels is not None and float(app.scenario.deltanet.beta[1, 0]) == 0.5
        assert "e^g[love,1]" in explanation(app) and not (app.comp.heads[0].output == before).all()
        await pilot.press("ctrl+s")
        await pilot.pause()
    data = tomllib.loads(path.read_text(encoding="utf-8"))["deltanet"]
    assert data["beta"] == [[1], [0.5], [1]] and data["dt_bias"] == [[-3, 1]]
