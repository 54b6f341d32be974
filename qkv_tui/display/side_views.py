"""The side views, each listed once: the app's keys, the palette, the help, the screenshots' names and
the closing summary walk this list (display/side_view.py says what an entry holds)."""

from __future__ import annotations

from qkv_tui.core.scenario import Scenario
from qkv_tui.display import decode_view, heads_view, tiled_view, train_view
from qkv_tui.display.side_view import SideView

SIDE_VIEWS: tuple[SideView, ...] = (
    decode_view.VIEW,  # k: prefill and decode over a paged KV cache
    tiled_view.VIEW,  # t: FlashAttention's online softmax
    train_view.VIEW,  # l: SGD steps on [backward]
    heads_view.VIEW,  # v: every head's attention map side by side
)
BY_NAME = {view.name: view for view in SIDE_VIEWS}


def shown_for(view: SideView, sc: Scenario) -> bool:
    """Whether the help, the palette and the closing summary name the view for this scenario."""
    return view.applies is None or view.applies(sc)


def side_view(name: str) -> SideView | None:
    """The side view of that name (Modes.view); None for the trace."""
    return BY_NAME.get(name)
