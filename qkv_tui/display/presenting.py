"""Presenting to a room: f puts the prose away, then everything but the stage bar, then brings it back.

With the prose hidden the matrices get the explanation's room and only the working stays (the
arithmetic, its details and the notes the learner switched on); a blank slate keeps the stage bar
and the formula line, so the class knows where it is while it predicts what comes next.
"""

from __future__ import annotations

from dataclasses import replace

from qkv_tui.display.frame import Frame
from qkv_tui.display.modes import PROSE

BLANK_HINT = "(blank slate: f shows the screen again)"


def next_prose(prose: str) -> str:
    """What f switches to: shown → prose hidden → blank → shown."""
    return PROSE[(PROSE.index(prose) + 1) % len(PROSE)]


def presented(frame: Frame, prose: str) -> Frame:
    """The frame with what ``prose`` puts away taken out (the ExplainPanel leaves out the meaning)."""
    if prose == "hidden":
        return replace(frame, description="")
    if prose == "blank":
        return Frame(replace(frame.explanation, arithmetic=BLANK_HINT, details=()), [], [], (), "")
    return frame


def prose_flag(prose: str) -> str:
    """The formula line's flag for it ("" when everything shows)."""
    return {"hidden": "prose hidden (f)", "blank": "blank (f)"}.get(prose, "")
