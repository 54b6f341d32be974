"""What a --serve tab's app is spared on its way to the first frame, and that each saving changes nothing:
the scenario the app starter prepared (edges/serve/prepared.py), the restyle of the first screen that
restyled nothing (ui/widgets/trace_screen.py), the collector held off until the first frame is drawn."""

from __future__ import annotations

import asyncio
import gc
import io
import json
from pathlib import Path

import aiohttp
import numpy as np
import pytest
from textual import events
from textual.geometry import Size
from textual.screen import Screen

from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import builtin_dir, load_scenario
from qkv_tui.edges import cli
from qkv_tui.edges.export_json import write_json
from qkv_tui.edges.serve import prepared as serve_prepared
from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.trace_screen import TraceScreen

from .test_serve import serving
from .test_serve_fork import Tab
from .test_shared_css import every_style

FIRST_SCREENS = ("i_love_ai", "two_heads", "sixteen_tokens", "cross_attention", "mla_learns", "deltanet_learns",
                 "glassllm_previous_word")


def exported(comp_scenario: object) -> dict[str, object]:
    out = io.StringIO()
    write_json(comp_scenario, out)  # type: ignore[arg-type]
    return json.loads(out.getvalue())


@pytest.fixture(autouse=True)
def nothing_kept() -> None:
    serve_prepared.keep(None)
    yield
    serve_prepared.keep(None)


def test_a_prepared_scenario_is_the_one_the_file_gives() -> None:
    prepared = serve_prepared.prepare("i_love_ai")
    assert prepared is not None
    fresh = load_scenario("i_love_ai")
    assert prepared.scenario.title == fresh.title
    assert exported(prepared.scenario) == exported(fresh)
    again = compute(fresh)
    assert np.array_equal(prepared.comp.output, again.output)
    for mine, theirs in zip(prepared.comp.heads, again.heads, strict=True):
        assert np.array_equal(mine.weights, theirs.weights)


def test_it_is_taken_once_and_only_for_its_own_scenario() -> None:
    serve_prepared.keep(serve_prepared.prepare("i_love_ai"))
    assert serve_prepared.take("multi_head") is None  # and it is gone: one app, one take
    serve_prepared.keep(serve_prepared.prepare("i_love_ai"))
    assert serve_prepared.take("i_love_ai") is not None
    assert serve_prepared.take("i_love_ai") is None


def test_a_file_edited_since_is_loaded_afresh(tmp_path: Path) -> None:
    path = tmp_path / "lesson.toml"
    path.write_text((builtin_dir() / "i_love_ai.toml").read_text())
    serve_prepared.keep(serve_prepared.prepare(str(path)))
    path.write_text(path.read_text().replace('title = "I love AI"', 'title = "I love AI, edited"'))
    assert serve_prepared.take(str(path)) is None
    serve_prepared.keep(serve_prepared.prepare(str(path)))
    taken = serve_prepared.take(str(path))
    assert taken is not None and taken.scenario.title == "I love AI, edited"


def test_what_cannot_be_prepared_is_left_to_the_app(tmp_path: Path) -> None:
    model = tmp_path / "model.toml"
    model.write_text('[model]\nsource = "glassllm"\ntext = "the cat"\nlayer = 0\nhead = 0\n')
    assert serve_prepared.prepare(str(model)) is None  # its numbers come from model files too
    broken = tmp_path / "broken.toml"
    broken.write_text('tokens = ["a"]\n')
    assert serve_prepared.prepare(str(broken)) is None  # the app says what is wrong, as it always did
    assert serve_prepared.prepare(str(tmp_path / "missing.toml")) is None
    huge = tmp_path / "huge.toml"
    huge.write_text((builtin_dir() / "i_love_ai.toml").read_text().replace("[1, 0, 1, 0]", "[1e308, 1e308, 1, 0]", 1))
    assert serve_prepared.prepare(str(huge)) is None  # the app's arithmetic policy refuses it, so does this


def test_the_app_starts_from_what_was_prepared(monkeypatch: pytest.MonkeyPatch) -> None:
    prepared = serve_prepared.prepare("i_love_ai")
    assert prepared is not None
    serve_prepared.keep(prepared)
    started: list[QKVApp] = []
    monkeypatch.setenv("TEXTUAL_DRIVER", "textual.drivers.web_driver:WebDriver")  # as a served app has it
    monkeypatch.setattr(QKVApp, "run", lambda self, *a, **k: started.append(self))
    assert cli.main(["--theme", "dark", "i_love_ai"]) == 0
    assert started and started[0].presenter is prepared.presenter and started[0].comp is prepared.comp
    assert started[0].trace is prepared.presenter.exact


