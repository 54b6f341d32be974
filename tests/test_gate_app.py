"""The Gate stage in the app: a pilot stepping through it, and its snapshots at 80×24 and 120×40."""

from __future__ import annotations

import pytest

from qkv_tui.core.cell_edit import InputCell
from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.panels import FormulaLine

from .test_variants_app import explanation, shown_panes

SIZES = pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
# stage 7 of the gated head (tab), then to its second row's second gate
TO_GATE = ["tab", "7", "right", "right", "right"]


async def test_the_gate_stage_steps_cell_by_cell() -> None:
    app = QKVApp("gated")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("tab", "7")
        formula = str(app.query_one(FormulaLine).render())
        assert "7/8 Gate" in formula and "⊙ σ(X·W_G)" in formula
        assert ("g[the,0] = σ(X[the]·W_G[:,0]) = σ(1·(-2) + 0·2) = σ(-2) = 1 / (1 + e^2) = 1 / 8.389 = 0.119"
                in explanation(app))
        assert "e^2 = 7.389; 1 + 7.389 = 8.389" in explanation(app)
        panes = shown_panes(app)
        assert list(panes)[:3] == ["X@None", "W_G@1", "gate@1"]
        assert panes["gate@1"].spec.title.startswith("g = σ(X·W_G)") and panes["gate@1"].spec.current == (0, 0)
        await pilot.press("right", "right")  # g[cat,0]: the gate opens
        assert "σ(0·(-2) + 1·2) = σ(2) = 1 / (1 + e^-2) = 1 / 1.135 = 0.881" in explanation(app)
        for _ in range(4):  # past the gates: the product with the output, the gate beside it
            await pilot.press("right")
        assert "gated[the,0] = out[the,0]·g[the,0] = 1.000·0.119 = 0.119" in explanation(app)
        panes = shown_panes(app)
        assert list(panes)[:3] == ["output@1", "gate@1", "gated@1"]
        assert panes["gated@1"].spec.title.startswith("gated = out ⊙ g")
        await pilot.press("8")  # Concat joins the gated outputs
        assert "concat[the] = [sink head gated[the] | gated head gated[the]]" in explanation(app)


async def test_editing_a_gate_starts_at_its_weight_and_recomputes() -> None:
    app = QKVApp("gated")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("tab", "7")
        await pilot.press("e")
        await pilot.pause()
        assert app.screen.cell == InputCell("W_G", 1, 0, 0)
        app.screen.query_one("#edit-input").value = "2"
        await pilot.press("enter")
        await pilot.pause()
        assert app.scenario.heads[1].W_G is not None and float(app.scenario.heads[1].W_G[0, 0]) == 2.0
        assert "σ(1·2 + 0·2) = σ(2) = 1 / (1 + e^-2) = 1 / 1.135 = 0.881" in explanation(app)


class TestGateSnapshots:
    @SIZES
    def test_gate(self, snap_compare, size: tuple[int, int]) -> None:
        assert snap_compare(QKVApp("gated"), press=TO_GATE, terminal_size=size)

    @SIZES
    def test_gated_product(self, snap_compare, size: tuple[int, int]) -> None:
        assert snap_compare(QKVApp("gated"), press=[*TO_GATE, *["right"] * 4], terminal_size=size)
