"""The Norm stage by hand at 1 decimal with inputs of 2 (tests/data/finer_norm.toml): the line shows γ = -0.75
as it was used, and its snapshots at 120×40 and 80×24."""

from __future__ import annotations

from pathlib import Path

import pytest

from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.panels import ExplainPanel, FormulaLine

FINER = Path(__file__).resolve().parent / "data" / "finer_norm.toml"
TO_CELL = ["h", "minus", "minus", "2", "right", "right"]  # by hand at 1 decimal, X̂[a,2]


async def test_the_norm_line_by_hand_shows_the_gain_it_used() -> None:
    app = QKVApp(FINER)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press(*TO_CELL)
        assert "[1 dp · by hand]" in str(app.query_one(FormulaLine).render())
        text = app.query_one(ExplainPanel).plain
        assert "= 0.8 / 0.7·(-0.75) + 0.35 = -0.5" in " ".join(text.split())


SIZES = pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=["120x40", "80x24"])


class TestHandNormSnapshots:
    @SIZES
    def test_norm_by_hand(self, snap_compare, size: tuple[int, int]) -> None:
        assert snap_compare(QKVApp(FINER), press=TO_CELL, terminal_size=size)
