"""Tabs that arrive together have their apps forked together, and started once the last is forked
(edges/serve/zygote.py: fork_waiting): every one of them draws its first frame and takes its own keys,
and no app holds a pipe of another's (a tab's app that held a sibling's would keep that sibling's tab
open after it ended) nor the pipe they waited on together."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import aiohttp

from .test_serve_fork import RIGHT, Tab, apps, classroom  # noqa: F401 -- classroom: the fixture

TABS = 6


def pipes(pid: int) -> set[str]:
    """The pipes a process holds open, by their inode ("pipe:[N]")."""
    found = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("pipe:"):
            found.add(target)
    return found


def test_tabs_arriving_together_each_get_an_app_of_their_own(classroom: tuple[str, int, Path]) -> None:  # noqa: F811
    url, server, _log = classroom

    async def run() -> None:
        async with aiohttp.ClientSession() as session:
            tabs = await asyncio.gather(*(Tab.open(session, url) for _ in range(TABS)))
            started = apps(server)
            assert len(started) == TABS
            held = {pid: pipes(pid) for pid in started}
            for pid, own in held.items():
                assert len(own) == 3, (pid, own)  # its standard input, output and error, and nothing else
                others = set().union(*(theirs for other, theirs in held.items() if other != pid))
                assert not own & others, f"app {pid} shares a pipe with another app: {own & others}"
            for steps, tab in enumerate(tabs, start=1):
                await tab.press(RIGHT * steps)
            for steps, tab in enumerate(tabs, start=1):
                await tab.shows(f"op {steps + 1}/66")  # each its own position
            for tab in tabs:
                await tab.ws.close()

    asyncio.run(run())
