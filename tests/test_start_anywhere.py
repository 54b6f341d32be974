"""Starting anywhere: --stage NAME|N --op N (--head, --decimals) open the app at a place, one line per error,
and the palette copies the place back as the same command line (teach/place.py, edges/place_args.py)."""

from __future__ import annotations

import shlex

import pytest

from qkv_tui import compute, load_scenario
from qkv_tui.edges import cli as cli_module
from qkv_tui.teach.place import PlaceError, command_line, find_place, place_of
from qkv_tui.teach.stepper import Position
from qkv_tui.teach.trace import Trace
from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.panels import FormulaLine


def trace(name: str) -> Trace:
    return Trace(compute(load_scenario(name)))


def test_a_stage_is_named_by_its_name_in_any_case_or_its_number() -> None:
    t = trace("i_love_ai")
    mix = next(r for r in t.runs if r.stage == "mix")
    assert find_place(t, "Mix") == find_place(t, "mix") == find_place(t, "6") == Position(mix.start, 0)
    assert find_place(t, "MIX", op=9) == Position(mix.stop - 1, 0)
    assert place_of(t, Position(mix.start + 2, 0)) == (6, "Mix", 3)


def test_the_head_picks_that_heads_stage() -> None:
    t = trace("two_heads")
    second = next(r for r in t.runs if r.stage == "score" and r.head == 1)
    pos = find_place(t, "score", op=2, head=2)
    assert pos == Position(second.start + 1, 1)
    assert shlex.split(command_line("two_heads", t, pos)) == ["qkv-tui", "two_heads", "--stage", "score", "--op", "2",
                                                               "--head", "2"]
    assert command_line("two_heads", t, Position(0, 0), decimals=5).endswith("--stage embed --op 1 --decimals 5")


@pytest.mark.parametrize(("stage", "op", "head", "message"), [
    ("foo", None, None, "--stage 'foo' is not a stage of this scenario; its stages: 1 Embed, 2 Project, 3 Score,"
                        " 4 Scale, 5 Softmax, 6 Mix"),
    ("7", None, None, "--stage 7 is out of range; this scenario's stages are 1 … 6"),
    ("0", None, None, "--stage 0 is out of range"),
    ("mix", 10, None, "--op 10 is beyond the Mix stage's operations; expected 1 … 9"),
    ("mix", 0, None, "--op 0 is beyond the Mix stage's operations"),
    ("mix", None, 2, "--head 2 is out of range; this scenario has one head (--head 1)"),
])
def test_a_place_that_does_not_exist_is_one_line(stage: str, op: int | None, head: int | None, message: str) -> None:
    with pytest.raises(PlaceError) as error:
        find_place(trace("i_love_ai"), stage, op, head)
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


@pytest.mark.parametrize(("args", "message"), [
    (["--stage", "nope"], "error: --stage 'nope' is not a stage of this scenario; its stages: 1 Embed"),
    (["--stage", "9"], "error: --stage 9 is out of range; this scenario's stages are 1 … 6"),
    (["--stage", "mix", "--op", "99"], "error: --op 99 is beyond the Mix stage's operations; expected 1 … 9"),
    (["--op", "3"], "error: --op goes with --stage NAME|N"),
    (["--head", "2"], "error: --head goes with --stage NAME|N"),
    (["--stage", "mix", "--export", "json"], "error: --stage goes only with the app or --serve, not --export"),
    (["--check", "--stage", "2", "--op", "1"], "error: --stage and --op go only with the app or --serve, not --check"),
    (["--stage", "2", "--decimals", "9"], "error: --decimals 9: expected 1 … 8"),
])
def test_the_command_line_refuses_a_place_in_one_line(cli, args: list[str], message: str) -> None:
    run = cli("i_love_ai", *args)
    assert run.code == 2 and run.out == ""
    assert run.err.startswith(message) and run.err.count("\n") == 1, run.err


def test_the_app_opens_where_the_command_line_says(cli, monkeypatch) -> None:
    opened: dict[str, object] = {}

    def run(self: QKVApp) -> None:
        opened.update(position=self.position, decimals=self.modes.decimals)

    monkeypatch.setattr(QKVApp, "run", run)
    monkeypatch.setattr(cli_module, "terminal_problem", lambda: None)
    assert cli("two_heads", "--stage", "softmax", "--op", "4", "--head", "2", "--decimals", "5").code == 0
    t = trace("two_heads")
    assert opened == {"position": find_place(t, "softmax", 4, 2), "decimals": 5}


async def test_the_palette_copies_the_place_and_says_so() -> None:
    t = trace("two_heads")
    app = QKVApp("two_heads", place=find_place(t, "scale", 3, 2), decimals=4)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert "4/8 Scale" in str(app.query_one(FormulaLine).render())  # it opened there
        command = {c.title: c for c in app.get_system_commands(app.screen)}["Copy this place as a command line"]
        command.callback()
        await pilot.pause()
        assert app.clipboard == "qkv-tui two_heads --stage scale --op 3 --head 2 --decimals 4"
        toasts = [str(n.message) for n in app._notifications]
        assert any(app.clipboard in message for message in toasts)
        words = shlex.split(app.clipboard)[2:]  # pasted back, it opens at the same place
        assert find_place(t, words[1], int(words[3]), int(words[5])) == app.position
