"""No help, notes or toast text is lost to markup: "(l again leaves; only with [backward])" read
"(l again leaves; only with )" in learn_to_look's help, Rich having taken [backward] for a style.

Every built-in's help screen and the notes screen are rendered as the app renders them (a Rich
console, wide enough that nothing wraps), and every sentence that went in must come out whole; every
toast the app gives, its brackets included, is on screen as written."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from rich.console import Console, RenderableType
from textual.widgets._toast import Toast

from qkv_tui import compute, load_scenario
from qkv_tui.core.scenario import builtin_dir, builtin_names
from qkv_tui.display.side_views import SIDE_VIEWS
from qkv_tui.teach.trace import Trace
from qkv_tui.teach.trace_variants import VARIANT_NOTES
from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.screens import KEYS, NOTES, HelpScreen, NotesScreen, stage_keys_row

from .settle import settle


def rendered(body: RenderableType) -> str:
    console = Console(width=4000, record=True, file=open("/dev/null", "w"), color_system=None)  # noqa: SIM115
    console.print(body)
    console.file.close()
    return flat(console.export_text())


def flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_the_side_views_help_holds_brackets_this_test_guards() -> None:
    assert any("[backward]" in what for view in SIDE_VIEWS for _, what in view.help)


@pytest.mark.parametrize("name", builtin_names())
def test_every_help_sentence_is_on_the_help_screen(name: str) -> None:
    scenario = load_scenario(name)
    trace = Trace(compute(scenario))
    stages = [trace.stage(key) for key in trace.stage_keys]
    screen = HelpScreen(stages, scenario)
    shown = rendered(screen.body())
    written = [what for key, what in KEYS if (key, what) not in screen.hidden]
    written += [stage_keys_row(len(stages))[1], *(stage.meaning for stage in stages)]
    written += [text for note in VARIANT_NOTES for text in note]
    for text in written:
        assert flat(text).strip() in shown, text
    assert "[backward]" in shown or not any("[backward]" in text for text in written)


def test_every_note_is_on_the_notes_screen() -> None:
    shown = rendered(NotesScreen().body())
    for title, body in NOTES:
        assert flat(title) in shown and flat(body).strip() in shown, title
    assert any("[" in title + body for title, body in NOTES)  # there are brackets to lose


def toasts_as_shown(app: QKVApp) -> list[tuple[str, str]]:
    """(what the toast was given, what it shows) for each toast on screen."""
    return [(t._notification.message, t.render().plain) for t in app.screen.query(Toast)]


async def test_every_toast_shows_its_brackets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a file whose name holds brackets: every toast that names it would lose them to markup
    path = tmp_path / "look[backward].toml"
    shutil.copy(builtin_dir() / "learn_to_look.toml", path)
    monkeypatch.chdir(tmp_path)
    app = QKVApp(path)
    # every toast stays up until the test has read it: "Reloaded" lasts 3 s, and on a loaded machine the settling
    # after r took longer, so the toast was gone before it was read (a flake under load, not a lost bracket)
    notify = QKVApp.notify
    monkeypatch.setattr(QKVApp, "notify", lambda self, message, *args, **kwargs:
                        notify(self, message, *args, **{**kwargs, "timeout": 600}))
    seen: list[str] = []
    async with app.run_test(size=(200, 50), notifications=True) as pilot:  # Pilot's default draws no toasts

        async def each_toast_whole() -> None:
            await settle(pilot)
            for message, plain in toasts_as_shown(app):
                assert message in plain, (message, plain)
                seen.append(message)

        app.live.copy_place()  # the palette's "Copy this place"
        await each_toast_whole()
        for keys in (("u",), ("ctrl+s",), ("r",), ("p", "right", "p"), ("a", "x")):
            # nothing to undo; no edits to save; reloaded; the quiz left unanswered; autoplay and its stop
            await pilot.press(*keys)
            await each_toast_whole()
    assert any("look[backward].toml" in message for message in seen)
    assert {"Nothing to undo.", "No edits to save."} <= set(seen)
    assert any(message.startswith("Reloaded") for message in seen)
