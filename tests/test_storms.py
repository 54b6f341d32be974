"""Key storms and resize storms: every key the app binds, at sizes from 1×1 to 250×80.

A seeded storm per scenario presses every bound key at least once (in a shuffled order, with
more drawn at random), types junk into whatever box is open, picks palette commands, and
resizes the terminal many times on the way, below the minimum size and back. After each
resize has settled the screen must be consistent: no exception, the "too small" message
exactly when the terminal is below the minimum, the position in bounds. At the end, the
screen must equal a fresh app's put straight into the same state at the same size: a cell
left over from an earlier frame (a stale cell) shows up as a difference.

Nothing here is timed: every wait is for a condition (see settle below), and the storm's
moves depend only on the seed.
"""

from __future__ import annotations

import asyncio
import io
import random
import sys
import unicodedata
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from rich.console import Console
from textual import events
from textual.app import App
from textual.binding import Binding
from textual.command import CommandPalette
from textual.drivers.headless_driver import HeadlessDriver
from textual.geometry import Size
from textual.keys import REPLACED_KEYS, _character_to_key, _get_unicode_name_from_key
from textual.message_pump import MessagePump
from textual.pilot import Pilot
from textual.screen import Screen
from textual.widgets import Footer, Input

from qkv_tui.ui.app import MIN_HEIGHT, MIN_WIDTH, QKVApp
from qkv_tui.ui.edit_prompt import EditScreen
from qkv_tui.ui.live import FASTER, FOOTER_ROOM, SLOWER
from qkv_tui.ui.widgets.heatmap import HeatmapScreen
from qkv_tui.ui.widgets.matrix import MatrixView
from qkv_tui.ui.widgets.panels import ExplainPanel
from qkv_tui.ui.widgets.screens import GotoScreen, HelpScreen, NotesScreen

from .settle import ROUNDS, footer_matches

MAX_WIDTH, MAX_HEIGHT = 250, 80
# the corners and both sides of the minimum: where an off-by-one in "too small" would show
EDGE_SIZES = [(1, 1), (MAX_WIDTH, MAX_HEIGHT), (1, MAX_HEIGHT), (MAX_WIDTH, 1),
              (MIN_WIDTH - 1, MIN_HEIGHT - 1), (MIN_WIDTH - 1, MIN_HEIGHT), (MIN_WIDTH, MIN_HEIGHT - 1),
              (MIN_WIDTH, MIN_HEIGHT), (MIN_WIDTH + 1, MIN_HEIGHT + 1), (80, 24)]
# built-ins of every kind: one head, two heads, a mask, cross-attention, grouped-query, 16 tokens
STORM_SCENARIOS = ["i_love_ai", "two_heads", "causal_mask", "cross_attention", "gqa", "sixteen_tokens"]
EXTRA_MOVES = 14  # random moves beyond one press of every key
RESIZE_EVERY = 13  # a resize, or a burst of them, after this many moves (each settles: some 0.3 s)
# what a learner types into the go-to box, the quiz's answer, the edit prompt or the palette
TYPED = ["²", "①", "-1", "0", "99999999999999999999", "0.5", "1e308", "nan", "-0", "X[1,0] = 2", "scale = 1",
         "W_Q[1,2] = 3", "42"]
PASTED = ["9" * 5000, "1\n2", "\x1b[31m", "٣"]  # a paste arrives whole, control characters and all
PALETTE = ["Theme: light", "Theme: dark", "Fewer decimals", "More decimals", "Head", "Stage 3", "two_h",
           "sixteen", "Keys", "Quit", "Attention map", "Predict"]


def _keys_of(*owners: type) -> list[str]:
    keys: list[str] = []
    for owner in owners:
        for binding in getattr(owner, "BINDINGS", []):
            if isinstance(binding, Binding):
                keys += [key.strip() for key in binding.key.split(",")]
    return keys


