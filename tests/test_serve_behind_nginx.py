"""The deployment example, end to end: Debian's nginx with the shipped deploy/nginx-qkv-class.conf in front of
two `qkv-tui --serve` processes (--max-students 1 each), and Debian's chromium driven by Playwright.

Proves: the class works at a path (/class/, stripped by the proxy); two tabs of one browser land on the two
processes, each tab's websocket on the process that served its page, and each keeps its own place through keys;
a download (`s`) comes back through the tab's path; a third tab over the cap gets HTTP 503 and a page saying the
class is full; when a student leaves, the next one gets the seat. Also: a process without --public-url at a
path of its own works with no flag, its page's addresses being relative.

nginx runs as this user from a config in a temporary folder (pid, logs and temporary files there too) on free
ports; the shipped file is used as written but for its ports. Every wait is on a condition, with generous limits.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from .test_serve import CHROMIUM, FLAGS, HOOK, WAIT_MS, free_port, serving

SHIPPED = Path(__file__).resolve().parent.parent / "deploy" / "nginx-qkv-class.conf"
NGINX = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if Path(p).exists()), None)


def missing() -> str | None:
    if NGINX is None:
        return "no nginx on this machine (Debian: apt-get install -y nginx; .ci/run installs it)"
    if not Path(CHROMIUM).exists():
        return "no chromium on this machine (Debian: apt-get install -y chromium; .ci/run installs it)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[test]')"
    return None


pytestmark = pytest.mark.skipif(missing() is not None, reason=missing() or "")


def status_of(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as answer:
        return answer.code
    except OSError:
        return 0


def wait_for_status(url: str, status: int, process: subprocess.Popen[bytes] | None = None, log: Path | None = None) -> None:
    deadline = time.monotonic() + WAIT_MS / 1000
    while (got := status_of(url)) != status:
        if process is not None:
            assert process.poll() is None, log.read_text() if log is not None else "nginx ended"
        assert time.monotonic() < deadline, f"{url} answered {got}, expected {status}"
        time.sleep(0.2)  # a poll for the condition


def site_config(ports: tuple[int, int], listen: int, solo: int) -> str:
    """The shipped server block with this run's ports, and one extra location: a process with no --public-url."""
    text = SHIPPED.read_text()
    for default, port in zip((8001, 8002), ports, strict=True):
        assert text.count(f"127.0.0.1:{default}") == 2, f"{SHIPPED} changed shape: 127.0.0.1:{default} twice expected"
        text = text.replace(f"127.0.0.1:{default}", f"127.0.0.1:{port}")
    assert text.count("listen 80;") == 1, f"{SHIPPED} changed shape: one `listen 80;` expected"
    text = text.replace("listen 80;", f"listen 127.0.0.1:{listen};")
    solo_location = (f"    location /solo/ {{\n        proxy_pass http://127.0.0.1:{solo}/;\n        proxy_http_version 1.1;\n"
                     "        proxy_set_header Upgrade $http_upgrade;\n        proxy_set_header Connection $qkv_connection;\n"
                     "    }\n}\n")
    head, _, _ = text.rpartition("}")
    return head + solo_location


@contextmanager
def nginx(folder: Path, site: str) -> Iterator[subprocess.Popen[bytes]]:
    """nginx in the foreground as this user, everything it writes inside folder."""
    folder.mkdir()
    (folder / "site.conf").write_text(site)
    temp = "\n".join(f"    {kind}_temp_path {folder / kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    (folder / "nginx.conf").write_text(
        f"daemon off;\nworker_processes 1;\npid {folder / 'nginx.pid'};\nerror_log {folder / 'error.log'} info;\n"
        f"events {{ worker_connections 256; }}\n"
        f"http {{\n    access_log {folder / 'access.log'};\n{temp}\n    include {folder / 'site.conf'};\n}}\n"
    )
    test = subprocess.run([NGINX or "nginx", "-t", "-p", str(folder), "-e", str(folder / "error.log"),
                           "-c", str(folder / "nginx.conf")], capture_output=True, text=True, timeout=60)
    assert test.returncode == 0, test.stderr
    log = (folder / "stderr.log").open("w")
    process = subprocess.Popen([NGINX or "nginx", "-p", str(folder), "-e", str(folder / "error.log"),
                                "-c", str(folder / "nginx.conf")], stdout=log, stderr=subprocess.STDOUT)
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def tab(context: Any, url: str) -> tuple[Any, list[str]]:
    """A new tab at url, and the websocket addresses it opens."""
    page = context.new_page()
    sockets: list[str] = []
    page.on("websocket", lambda socket: sockets.append(socket.url.split("?")[0]))
    page.add_init_script(HOOK)
    page.goto(url, timeout=WAIT_MS)
    return page, sockets


