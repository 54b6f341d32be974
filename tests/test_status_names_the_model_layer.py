"""After v, ] and enter into another layer of a real model, the status line says which layer (and head):
the title is the file's, and before nothing on screen named the layer being stepped through."""

from __future__ import annotations

import pytest

from qkv_tui import compute, load_scenario
from qkv_tui.display.modes import Modes
from qkv_tui.display.presenter import Presenter
from qkv_tui.display.view import model_layer
from qkv_tui.teach.stepper import Position
from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.panels import FormulaLine

from .settle import settle


def status(app: QKVApp) -> str:
    return str(app.query_one(FormulaLine).render())


def test_hand_made_numbers_name_no_layer() -> None:
    comp = compute(load_scenario("two_heads"))
    assert model_layer(comp.scenario) is None
    assert Presenter(comp).frame(Position(0, 0), Modes()).explanation.layer == ""


def test_a_model_scenario_names_its_layer_in_every_view() -> None:
    comp = compute(load_scenario("glassllm_previous_word"))
    presenter = Presenter(comp)
    assert presenter.frame(Position(0, 0), Modes()).explanation.layer == "layer 1"
    assert presenter.frame(Position(0, 0), Modes(view="tiles")).explanation.layer == "layer 1"
    heads = presenter.frame(Position(0, 0), Modes(view="heads")).explanation
    assert heads.layer == "" and "layer 1 (0 … 3)" in heads.counter  # it counts the layers itself


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_entering_another_layer_says_which(size: tuple[int, int]) -> None:
    app = QKVApp("glassllm_previous_word")
    async with app.run_test(size=size) as pilot:
        assert "· layer 1" in status(app)
        await pilot.press("v", "right_square_bracket", "right", "enter")
        await settle(pilot)
        assert app.comp.scenario.input.chosen_layer == 2
        line = status(app)
        assert "· layer 2 ·" in line and "head 2 (2/4)" in line, line
