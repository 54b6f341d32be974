"""The cache view (k) and the tiled view (t), driven by Pilot."""

from __future__ import annotations

from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.matrix import MatrixView
from qkv_tui.ui.widgets.panels import ExplainPanel, FormulaLine


def explanation(app: QKVApp) -> str:
    return app.query_one(ExplainPanel).plain


def formula(app: QKVApp) -> str:
    return str(app.query_one(FormulaLine).render())


def pane(app: QKVApp, key: str) -> MatrixView:
    return next(v for v in app.query(MatrixView) if v.display and v.spec is not None and v.spec.key == key)


async def test_cache_view_prefills_then_decodes() -> None:
    app = QKVApp("causal_mask")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("k")
        assert app.modes.view == "cache"
        assert "prefill step 1/2" in formula(app) and 'processing "I..love"' in formula(app)
        assert "generating" not in formula(app)
        assert pane(app, "dK").spec.values.shape == (2, 3)  # the prefill writes two rows at once
        assert pane(app, "dS").spec.values.tolist()[0][1] == float("-inf")  # the 2×2 causal block
        await pilot.press("right")
        cache = pane(app, "dK").spec
        assert cache.values.shape == (3, 3)
        assert cache.current == (2, None) and cache.rows == frozenset({0, 1})  # new row computed, old rows reused
        assert cache.row_labels[2].startswith("AI @")  # its physical block and slot
        text = explanation(app)
        assert "appended to the cache: K[AI] = [1, 1, 1], V[AI] = [1, 1, 0]: token 2 (AI) → block_table[1]" in text
        assert "✓ equal to attention over all tokens at once (no cache) within float64 rounding" in text
        assert "paging changes nothing: ✓" in text
        assert "offset S − L = 3 − 1 = 2" in text and "is_causal=True" in text
        assert "computed 3, reused 2; without a cache: 5 computed" in text
        # ] does nothing in the cache view: out of its footer
        assert app.check_action("next", ()) is None and app.check_action("next_stage", ()) is False
        await pilot.press("c")  # chunked prefill: chunks of one token for three tokens
        assert app.modes.schedule == "chunked" and app.modes.side_step == 0
        assert "chunked prefill step 1/3" in formula(app)
        await pilot.press("c", "end")
        assert app.modes.schedule == "tokens" and "decode step 3/3" in formula(app)
        assert "computed 3, reused 3; without a cache: 6" in explanation(app)
        await pilot.press("k")
        assert app.modes.view == "trace" and app.position.index == 0


async def test_cache_view_says_when_it_cannot_follow_the_mask() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("k", "c", "c")  # token by token: step 1 is I alone
        text = explanation(app)
        assert "out[I] = weights·V_cache = 1·[1, 0, 1] = [1.000, 0.000, 1.000]" in text
        assert "the Mix stage (no mask) had out[I] = [1.000, 1.637, 0.070]" in text
        assert "Decoding with a cache is causal" in text
        assert pane(app, "dmix").spec.values.shape == (3, 3)


async def test_cross_attention_cache_is_computed_once() -> None:
    app = QKVApp("cross_attention")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("k")
        assert "context K and V computed once now" in explanation(app)
        await pilot.press("right")
        text = explanation(app)
        assert "context K and V: all 3 rows read from the cache, nothing recomputed or added" in text
        assert "appended" not in text
    app = QKVApp("two_heads")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("k", "tab", "right")
        assert app.position.head == 1 and "head 2 (2/2)" in formula(app)
        assert "✓ equal" in explanation(app)


async def test_tiled_view_walks_flashattention() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("t")
        assert app.modes.view == "tiles"
        assert "block 1/2 · tile 1/2" in formula(app) and "op 1/28" in formula(app)  # 26 tiled, then the fused pages
        assert "S[I] = Q[I]·K[I..love]ᵀ/√3 = [1, 5]/√3 = [0.577, 2.887]" in explanation(app)
        assert pane(app, "t_S").spec.values.shape == (2, 2)  # one tile, never the full matrix
        for _ in range(4):
            await pilot.press("right")
        assert "p[I] = e^(S − m) = e^([0.577, 2.887] − 2.887) = e^[-2.310, 0.000] = [0.099, 1.000]" in explanation(app)
        await pilot.press("end")  # P rebuilt from L, the last page
        assert "op 28/28" in formula(app) and "✓ equal to the trace's softmax weights" in explanation(app)
        await pilot.press("left", "left")
        assert "op 26/28" in formula(app)
        text = explanation(app)
        assert "O[AI] = Õ/ℓ" in text and "✓ equal to the Mix stage within float64 rounding (every |diff| ≤ 1e-" in text
        assert pane(app, "t_out").spec.filled == 9
        await pilot.press("k")  # from tiles straight to the cache view
        assert app.modes.view == "cache"
        await pilot.press("t", "t")
        assert app.modes.view == "trace"


async def test_tiled_view_counts_skipped_tiles() -> None:
    app = QKVApp("causal_mask")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("t")
        assert "op 1/22" in formula(app)  # 20 tiled, then the fused kernel's two pages
        assert "tiles skipped: 0 so far, 1 of 4 in all" in explanation(app)
        await pilot.press("end", "left", "left")
        assert "✓ equal to the Mix stage" in explanation(app)


async def test_panes_redraw_when_a_step_keeps_their_shape() -> None:
    # chunk 2 has the shape of chunk 1 (4 queries): its rows must still be redrawn with its own tokens
    app = QKVApp("sixteen_tokens")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("k", "c", "right")
        await pilot.pause()
        q = pane(app, "dq")
        assert q.spec.row_labels == ("a", "mat", "because", "she")
        assert [q.render_line(y).text.split()[0] for y in range(1, 5)] == ["a", "mat", "because", "she"]
        await pilot.press("t", *["right"] * 40)  # block 4: its Q block has block 3's shape
        await pilot.pause()
        block = pane(app, "t_Q")
        assert [block.render_line(y).text.split()[0] for y in range(1, 5)] == ["slept", "all", "day", "long"]


async def test_sliding_window_cache_is_a_rolling_buffer() -> None:
    app = QKVApp("sliding_window")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("k", "right", "right")
        assert "rolling buffer (window 3): K/V of b left the cache" in explanation(app)
        cache = pane(app, "dK").spec
        assert cache.values.shape[0] == 3 and cache.row_labels[0].startswith("c @")