def shows(page: Any, text: str) -> None:
    page.wait_for_function(f"() => window.__qkvText().includes({text!r})", timeout=WAIT_MS)


def test_a_class_through_nginx(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    listen = free_port()
    base = f"http://127.0.0.1:{listen}"
    with ExitStack() as stack:
        ports = []
        for number in (1, 2):
            (tmp_path / f"p{number}").mkdir()
            server = stack.enter_context(serving(tmp_path / f"p{number}", options=(
                "--public-url", f"{base}/class/{number}/", "--max-students", "1")))
            ports.append(int(server.rsplit(":", 1)[1].strip("/")))
        (tmp_path / "solo").mkdir()
        solo_server = stack.enter_context(serving(tmp_path / "solo"))
        solo = int(solo_server.rsplit(":", 1)[1].strip("/"))
        proxy = stack.enter_context(nginx(tmp_path / "nginx", site_config((ports[0], ports[1]), listen, solo)))
        wait_for_status(f"{base}/class/", 200, proxy, tmp_path / "nginx" / "stderr.log")
        assert status_of(f"{base}/class") == 200  # the redirect to /class/ is followed

        driver = stack.enter_context(sync_playwright())
        browser = driver.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        stack.callback(browser.close)
        context = browser.new_context(viewport={"width": 1280, "height": 800})  # one browser: its tabs share cookies

        first, first_sockets = tab(context, f"{base}/class/")
        shows(first, "op 1/66")
        first.click(".xterm-screen")
        for _ in range(3):
            first.keyboard.press("ArrowRight")
        shows(first, "op 4/66")

        second, second_sockets = tab(context, f"{base}/class/")  # the first process is full: nginx asks the next
        shows(second, "op 1/66")
        second.click(".xterm-screen")
        second.keyboard.press("ArrowRight")
        shows(second, "op 2/66")
        # each tab's websocket went to its own process's path, which nginx sends to that process only
        assert sorted(first_sockets + second_sockets) == [f"ws://127.0.0.1:{listen}/class/1/ws",
                                                          f"ws://127.0.0.1:{listen}/class/2/ws"]
        first.keyboard.press("ArrowRight")
        shows(first, "op 5/66")
        assert "op 2/66" in second.evaluate("window.__qkvText()")  # the second tab's place did not move
        assert "op 5/66" in first.evaluate("window.__qkvText()")

        # s: the screenshot is a download the page opens under its own path, through nginx to its own process
        downloads: list[tuple[str, int, str]] = []

        def keep(route: Any) -> None:
            response = route.fetch()
            downloads.append((route.request.url, response.status, response.headers.get("content-disposition", "")))
            route.fulfill(response=response)

        context.route("**/download/**", keep)
        second.keyboard.press("s")
        deadline = time.monotonic() + WAIT_MS / 1000
        while not downloads and time.monotonic() < deadline:
            second.wait_for_timeout(200)  # a poll for the condition
        assert downloads, "no download followed s"
        url, status, disposition = downloads[0]
        assert re.fullmatch(rf"http://127\.0\.0\.1:{listen}/class/[12]/download/[^/]+", url), url
        assert url.startswith(second_sockets[0].replace("ws://", "http://").removesuffix("ws")), (url, second_sockets)
        assert status == 200 and "i_love_ai-op02" in disposition, (status, disposition)

        third = context.new_page()
        third.add_init_script(HOOK)
        third_sockets: list[str] = []
        third.on("websocket", lambda socket: third_sockets.append(socket.url.split("?")[0]))
        answer = third.goto(f"{base}/class/", timeout=WAIT_MS)
        assert answer is not None and answer.status == 503
        assert "The class is full" in third.inner_text("h1")
        assert "tries again every 30 seconds" in third.inner_text("body")
        assert "op 5/66" in first.evaluate("window.__qkvText()")  # told, and nobody else's tab disturbed
        assert third_sockets == []  # the full page starts no app
        third.goto("about:blank")  # its own retry (every 30 s) must not race the test's below for the seat

        first.close()  # a student leaves: their seat frees when the websocket ends
        wait_for_status(f"{base}/class/", 200)
        third.goto(f"{base}/class/", timeout=WAIT_MS)
        shows(third, "op 1/66")
        assert third_sockets == first_sockets  # the freed seat, on the process the first tab left

        # no --public-url, at a path of its own: the page's relative addresses find their way
        alone, alone_sockets = tab(context, f"{base}/solo/")
        shows(alone, "op 1/66")
        assert alone_sockets == [f"ws://127.0.0.1:{listen}/solo/ws"]
        context.close()
