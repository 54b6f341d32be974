"""The latent attention's stages in the app: a pilot walk through them, and their snapshots at 80×24 and 120×40."""

from __future__ import annotations

import pytest

from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.panels import FormulaLine

from .test_variants_app import explanation, shown_panes

SIZES = pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])


async def test_the_mla_stages_step_cell_by_cell() -> None:
    app = QKVApp("mla")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("2")  # Compress
        assert "2/11 Compress" in str(app.query_one(FormulaLine).render())
        text = explanation(app)
        assert "c_KV[I,0] = X[I]·W_DKV[:,0] = 1·1 + 0·0 + 1·0 + 0·1 = 1" in text
        assert "d_c + d_rope = 2 + 2 = 4" in text and "576 against 2·128·128 = 32,768" in text
        assert {"X@None", "W_DKV@None", "c_KV_raw@None"} <= set(shown_panes(app))
        await pilot.press("3")  # Expand
        assert "q_C[I,0] = X[I]·W_Q[:,0] = 1·1 + 0·0 + 1·1 + 0·0 = 2" in explanation(app)
        await pilot.press("4", "right", "right")  # Rotate: k_R' of love, turned by 1 radian
        assert "k_R'[love,0] = k_R[love,0]·cos(1·θ₀) − k_R[love,1]·sin(1·θ₀) = 1·0.540 − 1·0.841 = -0.301" \
            in explanation(app)
        await pilot.press("5", "right")  # Score on [q_C | q_R'] · [k_C | k_R']
        assert "scores[I,love] = Q[I]·K[love]" in explanation(app)
        await pilot.press("9")  # Absorb
        assert "q_L[I,0] = q_C[I]·W_UK[0,0..1] = 2·1 + 0·0 = 2" in explanation(app)
        for _ in range(7):  # to scores_L[I,love]
            await pilot.press("right")
        text = explanation(app)
        assert "scores_L[I,love] = [q_L | q_R'][I]·[c_KV | k_R'][love]" in text
        assert "✓ the same as scores[I,love] from the expanded keys: 3.382" in text


async def test_the_cache_view_holds_the_latent() -> None:
    app = QKVApp("mla")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("k")
        titles = [v.spec.title for v in shown_panes(app).values()]
        assert any(t.startswith("latent cache [c_KV | k_R'], every head") for t in titles), titles
        assert any(t.startswith("K, expanded from the latent") for t in titles), titles
        assert "d_c + d_rope = 2 + 2 = 4 numbers for every head" in explanation(app)


TO = {"compress": ["2"], "expand": ["3", "right"], "rotate": ["4", "right", "right"], "absorb": ["9", *["right"] * 7]}


class TestMlaSnapshots:
    @SIZES
    @pytest.mark.parametrize("stage", sorted(TO))
    def test_stage(self, snap_compare, stage: str, size: tuple[int, int]) -> None:
        assert snap_compare(QKVApp("mla"), press=TO[stage], terminal_size=size)
