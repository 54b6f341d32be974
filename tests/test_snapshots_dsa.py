"""Snapshots of the built-in dsa at 80×24: the Index stage at a term whose dot ReLU zeroes (q_I, k_I and w beside
the term's pane), and the Select stage at a key the indexer drops (I beside the selection, the row's ranking). The
SVGs were rendered to PNG and looked at before they were accepted."""

from __future__ import annotations

from qkv_tui.ui.app import QKVApp


def test_index_stage(snap_compare) -> None:
    # stage 2 (Index), operation 8 + 16 + 1: term₂[the,the] = 0.500·ReLU(-3) = 0.500·0 = 0.000
    press = ["right_square_bracket", *["right"] * 24]
    assert snap_compare(QKVApp("dsa"), press=press, terminal_size=(80, 24))


def test_select_stage(snap_compare) -> None:
    # stage 3 (Select), row sat, key the: 1.500 ranks 3 of the 3 keys sat sees, beyond top_k = 2
    press = [*["right_square_bracket"] * 2, *["right"] * 8]
    assert snap_compare(QKVApp("dsa"), press=press, terminal_size=(80, 24))
