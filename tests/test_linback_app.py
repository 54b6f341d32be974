"""[backward] through [deltanet] and [linear] in the app: the dDelta stage walks the tokens last first, the Train
view trains the gates' weights, and a snapshot of dDelta at 80×24 and 120×40."""

from __future__ import annotations

import pytest

from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.matrix import MatrixView
from qkv_tui.ui.widgets.panels import ExplainPanel, FormulaLine


def explanation(app: QKVApp) -> str:
    return app.query_one(ExplainPanel).plain


def shown_panes(app: QKVApp) -> dict[str, MatrixView]:
    return {v.spec.key: v for v in app.query(MatrixView) if v.display and v.spec is not None}


async def test_the_delta_backward_starts_at_the_last_token() -> None:
    app = QKVApp("deltanet_learns")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("7")
        assert "7/10 dDelta" in str(app.query_one(FormulaLine).render())
        text = explanation(app)
        assert "dS_AI[0,0] = q[AI,0]·dO[AI,0] = 0.500·(-0.403) = -0.201" in text
        assert "flows backwards in time" in text
        assert "dnb_dS@0" in shown_panes(app)


async def test_the_train_view_trains_the_gates() -> None:
    app = QKVApp("deltanet_learns")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("l", "right")
        await pilot.pause()
        assert "A_log" in explanation(app) or any("A_log" in k for k in shown_panes(app))


SIZES = pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=["120x40", "80x24"])


class TestBackwardStateSnapshots:
    @SIZES
    def test_deltanet_backward(self, snap_compare, size: tuple[int, int]) -> None:
        assert snap_compare(QKVApp("deltanet_learns"), press=["7", *["right"] * 9], terminal_size=size)
