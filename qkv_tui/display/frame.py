"""Frame: what one screen shows, as plain data (built by display/presenter.py and the side views)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from qkv_tui.base.fixed import fixed
from qkv_tui.display.view import Explanation, PaneSpec

if TYPE_CHECKING:
    from qkv_tui.display.heads_grid import HeadsShown


@fixed
class Frame:
    """One screen's content: the explanation and the panes, before any widget draws it."""

    explanation: Explanation
    focus: list[PaneSpec]
    extra: list[PaneSpec]
    notes: tuple[str, ...]  # lines added under the explanation (hand rounding, what-if)
    description: str  # the scenario's description, on its first screen
    heads: HeadsShown | None = None  # the heads view's maps, shown in place of panes
