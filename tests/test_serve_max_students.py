"""--serve --max-students N: the N+1st student gets HTTP 503 and a page that says the class is full, no app
starts for them, and the seat is free again when a student closes their tab (contracts, "A class, a course,
a campus"). Real servers, students as websockets the way a browser tab connects."""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.request
from pathlib import Path

import aiohttp
import pytest

from .test_serve import WAIT_MS, serving
from .test_serve_fork import Tab


def page(url: str) -> tuple[int, str, dict[str, str]]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read().decode(), dict(response.headers)
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode(), dict(refused.headers)


async def until_page_is(url: str, status: int) -> None:
    deadline = time.monotonic() + WAIT_MS / 1000
    while (got := (await asyncio.to_thread(page, url))[0]) != status:
        assert time.monotonic() < deadline, f"the page stayed {got}, expected {status}"
        await asyncio.sleep(0.2)  # a poll for the condition


def test_a_student_over_the_cap_is_told_the_class_is_full_and_a_leaving_one_frees_the_seat(tmp_path: Path) -> None:
    with serving(tmp_path, options=("--max-students", "2")) as url:
        log = tmp_path / "server.log"

        async def scenario() -> None:
            async with aiohttp.ClientSession() as session:
                first = await Tab.open(session, url)
                assert page(url)[0] == 200  # one seat of two taken: the page still opens
                second = await Tab.open(session, url)
                status, text, headers = await asyncio.to_thread(page, url)
                assert status == 503
                assert "The class is full" in text and "All 2 seats for <b>I love AI</b>" in text
                assert "tries again every 30 seconds" in text and "ask your teacher" in text
                assert headers["Retry-After"] == "30" and headers["Content-Type"].startswith("text/html")
                # a tab whose page came before the last seat went: its websocket is refused, no app starts for it
                with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                    await session.ws_connect(f"{url.replace('http', 'ws')}ws?width=120&height=40")
                assert refused.value.status == 503
                # the students in their seats still have their own apps
                await first.press("\x1b[C")
                await first.shows("op 2/66")
                await second.press("\x1b[C\x1b[C")
                await second.shows("op 3/66")
                await first.ws.close()
                await until_page_is(url, 200)
                third = await Tab.open(session, url)  # the freed seat is taken by the next student
                await until_page_is(url, 503)
                await third.ws.close()
                await second.ws.close()

        asyncio.run(scenario())
        assert "at most 2 at once" in log.read_text()


def test_without_a_cap_the_page_always_opens(tmp_path: Path) -> None:
    with serving(tmp_path) as url:
        async def scenario() -> None:
            async with aiohttp.ClientSession() as session:
                tabs = [await Tab.open(session, url) for _ in range(2)]
                assert page(url)[0] == 200
                for tab in tabs:
                    await tab.ws.close()

        asyncio.run(scenario())