@pytest.mark.parametrize("name", FIRST_SCREENS)
async def test_the_first_screen_is_styled_and_drawn_as_with_textuals_restyle(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The restyle TraceScreen skips gives every widget the rules it has: Textual's own resume draws the same."""
    async def first(resume: object) -> tuple[object, str]:
        with monkeypatch.context() as patch:
            patch.setattr(TraceScreen, "_on_screen_resume", resume)
            app = QKVApp(name)
            async with app.run_test(size=(120, 40)) as pilot:
                for _ in range(4):  # the footer's keys are composed a refresh or two after the panes
                    await pilot.pause()
                return every_style(app), app.export_screenshot()

    ours = await first(TraceScreen._on_screen_resume)
    textuals = await first(Screen._on_screen_resume)
    assert ours[1] == textuals[1], "the screens differ"
    differ = {key: sorted(rule for rule in ours[0].get(key, {}).keys() | textuals[0].get(key, {}).keys()
                          if ours[0].get(key, {}).get(rule) != textuals[0].get(key, {}).get(rule))
              for key in ours[0].keys() | textuals[0].keys() if ours[0].get(key) != textuals[0].get(key)}
    assert not differ


async def test_a_screen_resumed_later_is_restyled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the first resume is spared its restyle: a later one that asks for it (Textual's switch_screen,
    say) restyles as it always did."""
    restyled: list[object] = []
    own = TraceScreen.update_node_styles
    monkeypatch.setattr(TraceScreen, "update_node_styles",
                        lambda self, animate=True: (restyled.append(self), own(self, animate=animate))[1])
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, TraceScreen)
        assert restyled == []
        app.screen.post_message(events.ScreenResume())
        await pilot.pause()
        assert app.screen in restyled


async def test_the_collector_is_back_on_once_the_first_frame_is_drawn() -> None:
    gc.disable()  # as the app starter leaves it in a forked app (edges/serve/zygote.py)
    try:
        app = QKVApp("i_love_ai")
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            await pilot.pause()
            assert gc.isenabled()
    finally:
        gc.enable()


async def test_a_tab_opened_after_the_file_was_edited_shows_the_edit(tmp_path: Path) -> None:
    """The app starter prepared the file as the server started; a tab opened after an edit loads it afresh."""
    lesson = tmp_path / "lesson.toml"
    lesson.write_text((builtin_dir() / "i_love_ai.toml").read_text())

    async def tab(session: aiohttp.ClientSession, url: str, shows: str) -> Tab:
        opened = Tab(session, await session.ws_connect(f"{url.replace('http', 'ws')}ws?width=120&height=40"))
        await opened.shows(shows)
        return opened

    with serving(tmp_path, scenario=str(lesson)) as url:
        async with aiohttp.ClientSession() as session:
            first = await tab(session, url, "I love AI")
            lesson.write_text(lesson.read_text().replace('title = "I love AI"', 'title = "We edited AI"'))
            second = await tab(session, url, "We edited AI")
            await asyncio.gather(first.ws.close(), second.ws.close())


async def test_a_start_lays_the_screen_out_once_and_a_same_size_resize_draws_nothing_new(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Textual lays out and draws the whole screen again for each Resize, and a start brings three of the size
    just laid out at: TraceScreen keeps the one layout. A Resize to another size lays out again, as before."""
    layouts: list[object] = []
    own = TraceScreen._refresh_layout
    monkeypatch.setattr(TraceScreen, "_refresh_layout",
                        lambda self, size=None, scroll=False: (layouts.append(size), own(self, size, scroll))[1])
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(4):
            await pilot.pause()
        resized = [size for size in layouts if size is not None]  # None: what a widget's change lays out
        assert resized == [Size(120, 40)]
        before = app.export_screenshot()
        app.post_message(events.Resize(Size(120, 40), Size(120, 40)))
        for _ in range(4):
            await pilot.pause()
        assert [size for size in layouts if size is not None] == resized
        assert app.export_screenshot() == before
        await pilot.resize_terminal(100, 30)
        for _ in range(4):
            await pilot.pause()
        assert Size(100, 30) in layouts
        assert app.screen.size == Size(100, 30)
