"""[linear] and [deltanet] in the app: their stages step cell by cell, the decode view carries the state, and
their snapshots at 80×24 and 120×40."""

from __future__ import annotations

import pytest

from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.matrix import MatrixView
from qkv_tui.ui.widgets.panels import ExplainPanel, FormulaLine


def explanation(app: QKVApp) -> str:
    return app.query_one(ExplainPanel).plain


def shown_panes(app: QKVApp) -> dict[str, MatrixView]:
    return {v.spec.key: v for v in app.query(MatrixView) if v.display and v.spec is not None}


async def test_the_recurrent_stage_works_each_state_cell() -> None:
    app = QKVApp("linear")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("5", *["right"] * 6)  # S after "love", cell [1,0]
        assert "5/5 Recurrent" in str(app.query_one(FormulaLine).render())
        assert "S_love[1,0] = S_I[1,0] + φ(K)[love,1]·V[love,0] = 4 + 0.368·0 = 4.000" in explanation(app)
        assert shown_panes(app)["lin_S@0"].spec.current == (1, 2)


async def test_the_delta_stage_walks_token_by_token() -> None:
    app = QKVApp("deltanet")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("4", *["right"] * 20)
        assert "δ_love[0] = (V[love,0] − kv_love[0])·β[love] = (0 − 0.858)·0.500 = -0.429" in explanation(app)
        assert "dn_delta@0" in shown_panes(app)


async def test_the_decode_view_carries_the_state() -> None:
    app = QKVApp("linear")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("k", "right")
        text = explanation(app)
        assert "z_love = z_prev + φ(k)" in text and "carried: the state, 6 numbers at every step" in text


SIZES = pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=["120x40", "80x24"])


class TestStateSnapshots:
    @SIZES
    def test_linear_recurrent(self, snap_compare, size: tuple[int, int]) -> None:
        assert snap_compare(QKVApp("linear"), press=["5", *["right"] * 6], terminal_size=size)

    @SIZES
    def test_linear_quadratic(self, snap_compare, size: tuple[int, int]) -> None:
        assert snap_compare(QKVApp("linear"), press=["4", *["right"] * 13], terminal_size=size)

    @SIZES
    def test_deltanet_delta(self, snap_compare, size: tuple[int, int]) -> None:
        assert snap_compare(QKVApp("deltanet"), press=["4", *["right"] * 20], terminal_size=size)

    @SIZES
    def test_state_decode(self, snap_compare, size: tuple[int, int]) -> None:
        assert snap_compare(QKVApp("deltanet"), press=["k", "right"], terminal_size=size)
