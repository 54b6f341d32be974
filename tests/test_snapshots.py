"""Snapshot tests: each screen a learner meets, at 120×40 and 80×24.

Plain ``def`` tests (snap_compare runs its own event loop). Every SVG under
__snapshots__ was rendered to PNG and looked at before it was accepted.
"""

from __future__ import annotations

import pytest

from qkv_tui.ui.app import QKVApp

STAGES = {1: "embed", 2: "project", 3: "score", 4: "scale", 5: "softmax", 6: "mix"}


class TestSeedStages:
    @pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=["120x40", "80x24"])
    @pytest.mark.parametrize("stage", sorted(STAGES), ids=[STAGES[s] for s in sorted(STAGES)])
    def test_stage(self, snap_compare, stage: int, size: tuple[int, int]) -> None:
        assert snap_compare(QKVApp("i_love_ai"), press=[str(stage), "right"], terminal_size=size)

    @pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=["120x40", "80x24"])
    def test_everything_computed(self, snap_compare, size: tuple[int, int]) -> None:
        assert snap_compare(QKVApp("i_love_ai"), press=["end"], terminal_size=size)


class TestMasks:
    @pytest.mark.parametrize("stage", [4, 5], ids=["scale", "softmax"])
    @pytest.mark.parametrize("name", ["causal_mask", "padding_mask", "custom_mask"])
    def test_mask(self, snap_compare, name: str, stage: int) -> None:
        # the end of the stage: the whole masked matrix is on screen
        assert snap_compare(QKVApp(name), press=[str(stage + 1), "left"], terminal_size=(120, 40))


class TestHeadsAndCross:
    def test_second_head(self, snap_compare) -> None:
        assert snap_compare(QKVApp("two_heads"), press=["5", "right", "tab"], terminal_size=(120, 40))

    def test_concat_and_w_o(self, snap_compare) -> None:
        assert snap_compare(QKVApp("two_heads"), press=["end"], terminal_size=(120, 40))

    def test_cross_attention(self, snap_compare) -> None:
        assert snap_compare(QKVApp("cross_attention"), press=["3", "right", "right"], terminal_size=(120, 40))


class TestScreens:
    def test_help(self, snap_compare) -> None:
        assert snap_compare(QKVApp("i_love_ai"), press=["question_mark"], terminal_size=(80, 24))

    def test_notes(self, snap_compare) -> None:
        assert snap_compare(QKVApp("i_love_ai"), press=["n"], terminal_size=(80, 24))

    def test_too_small(self, snap_compare) -> None:
        assert snap_compare(QKVApp("i_love_ai"), terminal_size=(30, 8))


SIZES = pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=["120x40", "80x24"])


class TestModes:
    @SIZES
    def test_decode(self, snap_compare, size: tuple[int, int]) -> None:
        assert snap_compare(QKVApp("causal_mask"), press=["k", "right"], terminal_size=size)

    @SIZES
    def test_quiz_question(self, snap_compare, size: tuple[int, int]) -> None:
        assert snap_compare(QKVApp("i_love_ai"), press=["3", "left", "p", "right", "right", "5", "enter", "right"],
                            terminal_size=size)

    def test_quiz_softmax_question(self, snap_compare) -> None:
        # which key wins (answered by its number), then the weight: the row's inputs, no exponential or sum worked
        assert snap_compare(QKVApp("i_love_ai"), press=["5", "left", "p", "right", "2", "enter"], terminal_size=(80, 24))

    @SIZES
    def test_what_if(self, snap_compare, size: tuple[int, int]) -> None:
        assert snap_compare(QKVApp("i_love_ai"), press=["4", "right", "w"], terminal_size=size)

    @SIZES
    def test_hand_rounding(self, snap_compare, size: tuple[int, int]) -> None:
        assert snap_compare(QKVApp("i_love_ai"), press=["6", "right", "right", "right", "h"], terminal_size=size)


class TestProduction:
    @SIZES
    def test_tiles_rescale(self, snap_compare, size: tuple[int, int]) -> None:
        # the second tile's rescale: the running max did not move for I, α = 1
        assert snap_compare(QKVApp("i_love_ai"), press=["t", *["right"] * 9], terminal_size=size)

    @SIZES
    def test_tiles_sixteen_tokens(self, snap_compare, size: tuple[int, int]) -> None:
        # block 3 meets tile 2: the exponentials join ℓ; six tiles above the diagonal are skipped
        assert snap_compare(QKVApp("sixteen_tokens"), press=["t", *["right"] * 40], terminal_size=size)

    @SIZES
    def test_cache_chunked_sixteen_tokens(self, snap_compare, size: tuple[int, int]) -> None:
        # the second chunk of 4 sits bottom-right of 8 keys; a second block comes from the pool
        assert snap_compare(QKVApp("sixteen_tokens"), press=["k", "c", "right"], terminal_size=size)

    def test_cache_rolling_buffer(self, snap_compare) -> None:
        # window 3: "b" leaves the buffer as "e" arrives, and its block returns to the pool
        assert snap_compare(QKVApp("sliding_window"), press=["k", "right", "right"], terminal_size=(120, 40))
