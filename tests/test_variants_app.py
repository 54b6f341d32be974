"""Pilot tests stepping through each modern stage in the app, and their snapshots."""

from __future__ import annotations

import pytest

from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.matrix import MatrixView
from qkv_tui.ui.widgets.panels import ExplainPanel, FormulaLine


def explanation(app: QKVApp) -> str:
    return app.query_one(ExplainPanel).plain


def shown_panes(app: QKVApp) -> dict[str, MatrixView]:
    return {v.spec.key: v for v in app.query(MatrixView) if v.display and v.spec is not None}


async def test_norm_stage_works_each_cell() -> None:
    app = QKVApp("pre_norm")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("2", "right", "right")  # the Norm stage, third cell of "I"
        assert "2/7 Norm" in str(app.query_one(FormulaLine).render())
        text = explanation(app)
        assert "X̂[I,2] = X[I,2] / √(ms + eps)·γ[2] = 1 / √(0.500 + 1e-05)·1 = 1.414" in text
        assert "ms(I) = mean of squares = (1·1 + 0·0 + 1·1 + 0·0) / 4 = 0.500" in text
        panes = shown_panes(app)
        assert panes["X_norm@None"].spec.current == (0, 2)
        assert panes["X_norm@None"].spec.title.startswith("X̂ = rmsnorm(X)")
        await pilot.press("3")  # Project now reads X̂
        assert "Q[I,0] = X̂[I]·W_Q[:,0] = 1.414·1 + 0.000·0 + 1.414·1 + 0.000·0 = 2.828" in explanation(app)
        assert "X_norm@None" in shown_panes(app)


@pytest.mark.parametrize(("name", "pairs", "line"), [
    ("rope", "pairs (0,1)(2,3)",
     "Q'[love,0] = Q[love,0]·cos(1·θ₀) − Q[love,1]·sin(1·θ₀) = 0·0.540 − 2·0.841 = -1.683"),
    # the permuted head: love's Query [0, 1, 2, 0] is rope's [0, 2, 1, 0] with columns 1 and 2 swapped,
    # so the half layout's pair (0, 2) turns rope's pair (0, 1) and gives rope's -1.683
    ("rope_layouts", "pairs (0,2)(1,3)",
     "Q'[love,0] = Q[love,0]·cos(1·θ₀) − Q[love,2]·sin(1·θ₀) = 0·0.540 − 2·0.841 = -1.683"),
])
async def test_rotate_stage_shows_the_pairs_of_each_layout(name: str, pairs: str, line: str) -> None:
    app = QKVApp(name)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("3")  # Rotate
        for _ in range(4):  # to Q'[love,0]
            await pilot.press("right")
        assert ("3/7 Rotate" if name == "rope" else "3/8 Rotate") in str(app.query_one(FormulaLine).render())
        assert line in explanation(app)
        rotated = shown_panes(app)["Q_rot@0"].spec
        assert pairs in rotated.title and rotated.current == (1, 0)
        labels = ("0p0", "1p0", "2p1", "3p1") if name == "rope" else ("0p0", "1p1", "2p0", "3p1")
        assert rotated.col_labels == labels
        await pilot.press("4", "right")  # Score reads the rotated vectors
        assert "scores[I,love] = Q'[I]·K'[love]" in explanation(app)
        assert {"Q_rot@0", "K_rotT@0"} <= set(shown_panes(app))


async def test_alibi_bias_pane_beside_scaled() -> None:
    app = QKVApp("alibi")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("4")
        for _ in range(3):  # scaled[cat,the]
            await pilot.press("right")
        text = explanation(app)
        assert "scaled[cat,the] = 1 / √1 + 0.5·(0 − 1) = 1.000 + (-0.500) = 0.500" in text
        panes = shown_panes(app)
        assert list(panes)[:3] == ["scores@0", "bias@0", "scaled@0"]
        assert panes["bias@0"].spec.title.startswith("bias = 0.5·(j − i)")
        await pilot.press("tab")  # the gentle head: slope 0.25
        assert "0.25·(0 − 1)" in explanation(app)


async def test_sliding_window_masks_old_keys() -> None:
    app = QKVApp("sliding_window")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("4")
        for _ in range(3 * 6):  # scaled[d,a]: three tokens back
            await pilot.press("right")
        text = explanation(app)
        assert "masked → −∞" in text
        assert 'sliding window of 3: "a" is 3 tokens before "d", out of reach' in text
        assert "sliding mask (window 3)" in shown_panes(app)["scaled@0"].spec.title


async def test_sink_column_in_the_softmax() -> None:
    app = QKVApp("sink")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("5")
        sink = shown_panes(app)["sink@0"].spec
        assert sink.col_labels == ("logit", "exp", "Σw") and sink.filled == 0  # nothing shown before the row
        await pilot.press("right", "right")  # weights[I,AI] completes the first row
        text = explanation(app)
        assert "sink: e^-1.887 = 0.152" in text
        assert "the sink's column is dropped after the sum: weights add up to 0.903, not 1" in text
        assert shown_panes(app)["sink@0"].spec.filled == 3  # the first row is complete


async def test_gqa_computes_each_kv_head_once() -> None:
    app = QKVApp("gqa")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("2")
        for _ in range(6):  # Q of head 1 is 3×2: the seventh operation is K[I,0]
            await pilot.press("right")
        text = explanation(app)
        assert "K/V head 1 is computed once and read by query heads 1, 2" in text
        assert "2 K/V heads instead of 4: 2× smaller" in text
        assert "(K/V head 1: heads 1,2)" in shown_panes(app)["K@0"].spec.title
        await pilot.press("tab")  # head 2 projects only its Queries
        project = [s.target for s in app.stepper.trace.segments if s.stage == "project" and s.head == 1]
        assert project == ["Q"]


SIZES = pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=["120x40", "80x24"])


class TestModernSnapshots:
    @SIZES
    def test_norm(self, snap_compare, size: tuple[int, int]) -> None:
        assert snap_compare(QKVApp("pre_norm"), press=["2", "right", "right"], terminal_size=size)

    @SIZES
    @pytest.mark.parametrize("name", ["rope", "rope_layouts"])
    def test_rotate(self, snap_compare, name: str, size: tuple[int, int]) -> None:
        assert snap_compare(QKVApp(name), press=["3", "right", "right", "right", "right"], terminal_size=size)

    @SIZES
    def test_alibi_scale(self, snap_compare, size: tuple[int, int]) -> None:
        assert snap_compare(QKVApp("alibi"), press=["5", "left"], terminal_size=size)

    @SIZES
    def test_sliding_scale(self, snap_compare, size: tuple[int, int]) -> None:
        assert snap_compare(QKVApp("sliding_window"), press=["5", "left"], terminal_size=size)

    @SIZES
    def test_sink_softmax(self, snap_compare, size: tuple[int, int]) -> None:
        assert snap_compare(QKVApp("sink"), press=["5", "right", "right", "right"], terminal_size=size)

    @SIZES
    def test_gqa_project(self, snap_compare, size: tuple[int, int]) -> None:
        assert snap_compare(QKVApp("gqa"), press=["2", *["right"] * 7], terminal_size=size)