# every key the app and its screens bind, Textual's own app keys (ctrl+q, ctrl+c) and the
# keys of the boxes a learner types into (the palette's list keys, the answer and go-to inputs)
ALL_KEYS = sorted(set(_keys_of(QKVApp, App, Screen, HelpScreen, NotesScreen, GotoScreen, EditScreen, HeatmapScreen,
                               CommandPalette))
                  | {"ctrl+p", "backspace", "delete", "enter", "up", "down", "pageup", "pagedown", *FASTER, *SLOWER})


class StormApp(QKVApp):
    """The app with quitting counted, not done: the storm presses q and picks Quit in the palette."""

    quits = 0

    async def action_quit(self) -> None:
        self.quits += 1


@dataclass(frozen=True)
class Move:
    kind: str  # key, type, paste, palette, tick, resize
    arg: object = None


# what a learner does besides single keys: (kind, weight); each is played by play() below
KINDS = {"key": 10, "type": 2, "paste": 1, "palette": 1, "tick": 1, "quiz": 3, "goto": 2, "edit": 1, "steps": 2}
POLL = 0.001  # seconds between looks at a condition (how long it takes is never asserted)
MODAL_PATIENCE = 3  # moves a modal screen stays open before the learner presses escape


def storm(seed: int) -> Iterator[Move]:
    """A storm's moves: every key once, and random moves, shuffled, with resizes in between."""
    rng = random.Random(seed)
    moves = [Move("key", key) for key in ALL_KEYS]
    for _ in range(EXTRA_MOVES):
        kind = rng.choices(list(KINDS), weights=list(KINDS.values()))[0]
        arg: object = {"key": lambda: rng.choice(ALL_KEYS), "type": lambda: rng.choice(TYPED),
                       "paste": lambda: rng.choice(PASTED), "palette": lambda: rng.choice(PALETTE),
                       "tick": lambda: None, "quiz": lambda: rng.choice(TYPED),
                       "goto": lambda: rng.choice(TYPED), "edit": lambda: rng.choice(TYPED),
                       "steps": lambda: rng.choice(["right", "right", "right", "left", "right_square_bracket", "tab"]),
                       }[kind]()
        moves.append(Move(kind, arg))
    rng.shuffle(moves)
    sizes = list(EDGE_SIZES)
    rng.shuffle(sizes)
    for i, move in enumerate(moves):
        yield move
        if i % RESIZE_EVERY == RESIZE_EVERY - 1:
            burst = [sizes.pop() if sizes else random_size(rng) for _ in range(rng.choice([1, 2, 3, 6]))]
            yield Move("resize", burst)
    if sizes:  # every edge at least once
        yield Move("resize", sizes)


def random_size(rng: random.Random) -> tuple[int, int]:
    """Anywhere from 1×1 to 250×80, half the time within a few cells of the minimum."""
    if rng.random() < 0.5:
        return (max(1, MIN_WIDTH + rng.randint(-3, 3)), max(1, MIN_HEIGHT + rng.randint(-3, 3)))
    return (rng.randint(1, MAX_WIDTH), rng.randint(1, MAX_HEIGHT))


def seed_of(name: str) -> int:
    return zlib.crc32(name.encode())  # stable across runs, unlike hash()


# --- looking at the screen ---------------------------------------------------------------


