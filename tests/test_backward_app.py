"""The backward stages in the app (learn_to_look): each steps cell by cell with its arithmetic, and their snapshots."""

from __future__ import annotations

import pytest

from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.panels import ExplainPanel, FormulaLine

from .test_variants_app import shown_panes


def explanation(app: QKVApp) -> str:
    return app.query_one(ExplainPanel).plain


async def test_the_backward_stages_follow_the_forward_ones() -> None:
    app = QKVApp("learn_to_look")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("7", "right")  # Loss: dO[I,1]
        assert "7/13 Loss" in str(app.query_one(FormulaLine).render())
        assert "dO[I,1] = output[I,1] − target[I,1] = 1.637 − 0 = 1.637" in explanation(app)
        assert {"output@0", "target@None", "dO@None"} <= set(shown_panes(app))
        await pilot.press("9", "right", "right", "right", "right")  # D for each row, then dS[I,love]
        text = explanation(app)
        assert "dS[I,love] = weights[I,love]·(dP[I,love] − D[I]) = 0.707·(3.274 − 2.614)" in text
        assert {"weights@0", "dP@0", "dS@0"} <= set(shown_panes(app))
        for _ in range(3):
            await pilot.press("]")  # dScale, dScore, then dProject
        assert "12/13 dProject" in str(app.query_one(FormulaLine).render())
        assert "dW_Q[0,0] = X[:,0]·dQ[:,0] = 1·0.413 + 0·0.000 + 1·0.000 = 0.413" in explanation(app)


SIZES = pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=["120x40", "80x24"])


class TestBackwardSnapshots:
    @SIZES
    def test_loss(self, snap_compare, size: tuple[int, int]) -> None:
        assert snap_compare(QKVApp("learn_to_look"), press=["7", "right"], terminal_size=size)

    @SIZES
    def test_softmax_jacobian(self, snap_compare, size: tuple[int, int]) -> None:
        assert snap_compare(QKVApp("learn_to_look"), press=["9", "right", "right", "right", "right"], terminal_size=size)

    @SIZES
    def test_project_back(self, snap_compare, size: tuple[int, int]) -> None:
        assert snap_compare(QKVApp("learn_to_look"), press=["9", "]", "]", "]", "right"], terminal_size=size)
