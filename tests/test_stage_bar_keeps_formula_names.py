"""A stage bar short of room drops the other stages' names and keeps their keys ("1 Embed" becomes "1"); a stage
past the tenth has no key and keeps its name. [differential]'s stage 13 is named by its formula, "1 − λ_init": cut
to its first word it read "1", key 1's Embed, and its backward stage "d(1 − λ_init)" read "d(1"."""

from __future__ import annotations

from qkv_tui import compute, load_scenario
from qkv_tui.display.modes import Modes
from qkv_tui.display.presenter import Presenter
from qkv_tui.display.stage_bar import fit_bar, short
from qkv_tui.teach.stepper import Position


def test_short_keeps_a_key_and_leaves_a_formula_whole() -> None:
    assert short("1 Embed") == "1" and short("0 W_O") == "0" and short("12 the") == "12"
    assert short("1 − λ_init") == "1 − λ_init" and short("d(1 − λ_init)") == "d(1 − λ_init)"
    assert short("dScore") == "dScore" and short("tile scores") == "tile"


def _bars(name: str, width: int) -> list[str]:
    presenter = Presenter(compute(load_scenario(name)))
    out = []
    for run in presenter.exact.runs:
        stages = presenter.frame(Position(run.start, run.head or 0), Modes()).explanation.stages
        out.append(fit_bar("", stages, width).plain)
    return out


def test_differential_bars_never_show_a_bare_1_for_stage_13() -> None:
    for name in ("differential", "differential_learns"):
        for width in (80, 100, 120):
            for bar in _bars(name, width):
                pieces = [piece.strip() for piece in bar.split("›")]
                assert pieces.count("1") <= 1, bar  # key 1 (Embed) only; stage 13 keeps "1 − λ_init"
                assert "d(1" not in pieces, bar
