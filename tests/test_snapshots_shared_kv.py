"""Snapshots of the built-in shared_kv at 80×24: the Project stage computing Q only (its words: K and V reused from
layer 2, not computed here), and the Reuse stage at K[cat,1], a cell read from layer 2's cache. The SVGs were
rendered to PNG and looked at before they were accepted."""

from __future__ import annotations

from qkv_tui.ui.app import QKVApp


def test_project_stage_computes_q_only(snap_compare) -> None:
    # stage 2 (Project), operation 3: Q[cat,0] = X[cat]·W_Q[:,h1:0] = 0
    press = ["right_square_bracket", *["right"] * 2]
    assert snap_compare(QKVApp("shared_kv"), press=press, terminal_size=(80, 24))


def test_reuse_stage(snap_compare) -> None:
    # stage 3 (Reuse), operation 4: K[cat,1] = layer 2's K[cat,1] = -1
    press = [*["right_square_bracket"] * 2, *["right"] * 3]
    assert snap_compare(QKVApp("shared_kv"), press=press, terminal_size=(80, 24))
