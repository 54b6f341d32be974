"""--serve: the app in a real browser (Debian's chromium driven by Playwright), and the server's page.

The terminal in the page is xterm.js drawing on a canvas, so there is no text in the DOM to read.
An init script notes the xterm Terminal object when textual-serve's page creates it (the page
stores it as ``.terminal``), and the test reads the screen's text from xterm's own buffer.
Every wait is on a condition, with generous limits: the machine may be busy.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from qkv_tui.edges.serve.server import app_command

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
WAIT_MS = 90_000  # a busy 2-core machine starts an app process in seconds; allow far more

# Runs before the page's own scripts: catch the xterm Terminal as the page assigns it to `.terminal`.
HOOK = """
(() => {
  Object.defineProperty(Object.prototype, "terminal", {
    configurable: true,
    get() { return undefined; },
    set(value) {
      Object.defineProperty(this, "terminal", {value, writable: true, configurable: true, enumerable: true});
      if (value && value.buffer && typeof value.write === "function") window.__qkvTerminal = value;
    },
  });
  window.__qkvText = () => {
    const term = window.__qkvTerminal;
    if (!term) return "";
    const buffer = term.buffer.active;
    const lines = [];
    for (let y = 0; y < term.rows; y++) {
      const line = buffer.getLine(buffer.viewportY + y);
      lines.push(line ? line.translateToString(true) : "");
    }
    return lines.join("\\n");
  };
})();
"""


def catch_downloads(context: Any) -> list[tuple[str, bytes]]:
    """Every /download/KEY the page opens from now on (in a browser a screenshot or a save is a download), as
    the server serves it: (its content-disposition, its body), appended as each arrives."""
    downloads: list[tuple[str, bytes]] = []

    def keep(route: Any) -> None:
        response = route.fetch()
        downloads.append((response.headers.get("content-disposition", ""), response.body()))
        route.fulfill(response=response)

    context.route("**/download/**", keep)
    return downloads


def wait_for_a_download(page: Any, downloads: list[tuple[str, bytes]]) -> None:
    deadline = time.monotonic() + WAIT_MS / 1000
    while not downloads and time.monotonic() < deadline:
        page.wait_for_timeout(200)  # a poll for the condition, not a sleep the test relies on


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serving(log_dir: Path, cwd: Path | None = None, env: dict[str, str] | None = None,
            options: tuple[str, ...] = (), scenario: str = "i_love_ai") -> Iterator[str]:
    """`qkv-tui --serve i_love_ai` (with options, or another scenario) on a free port, as a user starts it;
    its URL once it answers."""
    port = free_port()
    log = (log_dir / "server.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "qkv_tui", "--serve", "--port", str(port), *options, scenario], cwd=cwd, env=env,
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,  # its own group: app processes end with it
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + WAIT_MS / 1000
        while True:
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            assert proc.poll() is None, (log_dir / "server.log").read_text()
            assert time.monotonic() < deadline, "the server did not answer"
            time.sleep(0.2)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    with serving(tmp_path) as url:
        yield url


def test_server_page_points_the_browser_back_at_itself(server: str) -> None:
    # relative to the page: whatever Host, scheme and path a proxy put in front, the browser asks where it loaded it
    request = urllib.request.Request(server, headers={"Host": "class.example.org", "X-Forwarded-Proto": "https"})
    with urllib.request.urlopen(request, timeout=30) as response:
        page = response.read().decode()
    assert 'data-session-websocket-url="ws"' in page
    assert '<script src="static/js/textual.js">' in page
    assert "class.example.org" not in page and "127.0.0.1" not in page


def test_app_command_names_files_absolutely(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "mine.toml").write_text("")
    monkeypatch.chdir(tmp_path)
    assert app_command("mine.toml").endswith(f"-m qkv_tui {tmp_path / 'mine.toml'}")
    assert app_command("i_love_ai", ["--theme", "light"]).endswith("-m qkv_tui --theme light i_love_ai")
    assert app_command("it's mine").endswith("'it'\"'\"'s mine'")  # quoted for the shell


def test_a_browser_steps_through_the_app(server: str, tmp_path: Path) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip("no chromium on this machine (Debian: apt-get install -y chromium; .ci/run installs it)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[test]')")
    with sync_api.sync_playwright() as driver:
        context = driver.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, args=FLAGS,
        )
        try:
            page = context.new_page()
            requested: list[str] = []  # every request the page makes: the page, its scripts, fonts, the websocket
            page.on("request", lambda request: requested.append(request.url))
            page.on("websocket", lambda socket: requested.append(socket.url))
            page.add_init_script(HOOK)
            page.goto(server, timeout=WAIT_MS)
            page.wait_for_function("() => window.__qkvText().includes('op 1/66')", timeout=WAIT_MS)
            assert "I love AI" in page.evaluate("window.__qkvText()")
            page.click(".xterm-screen")  # keys go to the terminal that has focus
            for _ in range(3):
                page.keyboard.press("ArrowRight")
            page.wait_for_function("() => window.__qkvText().includes('op 4/66')", timeout=WAIT_MS)
            text = page.evaluate("window.__qkvText()")
            assert "Q[I,0] = X[I]·W_Q[:,0] = 1·1 + 0·0 + 1·1 + 0·0 = 2" in text  # the fourth operation, its real numbers
            # s: in a browser the screenshot is a download (the page opens /download/KEY); catch what it serves
            downloads = catch_downloads(context)
            page.keyboard.press("s")
            wait_for_a_download(page, downloads)
            assert downloads, "no download followed s"
            disposition, body = downloads[0]
            assert "i_love_ai-op04-project.svg" in disposition
            assert body.lstrip().startswith(b"<svg") and b"Q[I,0]" in body.replace(b"&#160;", b" ")
            assert b"url(http" not in body.replace(b'"', b"") and b"cdnjs" not in body  # the SVG fetches no font
            # offline is fine: nothing the page asked for was on another machine, and the font came from the server
            hosts = {urllib.parse.urlsplit(url).hostname for url in requested}
            assert hosts == {"127.0.0.1"}, sorted(set(requested))
            assert any("/static/fonts/RobotoMono" in url for url in requested), requested
            assert page.evaluate("document.fonts.check('16px \"Roboto Mono\"')")
        finally:
            context.close()


def test_serve_refuses_bad_input_in_one_line(tmp_path: Path) -> None:
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    bad = tmp_path / "bad.toml"
    bad.write_text("tokens = [\n")
    try:
        for args, says in (
            (["--port", str(port), "i_love_ai"], f"error: cannot serve on 127.0.0.1:{port}: Address already in use"
                                                 f" (another program listens there); expected a free port, e.g. --port"),
            (["--host", "no-such-host.invalid", "i_love_ai"],
             "error: cannot serve on no-such-host.invalid:8000: no such address"),
            (["--port", "0", "i_love_ai"], "error: --port 0: expected a port number from 1 to 65535"),
            ([str(bad)], f"error: {bad}: "),
        ):
            run = subprocess.run([sys.executable, "-m", "qkv_tui", "--serve", *args],
                                 capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
            assert run.returncode == 2, run
            last = run.stderr.strip().splitlines()
            assert len(last) == 1 and last[0].startswith(says), run.stderr
            assert "Traceback" not in run.stderr
            assert run.stdout == "", run.stdout  # nothing announced: no "serving …, Press Ctrl+C to stop" first
    finally:
        busy.close()