def dump(app: App[object], styles: bool = True) -> str:
    """The whole screen as the terminal shows it (modal screens over the ones below), as text."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), force_terminal=True,
                      color_system="truecolor", record=True, legacy_windows=False, safe_box=False)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return console.export_text(styles=styles)


async def settle(pilot: Pilot[object]) -> None:
    """Pause until two screen dumps in a row agree (and the footer is rebuilt, on the main screen).

    The same wait as tests/settle.py, for any screen on top: a modal has no footer of its own.
    """
    app = pilot.app
    previous = None
    for _ in range(ROUNDS):
        await pilot.pause()
        await app.workers.wait_for_complete()  # the palette searches in a worker
        if app.screen is app.screen_stack[0] and not footer_matches(app):
            previous = None
            continue
        shot = dump(app)
        if shot == previous:
            return
        previous = shot
    raise AssertionError("the app did not settle")


def assert_consistent(app: StormApp, size: tuple[int, int]) -> None:
    """No exception; "too small" exactly below the minimum; the position within bounds."""
    assert app.return_code in (None, 0), app.return_code  # 1 once an exception reached Textual
    assert app.is_running and app.return_code is None
    assert tuple(app.size) == size
    small = size[0] < MIN_WIDTH or size[1] < MIN_HEIGHT
    main = app.screen_stack[0]
    assert main.has_class("-too-small") == small, size
    notice = main.query("#too-small")  # mounted the first time the terminal is too small
    if small:
        assert f"have {size[0]}×{size[1]}" in str(notice.only_one().render()), size
    if app.screen is main:  # what is drawn, not only what is flagged
        body = main.query_one("#main")
        if small:
            assert body.region.area == 0 and notice.only_one().display
        else:
            assert body.region.area > 0 and all(message.region.area == 0 for message in notice)
            assert "too small" not in dump(app, styles=False), size
        # the palette's key only where it leaves room for the others (q quit, which the message names)
        footer = main.query_one(Footer)
        wide = size[0] >= FOOTER_ROOM
        assert footer.show_command_palette == wide and bool(footer.query(".-command-palette")) == wide, size
    for pane in [*main.query(MatrixView), *main.query(ExplainPanel)]:
        if not (small or pane.size.area == 0):  # a scrollbar shows exactly when there is something to scroll
            assert pane.show_vertical_scrollbar == (pane.max_scroll_y > 0), (pane.id, pane.virtual_size, pane.size)
            assert pane.show_horizontal_scrollbar == (pane.max_scroll_x > 0), (pane.id, pane.virtual_size, pane.size)
            # and its thumb says where the pane is scrolled to, out of how much
            if pane.show_vertical_scrollbar:
                bar = pane.vertical_scrollbar
                assert (bar.position, bar.window_virtual_size) == (pane.scroll_y, pane.virtual_size.height), pane.id
            if pane.show_horizontal_scrollbar:
                bar = pane.horizontal_scrollbar
                assert (bar.position, bar.window_virtual_size) == (pane.scroll_x, pane.virtual_size.width), pane.id
    position = app.position
    assert 0 <= position.index < len(app.trace), position
    assert 0 <= position.head < app.stepper.head_count, position
    assert app.modes.side_step >= 0, app.modes
    if app.modes.side:
        assert app.modes.side_step <= app.presenter.side_steps(app.modes, app.position.head) - 1, app.modes


# --- driving the app ---------------------------------------------------------------------


async def resize(pilot: Pilot[object], sizes: list[tuple[int, int]]) -> None:
    """A burst of resizes as a terminal being dragged sends them: one after another, then a pause."""
    app = pilot.app
    driver = app._driver
    assert isinstance(driver, HeadlessDriver)
    for width, height in sizes:
        driver._size = Size(width, height)
        app.post_message(events.Resize(Size(width, height), Size(width, height)))
    await pilot.pause()


def key_event(key: str) -> events.Key:
    """The event a terminal sends for a key name or a character (as Pilot.press makes it)."""
    if len(key) == 1 and not key.isalnum():
        key = _character_to_key(key)
    try:
        char: str | None = unicodedata.lookup(_get_unicode_name_from_key(REPLACED_KEYS.get(key, key)))
    except KeyError:
        char = key if len(key) == 1 else None
    return events.Key(key, char)


async def handled(app: App[object]) -> None:
    """Wait until the app and every widget of its screens have handled what was queued, and what that set off.

    A condition, not a time: each queue gets a marker, and a round ends when every marker is
    through, or its widget has stopped (a modal closing drops what was queued for it). One round
    is not enough: a key goes from the app to the focused widget and bubbles back up, one queue
    after another, to the binding that acts on it (``?`` reaches action_help only on its way back
    to the app). A round whose markers were all through while a hop was still to come let a storm's
    last ``?`` open help after close_everything had counted one screen, and the final screen was
    then the trace dimmed under help (Textual's ModalScreen background) against a fresh one without.
    Neither the app nor Textual left a screen dimmed (the help was open, as pressed; no Textual issue
    reports a dim left behind after a modal closes): the wait was short.
    So rounds repeat until two in a row end with every queue empty and the same screens up.
    Pilot.pause would also wait for the process to look idle and draw a frame: some 75 ms a key,
    most of a storm.
    """
    quiet = 0
    for _ in range(ROUNDS):
        stack = list(app.screen_stack)
        nodes = [app, *(node for screen in stack for node in screen.walk_children(with_self=True))]
        through: set[MessagePump] = set()
        waiting = [node for node in nodes
                   if node.call_later(lambda node=node, through=through: through.add(node))]  # a closed widget: no marker
        while waiting:
            await asyncio.sleep(POLL)
            waiting = [node for node in waiting if node not in through and node.is_running]
        idle = app.screen_stack == stack and not any(node.message_queue_size for node in nodes if node.is_running)
        quiet = quiet + 1 if idle else 0
        if quiet == 2:
            return
    raise AssertionError("the app did not finish handling what was queued")


async def press(pilot: Pilot[object], *keys: str) -> None:
    """Press keys, each handled before the next is sent."""
    for key in keys:
        pilot.app.post_message(key_event(key))
        await handled(pilot.app)


async def play(pilot: Pilot[object], move: Move) -> None:
    app = pilot.app
    assert isinstance(app, StormApp)
    if move.kind == "key":
        await press(pilot, str(move.arg))
    elif move.kind == "type":
        await press(pilot, *str(move.arg))
    elif move.kind == "paste":
        app.post_message(events.Paste(str(move.arg)))
        await handled(app)
    elif move.kind == "palette":
        await press(pilot, "ctrl+p", *str(move.arg))
        await app.workers.wait_for_complete()  # the search has answered: enter picks what it found
        await handled(app)
        await press(pilot, "enter")
    elif move.kind == "tick":
        if app.live.playing:
            app.live.tick()
        await handled(app)
    elif move.kind == "quiz":  # predict the next result: switch the quiz on if need be, step, answer
        if app.modes.quiz is None:
            await press(pilot, "p")
        await press(pilot, "right", *str(move.arg), "enter")
    elif move.kind == "goto":
        await press(pilot, "g", *str(move.arg), "enter")
    elif move.kind == "edit":
        await press(pilot, "e", *["backspace"] * 3, *str(move.arg), "enter")
    elif move.kind == "steps":
        await press(pilot, *[str(move.arg)] * 4)
    elif move.kind == "resize":
        assert isinstance(move.arg, list)
        await resize(pilot, move.arg)


async def close_everything(pilot: Pilot[object]) -> None:
    """Back to the trace: escape closes every modal (the palette, help, notes, go-to, edit, the map)."""
    app = pilot.app
    assert isinstance(app, StormApp)
    for _ in range(10):
        await handled(app)  # a key still on its way (its screen not yet pushed) is counted too
        await settle(pilot)
        if len(app.screen_stack) == 1:
            break
        await press(pilot, "escape")
    assert len(app.screen_stack) == 1, app.screen_stack
    app.live.timer_stop()
    app.clear_notifications()  # toasts time out: not part of the state compared
    await handled(app)
    await settle(pilot)
    assert len(app.screen_stack) == 1, app.screen_stack


def scrolls(app: App[object]) -> dict[str, tuple[float, float]]:
    """How far each pane on screen is scrolled (a storm may have mounted slots a fresh app lacks: hidden)."""
    panes = [*app.query(MatrixView), *app.query(ExplainPanel)]
    return {str(w.id): (w.scroll_x, w.scroll_y) for w in panes if w.display and w.parent and w.parent.display}


async def fresh_screen(stormed: StormApp, size: tuple[int, int]) -> tuple[str, str]:
    """The screen of a new app put straight into the stormed app's state, at the same size.

    A pane scrolls only as far as it must to keep the current cell in view, so how far it is
    scrolled depends on the way there: the fresh app takes the stormed app's scroll offsets.
    """
    app = StormApp(stormed.scenario, stormed.comp)
    async with app.run_test(size=size) as pilot:
        app.theme = stormed.theme
        await settle(pilot)
        app.live.dirty = list(stormed.live.dirty)
        app.live.changed_from, app.live.marked_at = stormed.live.changed_from, stormed.live.marked_at
        app.modes = stormed.modes
        app.position = stormed.position
        await settle(pilot)  # the quiz's bar is mounted the first time the quiz asks
        if answer := app.query("#quiz-input"):
            answer.only_one(Input).value = stormed.query_one("#quiz-input", Input).value
        if stormed.screen.query("HelpPanel"):
            app.action_show_help_panel()
        app.redraw()
        await settle(pilot)
        for widget_id, (x, y) in scrolls(stormed).items():
            app.query_one(f"#{widget_id}").scroll_to(x, y, animate=False, immediate=True, force=True)
        await settle(pilot)
        assert scrolls(app) == scrolls(stormed)
        return dump(app), dump(app, styles=False)


def first_difference(stormed: tuple[str, str], fresh: tuple[str, str]) -> str:
    """Where two screens first differ, as (styled, plain) dumps: in the text, or else only in style."""
    for y, lines in enumerate(zip(*(dump.splitlines() for dump in (*stormed, *fresh)), strict=True)):
        styled_a, plain_a, styled_b, plain_b = lines
        if styled_a != styled_b:
            what = "text" if plain_a != plain_b else "style only"
            return (f"line {y} ({what}):\n  stormed: {plain_a!r}\n  fresh:   {plain_b!r}"
                    f"\n  stormed styled: {styled_a!r}\n  fresh styled:   {styled_b!r}")
    return "same"


@pytest.mark.parametrize("name", STORM_SCENARIOS)
async def test_key_and_resize_storm(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # s and ctrl+s write here; Textual's palette screenshot goes to Downloads:
    monkeypatch.setenv("HOME", str(tmp_path))  # ... which is under HOME
    monkeypatch.setenv("XDG_DOWNLOAD_DIR", str(tmp_path))
    seed = seed_of(name)
    app = StormApp(name)
    app.live.speeds = (3600.0,) * len(app.live.speeds)  # autoplay steps only on the storm's own ticks
    size = EDGE_SIZES[seed % len(EDGE_SIZES)]
    pressed: set[str] = set()
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        assert_consistent(app, size)
        modal_moves = 0
        for move in storm(seed):
            await play(pilot, move)
            if move.kind == "key":
                pressed.add(str(move.arg))
            modal_moves = modal_moves + 1 if len(app.screen_stack) > 1 else 0
            if modal_moves >= MODAL_PATIENCE:  # or the storm would mostly type into one box
                await press(pilot, "escape")
            if move.kind == "resize":
                assert isinstance(move.arg, list)
                size = move.arg[-1]
                await settle(pilot)
                assert_consistent(app, size)
        await close_everything(pilot)
        final = random_size(random.Random(seed))
        final = (max(final[0], MIN_WIDTH), max(final[1], MIN_HEIGHT))
        for step in [(1, 1), final]:  # shrink to nothing, then grow back: every cell must be redrawn
            await resize(pilot, [step])
            await settle(pilot)
            assert_consistent(app, step)
        assert len(app.screen_stack) == 1, app.screen_stack  # a modal opened late would dim the trace
        expected = await fresh_screen(app, final)
        assert dump(app) == expected[0], first_difference((dump(app), dump(app, styles=False)), expected)
        await App.action_quit(app)
    assert pressed == set(ALL_KEYS)
    assert app.return_code == 0  # 1 had an exception reached Textual


# --- what the storms found, one focused case each --------------------------------------------


async def test_too_small_follows_resizes_behind_a_modal() -> None:
    """A resize while help, go-to or the palette is open reaches the trace below."""
    app = StormApp("two_heads")
    async with app.run_test(size=(120, 40)) as pilot:
        for opener in ["question_mark", "g", "ctrl+p"]:  # a modal of ours, one with a box, and Textual's
            for size in [(30, 8), (120, 40)]:
                await press(pilot, opener)
                assert len(app.screen_stack) == 2, opener
                await resize(pilot, [size])
                await settle(pilot)
                await press(pilot, "escape")
                await settle(pilot)
                assert len(app.screen_stack) == 1, opener
                assert_consistent(app, size)  # the message shows (or is gone) once the modal closes, no key needed


async def test_the_footer_offers_the_palette_as_soon_as_there_is_room() -> None:
    app = StormApp("i_love_ai")
    async with app.run_test(size=(80, 24)) as pilot:
        for size, shown in [((80, 24), False), ((120, 40), True), ((60, 20), False), ((200, 50), True)]:
            await resize(pilot, [size])
            await settle(pilot)
            assert ("palette" in dump(app, styles=False).splitlines()[-1]) == shown, size


async def test_the_explanation_keeps_no_scrollbar_it_no_longer_needs() -> None:
    """The text rewraps after a resize; its scrollbar must follow, though the panel's size did not change."""
    app = StormApp("sixteen_tokens")
    async with app.run_test(size=(80, 24)) as pilot:
        for size in [(79, 33), (182, 39)]:
            await resize(pilot, [size])
            await settle(pilot)
            assert_consistent(app, size)


async def test_a_scrollbar_shown_again_shows_where_its_pane_is() -> None:
    """Scrolled to the last score, then too big to scroll, back to the first score, then small again:
    the thumb is at the top, where the pane is, not where it was before the scrollbar was hidden."""
    app = StormApp("sixteen_tokens")
    async with app.run_test(size=(80, 24)) as pilot:
        await press(pilot, "3", "right_square_bracket", "left")
        await settle(pilot)
        assert any(view.scroll_y > 0 for view in app.query(MatrixView) if view.display)
        await resize(pilot, [(250, 80)])
        await settle(pilot)
        await press(pilot, "3")
        await resize(pilot, [(80, 24)])
        await settle(pilot)
        assert_consistent(app, (80, 24))


@pytest.mark.parametrize("keys", [["ctrl+p", *"Predict", "enter", "escape"],
                                  ["e", "enter", "ctrl+p", "escape", "escape"],
                                  ["g", "5", "enter", "ctrl+p", "escape", "escape"]],
                         ids=["palette-enter-escape", "edit-enter-palette", "goto-enter-palette"])
async def test_two_keys_closing_one_box_do_not_end_the_app(keys: list[str]) -> None:
    """Enter closes the box, and the next key arrives before the box has closed: it must not close it again
    (a second close resolved its result twice, or popped the trace's own screen: both raised)."""
    app = StormApp("i_love_ai")
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        for key in keys:
            # each key handled as far as its own queue, not the messages it sets off: the next arrives first
            app.post_message(key_event(key))
            await pilot.pause(0)
            await app.workers.wait_for_complete()  # the palette's search has answered before enter
        await settle(pilot)
        assert app.return_code in (None, 0), app.return_code  # 1 once an exception reached Textual
        await close_everything(pilot)
        assert_consistent(app, (120, 40))


@pytest.mark.parametrize("width", [1, 4, 6])
async def test_the_palette_opens_at_any_width(width: int) -> None:
    """Textual's palette wraps its options to the width: at 4 or 6 columns Rich raised while wrapping."""
    app = StormApp("i_love_ai")
    async with app.run_test(size=(width, 17)) as pilot:
        await press(pilot, "ctrl+p", "e")
        await app.workers.wait_for_complete()
        await settle(pilot)
        assert app.return_code in (None, 0) and isinstance(app.screen, CommandPalette)


@pytest.mark.parametrize("keys", [["question_mark"], ["p", "question_mark"]], ids=["trace", "quiz-box"])
async def test_a_key_is_handled_once_its_action_has_run(keys: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """handled() waits for the whole way of a key: from the app to the focused widget and back up to the
    binding. With the looks at the markers as close together as they can be (no time between them), a wait
    that ended with one round of markers came back before ``?`` had opened help (close_everything then counted
    one screen, and the storm compared the trace dimmed under help with a fresh one)."""
    monkeypatch.setattr(sys.modules[__name__], "POLL", 0)
    app = StormApp("i_love_ai")
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await press(pilot, *keys)
        assert isinstance(app.screen, HelpScreen), app.screen_stack
