"""The Rotate stage of partial rotary and scaled RoPE in the app: pass-through cells, the frequency pane, snapshots."""

from __future__ import annotations

import pytest

from qkv_tui.ui.app import QKVApp

from .test_variants_app import explanation, shown_panes


async def test_partial_rotary_passes_dims_through() -> None:
    app = QKVApp("partial_rope")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("3", "right", "right")  # Q'[I,2]: past the turned pair
        text = explanation(app)
        assert "Q'[I,2] = Q[I,2] = 1.000 (not rotated: partial 0.5)" in text
        assert "only the first r = int(0.5·4) = 2 of dₖ = 4 dimensions turn" in text
        rotated = shown_panes(app)["Q_rot@0"].spec
        assert "pairs (0,1) pass 2,3" in rotated.title and rotated.current == (0, 2)
        assert rotated.col_labels == ("0p0", "1p0", "2=", "3=")


async def test_scaled_rope_shows_its_frequencies() -> None:
    app = QKVApp("rope_scaling")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("3", *["right"] * 6)  # Q'[love,2]: pair 1, interpolated
        text = explanation(app)
        assert "Q'[love,2] = Q[love,2]·a·cos(256·θ'₁) − Q[love,3]·a·sin(256·θ'₁) = 1·0.9133 − 0·0.6800 = 0.913" in text
        assert "θ₁ = 10000^(−2·1/4) = 0.0100 → θ'₁ = 0.0025" in text
        assert "θ'₁ = θ₁ / factor = 0.0100 / 4 = 0.0025" in text
        assert "cos·a = 0.8021·1.1386 = 0.9133 | sin·a = 0.5972·1.1386 = 0.6800" in text
        freq = shown_panes(app)["rope_freq@0"].spec
        assert freq.title.startswith("θ → θ' yarn") and freq.col_labels == ("θ", "θ'")


SIZES = pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=["120x40", "80x24"])


class TestRopeScalingSnapshots:
    @SIZES
    def test_partial_pass_through(self, snap_compare, size: tuple[int, int]) -> None:
        assert snap_compare(QKVApp("partial_rope"), press=["3", *["right"] * 6], terminal_size=size)

    @SIZES
    def test_scaled_frequencies(self, snap_compare, size: tuple[int, int]) -> None:
        assert snap_compare(QKVApp("rope_scaling"), press=["3", *["right"] * 6], terminal_size=size)

    @SIZES
    def test_score_whole_at_80_columns(self, snap_compare, size: tuple[int, int]) -> None:
        """Q' 3×4, K'ᵀ and the scores side by side unscrolled: at 80 columns K'ᵀ without its dimension labels."""
        assert snap_compare(QKVApp("rope_scaling"), press=["4", *["right"] * 8], terminal_size=size)
