"""A snapshot of the built-in differential's Subtract stage at 80×24: p₁ and p₂ beside the map p₁ − λ·p₂ they make,
a cell's arithmetic and the rows' 1 − λ. The SVG was rendered to PNG and looked at before it was accepted."""

from __future__ import annotations

from qkv_tui.ui.app import QKVApp


def test_subtract_stage(snap_compare) -> None:
    # stage 10 (Subtract) of the tilted head, at cat → the: 0.196 − 0.400·0.804 = −0.126, a negative cell
    press = [*["right_square_bracket"] * 9, "tab", *["right"] * 3]
    assert snap_compare(QKVApp("differential"), press=press, terminal_size=(80, 24))
