"""Snapshots of the screens whose words tests/test_prose_state_latent_backward.py pins: a state head's heads view (whose δ each
token weighs, not where it looks) and deltanet_learns' Gates stage (X, not X̂, without a [norm])."""

from __future__ import annotations

from typing import Any

import pytest

from qkv_tui.ui.app import QKVApp

SIZES = pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=["120x40", "80x24"])


class TestStateHeadWords:
    @SIZES
    def test_heads_view_of_a_state_head(self, snap_compare: Any, size: tuple[int, int]) -> None:
        assert snap_compare(QKVApp("deltanet_learns"), press=["v"], terminal_size=size)

    @SIZES
    def test_gates_read_x_without_a_norm(self, snap_compare: Any, size: tuple[int, int]) -> None:
        assert snap_compare(QKVApp("deltanet_learns"), press=["4"], terminal_size=size)
