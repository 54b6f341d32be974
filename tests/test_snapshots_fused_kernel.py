"""The tiles view's last page on the built-in fused_kernel: P rebuilt from L beside the trace's weights."""

from __future__ import annotations

from qkv_tui.ui.app import QKVApp


def test_tiles_P_rebuilt_from_L(snap_compare) -> None:
    assert snap_compare(QKVApp("fused_kernel"), press=["t", "end"], terminal_size=(120, 40))
