"""The soft-cap step in the app: a Pilot walk through the Scale stage's capped cells, and its snapshots."""

from __future__ import annotations

import pytest

from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.matrix import MatrixView
from qkv_tui.ui.widgets.panels import ExplainPanel, FormulaLine

# Scale of head "sharp" starts at op 40: nine scaled cells, then capped[I,I], capped[I,love]
TO_CAPPED_I_LOVE = ["4", *["right"] * 10]


def shown_panes(app: QKVApp) -> dict[str, MatrixView]:
    return {v.spec.key: v for v in app.query(MatrixView) if v.display and v.spec is not None}


async def test_the_scale_stage_divides_then_caps_each_cell() -> None:
    app = QKVApp("softcap")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("4")
        assert "scaled[I,I] = 2 / √3 = 1.155" in app.query_one(ExplainPanel).plain
        await pilot.press(*["right"] * 10)
        text = app.query_one(ExplainPanel).plain
        assert "capped[I,love] = 5·tanh(5.774/5) = 5·tanh(1.155) = 4.097" in text
        assert "the cap keeps 71% of 5.774" in text
        assert "Gemma 3 replaced the cap by QK-norm" in text
        formula = str(app.query_one(FormulaLine).render())
        assert "→cap" in formula and "4/7 Scale" in formula
        panes = shown_panes(app)
        assert list(panes)[:3] == ["scores@0", "scaled@0", "capped@0"]
        assert panes["capped@0"].spec.current == (0, 1)
        assert panes["capped@0"].spec.title.startswith("capped = 5·tanh(scaled/5)")
        await pilot.press("5")  # the softmax reads the capped scores
        assert "capped@0" in shown_panes(app)
        assert "weights = softmax(capped)" in shown_panes(app)["weights@0"].spec.title
        await pilot.press("tab", "4", *["right"] * 10)  # head "seed": the file's cap of 50 barely moves 2.887
        assert "capped[I,love] = 50·tanh(2.887/50) = 50·tanh(0.05774) = 2.884" in app.query_one(ExplainPanel).plain


async def test_e_at_a_capped_cell_offers_the_cap() -> None:
    app = QKVApp("softcap")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press(*TO_CAPPED_I_LOVE)
        assert app.live.default_cell().matrix == "softcap"
        await pilot.press("4")
        assert app.live.default_cell().matrix == "scale"


SIZES = pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=["120x40", "80x24"])


class TestSoftcapSnapshots:
    @SIZES
    def test_capped_cell(self, snap_compare, size: tuple[int, int]) -> None:
        assert snap_compare(QKVApp("softcap"), press=TO_CAPPED_I_LOVE, terminal_size=size)
