"""--serve forks each tab's app from the app starter (qkv_tui/edges/serve/zygote.py), which has imported
everything already: the apps are processes of their own, keep their own state, end with their tab,
and a crash ends only the app that crashed. Driven over the websocket as textual-serve's page drives
it (["stdin", keys], the terminal's size in the address), reading the frames the app sends.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from .test_serve import WAIT_MS, serving

WAIT = WAIT_MS / 1000
RIGHT = "\x1b[C"


def tree() -> dict[int, list[int]]:
    """Every process's children, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    return children


def server_pid(log: Path) -> int:
    """The server: the process whose command line names the port, found from the test's own children."""
    for pid in tree().get(os.getpid(), []):
        if "--serve" in command_line(pid):
            return pid
    raise AssertionError(f"no server process; its log: {log.read_text()}")


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def zygote_of(server: int) -> int:
    found = [pid for pid in tree().get(server, []) if "qkv_tui.edges.serve.zygote" in command_line(pid)]
    assert len(found) == 1, (found, [command_line(pid) for pid in tree().get(server, [])])
    return found[0]


def apps(server: int) -> set[int]:
    children = tree()
    return {pid for zygote in children.get(server, []) for pid in children.get(zygote, [])}


def gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


def until(condition: object, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


class Tab:
    """One browser tab: a websocket to /ws, and everything the app has sent it."""

    def __init__(self, session: aiohttp.ClientSession, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.session, self.ws, self.seen = session, ws, b""

    @classmethod
    async def open(cls, session: aiohttp.ClientSession, url: str) -> Tab:
        ws = await session.ws_connect(f"{url.replace('http', 'ws')}ws?width=120&height=40")
        tab = cls(session, ws)
        await tab.shows("op 1/66")
        return tab

    async def shows(self, text: str) -> None:
        """Wait until the app has drawn text (since the last wait); fails if the tab closes first."""
        mark = text.encode()
        async with asyncio.timeout(WAIT):
            while mark not in self.seen:
                message = await self.ws.receive()
                assert message.type == aiohttp.WSMsgType.BINARY or message.type == aiohttp.WSMsgType.TEXT, \
                    f"the tab closed before {text!r}: {message.type}"
                if message.type == aiohttp.WSMsgType.BINARY:
                    self.seen += message.data
        self.seen = self.seen[self.seen.index(mark) + len(mark):]

    async def press(self, keys: str) -> None:
        await self.ws.send_json(["stdin", keys])

    async def closes(self) -> None:
        async with asyncio.timeout(WAIT):
            while (await self.ws.receive()).type not in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING,
                                                           aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
                pass


@pytest.fixture
def classroom(tmp_path: Path) -> Iterator[tuple[str, int, Path]]:
    with serving(tmp_path) as url:
        log = tmp_path / "server.log"
        yield url, server_pid(log), log


def test_two_forked_apps_keep_their_own_state(classroom: tuple[str, int, Path]) -> None:
    url, server, _log = classroom
    zygote = zygote_of(server)

    async def run() -> None:
        async with aiohttp.ClientSession() as session:
            first = await Tab.open(session, url)
            (a,) = apps(server)
            second = await Tab.open(session, url)
            (b,) = apps(server) - {a}
            # forked, not a fresh interpreter: the zygote's children, with its command line
            assert command_line(a) == command_line(b) == command_line(zygote)
            await first.press(RIGHT * 3)
            await first.shows("op 4/66")
            await second.press(RIGHT)
            await second.shows("op 2/66")
            await first.press(RIGHT)
            await first.shows("op 5/66")  # each app its own position
            await first.ws.close()
            await second.ws.close()

    asyncio.run(run())


def test_a_crash_ends_only_its_own_app(classroom: tuple[str, int, Path]) -> None:
    url, server, log = classroom
    zygote = zygote_of(server)

    async def run() -> None:
        async with aiohttp.ClientSession() as session:
            doomed = await Tab.open(session, url)
            (crashing,) = apps(server)
            other = await Tab.open(session, url)
            os.kill(crashing, signal.SIGSEGV)  # what a crash in C code does
            await doomed.closes()  # its page says the session ended, rather than freezing
            until(lambda: gone(crashing), "the crashed app is still there")
            await other.press(RIGHT)
            await other.shows("op 2/66")
            late = await Tab.open(session, url)  # the server and the zygote go on: a new student gets an app
            await late.press(RIGHT * 2)
            await late.shows("op 3/66")
            for tab in (other, late):
                await tab.ws.close()

    asyncio.run(run())
    assert zygote_of(server) == zygote
    assert "ended" not in log.read_text()


def test_closing_a_tab_ends_its_process(classroom: tuple[str, int, Path]) -> None:
    url, server, _log = classroom

    async def run() -> None:
        async with aiohttp.ClientSession() as session:
            leaving = await Tab.open(session, url)
            (left,) = apps(server)
            staying = await Tab.open(session, url)
            (stays,) = apps(server) - {left}
            await leaving.ws.close()
            until(lambda: gone(left), "the app of a closed tab is still running")
            assert not gone(stays)
            await staying.press(RIGHT)
            await staying.shows("op 2/66")
            await staying.ws.close()
            until(lambda: gone(stays), "the app of a closed tab is still running")

    asyncio.run(run())


def test_a_hung_app_is_killed_when_its_tab_closes(classroom: tuple[str, int, Path]) -> None:
    url, server, _log = classroom

    async def run() -> None:
        async with aiohttp.ClientSession() as session:
            tab = await Tab.open(session, url)
            (hung,) = apps(server)
            os.kill(hung, signal.SIGSTOP)  # it will not answer the quit its closed tab sends
            try:
                await tab.ws.close()
                until(lambda: gone(hung), "the hung app of a closed tab is still there")  # killed after QUIT_SECONDS
            finally:
                if not gone(hung):
                    os.kill(hung, signal.SIGKILL)

    asyncio.run(run())


def test_a_dead_app_starter_is_replaced_and_said_so(classroom: tuple[str, int, Path]) -> None:
    url, server, log = classroom
    zygote = zygote_of(server)

    async def run() -> None:
        async with aiohttp.ClientSession() as session:
            before = await Tab.open(session, url)
            os.kill(zygote, signal.SIGKILL)
            until(lambda: gone(zygote), "the app starter is still there")
            await before.press(RIGHT)  # an app it started runs on
            await before.shows("op 2/66")
            after = await Tab.open(session, url)  # and a new student gets an app from a new one
            await after.press(RIGHT)
            await after.shows("op 2/66")
            for tab in (before, after):
                await tab.ws.close()

    asyncio.run(run())
    assert zygote_of(server) != zygote
    said = [line for line in log.read_text().splitlines() if "app starter" in line]
    assert said == [f"qkv-tui: the app starter (pid {zygote}) ended (killed by signal 9); the next student's app"
                    " starts a new one"], log.read_text()


def test_read_only_refuses_every_edit(tmp_path: Path) -> None:
    with serving(tmp_path, options=("--read-only",)) as url:
        async def run() -> None:
            async with aiohttp.ClientSession() as session:
                tab = await Tab.open(session, url)
                await tab.press("e")
                await tab.shows("editing is off")
                await tab.press("\x13")  # ctrl+s
                await tab.shows("saving is off")
                await tab.press(RIGHT)  # stepping is not editing
                await tab.shows("op 2/66")
                assert b"X[I,0] =" not in tab.seen  # no edit prompt opened
                await tab.ws.close()

        asyncio.run(run())


def test_read_only_goes_only_where_an_app_runs() -> None:
    import subprocess
    import sys

    for args in (["--export", "json"], ["--check"]):
        run = subprocess.run([sys.executable, "-m", "qkv_tui", "--read-only", *args, "i_love_ai"],
                             capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert run.returncode == 2 and run.stdout == "", run
        assert run.stderr == "error: --read-only goes only with the app or --serve (see qkv-tui --help)\n", run.stderr


def test_a_read_only_app_opens_no_edit_and_saves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same refusal in the terminal: no prompt, no file written, one line each (cwd: where a copy would go)."""
    from qkv_tui.ui.app import QKVApp

    from .conftest import notices

    monkeypatch.chdir(tmp_path)

    async def run() -> None:
        app = QKVApp("i_love_ai", read_only=True)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("e")
            await pilot.pause()
            assert len(app.screen_stack) == 1  # no edit prompt
            await pilot.press("ctrl+s")
            await pilot.pause()
            assert [n.message for n in notices(app)] == ["Read-only: editing is off.", "Read-only: saving is off."]

    asyncio.run(run())
    assert list(tmp_path.iterdir()) == []
