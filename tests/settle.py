"""Waiting for the app to finish its work, by condition rather than by time.

``pilot.pause()`` waits for the queued messages and then for the CPU to look idle. On a
loaded machine the process looks idle while it is only starved, and Textual's footer is
rebuilt asynchronously (after a refresh, then a recompose that mounts new keys), so a
screenshot taken after one pause may show the footer of an earlier state, or none at all.
That was the race in ``test_partial_redraws_leave_no_stale_cells``: a freshly started app's
screenshot sometimes had an empty footer line.

Every ``pause()`` processes everything queued before it, so the chain of messages
advances by at least one hop each time, however slow the machine: looping until a
condition holds is deterministic where one pause is a bet on timing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from textual.app import App
from textual.pilot import Pilot
from textual.strip import Strip

from qkv_tui.ui.widgets.panels import KeyFooter

ROUNDS = 200  # far more hops than any chain of messages here needs


def footer_matches(app: App[object]) -> bool:
    """The footer shows every key the app's bindings list, each greyed out as check_action says.

    Keys the footer adds on its own (the command palette's) need only agree on their state, and
    keys it left out for want of room (KeyFooter.left_out) need not be shown.
    """
    active = {binding.action: (enabled, binding.show) for _, binding, enabled, _ in app.screen.active_bindings.values()}
    # FooterKey marks a greyed-out key with the "-disabled" class (its own `disabled` stays False)
    shown = {key.action: not key.has_class("-disabled") for key in app.screen.query("FooterKey")}  # type: ignore[attr-defined]
    left_out = frozenset().union(*(footer.left_out for footer in app.screen.query(KeyFooter)))
    listed = {action for action, (_, show) in active.items() if show} - left_out
    return listed <= shown.keys() and all(action in active and active[action][0] == enabled
                                          for action, enabled in shown.items())


def frame(app: App[object]) -> list[list[Strip]]:
    """What a screenshot of the app would draw: the whole screen's lines, as export_screenshot renders them
    before it writes them out as SVG (a tenth of its cost: 2 ms against 20 for a 120x40 screen)."""
    update = app.screen._compositor.render_update(full=True, screen_stack=app._background_screens)
    return [list(strips) for strips in update.strips]


async def settle(pilot: Pilot[object]) -> None:
    """Pause until the footer is rebuilt for the current state and two frames in a row agree."""
    app = pilot.app
    previous = None
    for _ in range(ROUNDS):
        await pilot.pause()
        if not footer_matches(app):
            previous = None
            continue
        shot = frame(app)
        if shot == previous:
            return
        previous = shot
    raise AssertionError("the app did not settle")


def pressing(*keys: str) -> Callable[[Pilot[object]], Awaitable[None]]:
    """A snapshot's run_before: press the keys, then wait for the app to settle."""

    async def run(pilot: Pilot[object]) -> None:
        await settle(pilot)
        if keys:
            await pilot.press(*keys)
        await settle(pilot)

    return run
