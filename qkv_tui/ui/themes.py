"""Themes: a dark one for screens, a light one for projectors, and the highlight colours of each.

The highlights never rely on hue alone, so they survive a greyscale projector and red-green
colour blindness: the current cell is a light box with bold dark text, the cells it reads a
dark box with light text, the row maximum bold and underlined, an edited-and-changed cell
bold italic on a mid-dark box, masked cells dim (and they read −∞ or 0). A learner's choice
is remembered between runs only when asked (``--save-theme``: edges/config.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.style import Style

from qkv_tui.ui.widgets import matrix, panels

THEMES = {"dark": "textual-dark", "light": "textual-light"}  # our names -> Textual's themes


@dataclass(frozen=True)
class Palette:
    label: Style
    header: Style
    current: Style
    operand: Style
    row_max: Style
    masked: Style
    changed: Style
    heat_low: tuple[int, int, int]
    heat_high: tuple[int, int, int]
    text: dict[str, str]  # the panels' text styles (widgets/panels.py TEXT)
    stages: dict[str, str]  # the stage bar's current / done / todo stages


DARK = Palette(
    label=Style(color="#d7af5f", bold=True),
    header=Style(color="#8a8a8a", bold=True),
    current=Style(color="#000000", bgcolor="#ffd75f", bold=True),
    operand=Style(bgcolor="#1f4e79", color="#ffffff"),
    row_max=Style(color="#5fd75f", bold=True, underline=True),
    masked=Style(color="#6c6c6c", dim=True),
    changed=Style(color="#ffffff", bgcolor="#875f00", bold=True, italic=True),
    heat_low=(32, 32, 40),
    heat_high=(20, 120, 70),
    text=dict(panels.TEXT),
    stages=dict(panels.STAGE_STYLE),
)

LIGHT = Palette(
    label=Style(color="#5f3f00", bold=True),
    header=Style(color="#4e4e4e", bold=True),
    current=Style(color="#000000", bgcolor="#f08000", bold=True),  # mid grey in greyscale: darker than any heat shade
    operand=Style(bgcolor="#1f4e79", color="#ffffff"),
    row_max=Style(color="#005f00", bold=True, underline=True),
    masked=Style(color="#8a8a8a"),
    changed=Style(color="#ffffff", bgcolor="#8f4a00", bold=True, italic=True),
    heat_low=(250, 250, 250),
    heat_high=(150, 205, 165),
    text={
        "muted": "#5f5f5f", "formula": "#303030", "formula_active": "bold #ffffff on #005f87",
        "stage_label": "bold #875f00", "head_label": "bold #005f87", "arithmetic": "bold #5f3f00",
        "detail": "#303030", "note": "#005f3f", "meaning": "italic #4e4e4e", "description": "#00005f",
    },
    stages={"current": "bold #000000 on #ffc400", "done": "#005f00", "todo": "#6c6c6c"},
)


def palette_for(dark: bool) -> Palette:
    return DARK if dark else LIGHT


def use_palette(palette: Palette) -> None:
    """Make the matrix panes draw with ``palette`` (they read these module styles on every row drawn)."""
    matrix.LABEL = palette.label
    matrix.HEADER = palette.header
    matrix.CURRENT = palette.current
    matrix.OPERAND = palette.operand
    matrix.ROW_MAX = palette.row_max
    matrix.MASKED = palette.masked
    matrix.CHANGED = palette.changed
    panels.TEXT = dict(palette.text)
    panels.STAGE_STYLE = dict(palette.stages)
    if (palette.heat_low, palette.heat_high) != (matrix.HEAT_LOW, matrix.HEAT_HIGH):
        matrix.HEAT_LOW, matrix.HEAT_HIGH = palette.heat_low, palette.heat_high
        matrix._heat.cache_clear()
