"""The QK-norm stage in the app: stepping through it, the panes it shows, and its snapshots."""

from __future__ import annotations

import pytest

from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.panels import FormulaLine

from .test_variants_app import explanation, shown_panes


async def test_qk_norm_stage_works_each_cell_then_score_reads_it() -> None:
    app = QKVApp("qk_norm")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("3", "right", "right")  # QK-norm, Q̂[love,0]
        assert "3/8 QK-norm" in str(app.query_one(FormulaLine).render())
        text = explanation(app)
        assert "Q̂[love,0] = Q[love,0] / √(ms + eps)·γ_q[0] = 0 / √(18.000 + 1e-06)·1 = 0.000" in text
        assert "ms(Q[love]) = mean of squares = (0·0 + 6·6) / 2 = 18.000" in text
        panes = shown_panes(app)
        assert list(panes)[:2] == ["Q@0", "Q_norm@0"]
        assert panes["Q_norm@0"].spec.title.startswith("Q̂ = rmsnorm(Q)") and panes["Q_norm@0"].spec.current == (1, 0)
        await pilot.press("4")  # Score reads Q̂ and K̂
        assert "scores[I,I] = Q̂[I]·K̂[I] = " in explanation(app)
        assert {"Q_norm@0", "K_normT@0"} <= set(shown_panes(app))
        assert "softmax(Q̂·K̂ᵀ/√dₖ)" in str(app.query_one(FormulaLine).render())


async def test_over_all_heads_says_so_in_the_title() -> None:
    app = QKVApp("qk_norm_all")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("3")
        assert shown_panes(app)["Q_norm@0"].spec.title.startswith("Q̂ = rmsnorm(Q) over all heads")
        assert "ms(Q[I], every head) = mean of squares = (2·2 + 0·0 + 0·0 + 1·1) / 4 = 1.250" in explanation(app)


SIZES = pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=["120x40", "80x24"])


class TestQKNormSnapshots:
    @SIZES
    @pytest.mark.parametrize("name", ["qk_norm", "qk_norm_all"])
    def test_qk_norm(self, snap_compare, name: str, size: tuple[int, int]) -> None:
        assert snap_compare(QKVApp(name), press=["3", "right", "right"], terminal_size=size)
