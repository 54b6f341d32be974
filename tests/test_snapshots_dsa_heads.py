"""Snapshot of the built-in dsa's heads view at 80×24 (issue 31): the keys the indexer left out drawn with the
masked dot, the legend and the meaning saying a dot is masked or not selected by the indexer. The SVG was rendered
to PNG and looked at before it was accepted."""

from __future__ import annotations

from qkv_tui.ui.app import QKVApp


def test_heads_view_marks_dropped_keys(snap_compare) -> None:
    assert snap_compare(QKVApp("dsa"), press=["v"], terminal_size=(80, 24))
