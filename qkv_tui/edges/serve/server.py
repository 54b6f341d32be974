"""The app in web browsers, for a classroom: textual-serve runs one app process per browser tab.

It binds to 127.0.0.1 unless told otherwise and has no login of its own: for students on other
machines, put a reverse proxy with TLS and a login in front of it (docs/deploy.md, and the nginx
example in deploy/). Behind a proxy the page may live at any path: its addresses are relative to
the page, or built from ``--public-url``; ``--max-students`` caps the apps one process runs and
answers a student over it with a page that says the class is full. Each tab's app is a process
forked from one that has imported everything already (fork.py, zygote.py), so a class arriving at
once does not wait for thirty Pythons to import Textual and NumPy (benchmarks/serve_cost.py).

Nothing the browser is sent points off the server: textual-serve's page asks Google Fonts for
Roboto Mono, which a classroom offline (or behind a strict proxy) never gets. The page here names
the copy of that font textual-serve ships in its static folder instead (Roboto Mono, Apache
License 2.0), and the terminal falls back to the browser's own monospace fonts without it.
"""

from __future__ import annotations

import errno
import html
import json
import logging
import re
import shlex
import socket
import sys
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiohttp import web
    from textual_serve.server import Server

log = logging.getLogger("textual-serve")  # where textual-serve's own handler reports an app's failure

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000

# the fonts textual-serve ships in static/fonts, and the @font-face rules that serve them from there
FONTS = (("RobotoMono-VariableFont_wght.ttf", "normal"), ("RobotoMono-Italic-VariableFont_wght.ttf", "italic"))
# every <link> in the page, and the address it names
LINK = re.compile(r"""<link\b[^>]*?\bhref\s*=\s*["']?([^"'\s>]+)[^>]*>\s*""", re.IGNORECASE)


def local_fonts(page: str, base: str, static_url: str, fonts: list[str]) -> str:
    """The page without links off the server (``base``, its own address as the browser sees it), and
    with @font-face rules for ``fonts`` (file names in static/fonts) so that the terminal's "Roboto Mono"
    comes from this server; the browser's own monospace fonts when there are none."""
    def keep_own(link: re.Match[str]) -> str:
        address = link.group(1)
        off_server = address.startswith("//") or (re.match(r"[a-z][a-z0-9+.-]*:", address, re.IGNORECASE) is not None
                                                   and not address.startswith(f"{base}/"))
        return "" if off_server else link.group(0)

    page = LINK.sub(keep_own, page)
    rules = "".join(
        f'@font-face {{ font-family: "Roboto Mono"; font-style: {style}; font-weight: 100 700; font-display: swap;'
        f' src: local("Roboto Mono"), url("{static_url}fonts/{name}") format("truetype"); }}\n'
        for name, style in FONTS if name in fonts
    )
    if rules:
        page = re.sub(r"<head>", lambda found: f"{found.group(0)}\n    <style>\n{rules}    </style>", page, count=1)
    return page


def public_url_problem(url: str) -> str | None:
    """Why ``--public-url`` cannot be the address students open (not http(s), no host, a query), or None."""
    if re.search(r"[\s\"'<>\\`]", url):  # it goes into the page's attributes and script as written
        return "expected an address without spaces, quotes, <, > or backslashes (percent-encode them)"
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError as exc:  # an unbalanced [ in the host
        return f"not an address ({exc})"
    try:
        parts.port  # noqa: B018 -- a port that is not a number, or out of range, raises here
    except ValueError:
        return "expected a port number from 1 to 65535 after the host's colon"
    if parts.scheme not in ("http", "https"):
        return "expected the address students open, starting http:// or https://"
    if not parts.hostname:
        return "expected a host after the scheme, e.g. https://class.example.org/class/"
    if parts.query or parts.fragment or parts.username is not None:
        return "expected no query, fragment or user name: only scheme, host, port and path"
    return None


def public_base(url: str) -> str:
    """``--public-url`` as the folder the page's own addresses hang from: with its trailing slash."""
    return url if url.endswith("/") else f"{url}/"


def full_page(title: str, seats: int) -> str:
    """What a student over ``--max-students`` sees instead of an app: that the class is full, and what to do."""
    name = html.escape(title)
    return f"""<!DOCTYPE html>
<html lang="en">
  <head>
    <meta charset="utf-8">
    <meta http-equiv="refresh" content="{FULL_RETRY_S}">
    <title>The class is full: {name}</title>
    <style>body {{ font-family: sans-serif; max-width: 36em; margin: 4em auto; line-height: 1.5; }}</style>
  </head>
  <body>
    <h1>The class is full</h1>
    <p>All {seats} seat{"s" if seats != 1 else ""} for <b>{name}</b> on this server are taken, so no app was
    started for you.</p>
    <p>What to do: keep this tab open, it tries again every {FULL_RETRY_S} seconds and opens the app as soon as a
    seat is free (when another student closes their tab); or ask your teacher for another address of the class.</p>
  </body>
</html>
"""


# the page at the end of <body>, before textual.js makes the terminal (on window.onload): the websocket
# address from the page's own (a proxy may serve it at any path), and downloads under it too, since
# textual.js 1.1.3 opens them at the server's root (location.origin + "/download/...")
PAGE_SCRIPT = """<script>
(() => {
  const base = new URL(%s, window.location.href);
  const terminal = document.getElementById("terminal");
  const socket = new URL("ws", base);
  socket.protocol = socket.protocol === "https:" ? "wss:" : "ws:";
  terminal.dataset.sessionWebsocketUrl = socket.href;
  const root = window.location.origin + "/download/";
  const open = window.open.bind(window);
  window.open = (url, ...rest) =>
    open(typeof url === "string" && url.startsWith(root) ? new URL("download/" + url.slice(root.length), base).href
                                                       : url, ...rest);
})();
</script>
"""
FULL_RETRY_S = 30  # how often the class-is-full page asks again by itself


def port_problem(host: str, port: int) -> str | None:
    """Why the server could not listen on host:port (in use, not allowed, no such address), or None.

    Bound and closed again at once, the way the server will bind it (every address the name has,
    SO_REUSEADDR), so that a busy port is one error line before anything is announced."""
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError) as exc:
        return f"no such address ({getattr(exc, 'strerror', None) or exc})"
    for family, kind, proto, _name, address in addresses:
        try:
            with socket.socket(family, kind, proto) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                    probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                probe.bind(address)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            if exc.errno == errno.EADDRINUSE:
                other = port + 1 if port < 65535 else DEFAULT_PORT
                return f"{reason} (another program listens there); expected a free port, e.g. --port {other}"
            if exc.errno == errno.EACCES:
                return f"{reason} (ports below 1024 need root); expected a port from 1024 to 65535, e.g. --port 8000"
            return reason
    return None


def app_argv(spec: str, options: list[str] | None = None) -> list[str]:
    """The command line of each browser tab's app, after ``qkv-tui``: its options, the scenario."""
    path = Path(spec)
    # a file is named absolutely, so the app finds it whatever folder the server was started from
    target = str(path.resolve()) if path.is_file() else spec
    return [*(options or []), target]


def app_command(spec: str, options: list[str] | None = None) -> str:
    """The shell command a browser tab would run without the app starter: this Python, this package, the scenario."""
    return shlex.join([sys.executable, "-m", "qkv_tui", *app_argv(spec, options)])


def make_server(command: str, host: str, port: int, title: str, argv: list[str] | None = None,
                public_url: str | None = None, max_students: int | None = None) -> Server:
    """textual-serve's server, with the page's addresses relative to the page itself, or under ``public_url``.

    textual-serve writes ``http://HOST:PORT`` into the page; with ``--host 0.0.0.0`` that address means
    nothing to a student's browser, and behind a reverse proxy the port, scheme and path differ too (a
    proxy that serves the class at /class/ strips that path before it asks this server). Addresses
    relative to the page the browser loaded always work; ``public_url`` names them absolutely, for a
    proxy that sends a tab's later requests to this process by their path (deploy/nginx-qkv-class.conf).
    Over ``max_students`` live apps the page is HTTP 503 saying the class is full, and no app starts.
    Each tab's app is forked by the app starter with ``argv`` (fork.py); ``command`` starts one
    the old way when there is no app starter (argv None, or one that cannot start).
    Imported here, not at the top: the edges load no UI library until one is used.
    """
    import asyncio

    import aiohttp_jinja2
    from aiohttp import web
    from textual_serve.server import Server, to_int

    from qkv_tui.edges.serve.fork import ForkedAppService, Zygote

    class ClassroomServer(Server):
        def __init__(self, command: str, host: str, port: int, title: str) -> None:
            super().__init__(command, host=host, port=port, title=title)
            folder = Path(self.statics_path) / "fonts"
            self.fonts = [name for name, _ in FONTS if (folder / name).is_file()]
            self.zygote: Zygote | None = None
            self.students = 0  # live apps: a seat is taken when a websocket arrives and freed when it ends

        def full(self) -> bool:
            return max_students is not None and self.students >= max_students

        def full_response(self) -> web.HTTPServiceUnavailable:
            assert max_students is not None
            return web.HTTPServiceUnavailable(text=full_page(self.title, max_students), content_type="text/html",
                                              headers={"Retry-After": str(FULL_RETRY_S), "Cache-Control": "no-store"})

        async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
            """textual-serve 1.1.3's own, with the app forked by the app starter (ForkedAppService), in a seat."""
            if self.full():  # a page served before the last seat went: no app, and the page's "Restart" tells
                raise self.full_response()
            self.students += 1  # before the first await: two tabs arriving together cannot both take the last seat
            try:
                return await self._seated(request)
            finally:
                self.students -= 1

        async def _seated(self, request: web.Request) -> web.WebSocketResponse:
            websocket = web.WebSocketResponse(heartbeat=15)
            width = to_int(request.query.get("width", "80"), 80)
            height = to_int(request.query.get("height", "24"), 24)
            app_service: ForkedAppService | None = None
            try:
                await websocket.prepare(request)
                app_service = ForkedAppService(
                    self.command, zygote=self.zygote, argv=argv or [], write_bytes=websocket.send_bytes,
                    write_str=websocket.send_str, close=websocket.close, download_manager=self.download_manager,
                    debug=self.debug,
                )
                await app_service.start(width, height)
                try:
                    await self._process_messages(websocket, app_service)
                finally:
                    await app_service.stop()
            except asyncio.CancelledError:
                await websocket.close()
            except Exception as error:
                log.exception(error)
            finally:
                if app_service is not None:
                    await app_service.stop()
            return websocket

        async def handle_index(self, request: web.Request) -> web.Response:
            if self.full():
                raise self.full_response()
            # public: the folder the page's addresses hang from; "" is the page's own folder (relative addresses)
            public = "" if public_url is None else public_base(public_url)
            static = f"{public}static/"
            websocket = "ws" if public_url is None else re.sub(r"^http", "ws", public) + "ws"
            try:
                font_size = int(request.query.get("fontsize", "16"))
            except ValueError:
                font_size = 16
            context = {
                "font_size": font_size,
                "app_websocket_url": websocket,
                "config": {"static": {"url": static}},
                "application": {"name": self.title},
            }
            page = aiohttp_jinja2.render_string("app_index.html", request, context)
            script = PAGE_SCRIPT % json.dumps(public).replace("<", "\\u003c")
            page = page.replace("</body>", f"{script}  </body>", 1)
            return web.Response(text=local_fonts(page, public.rstrip("/"), static, self.fonts), content_type="text/html")

        async def on_startup(self, app: web.Application) -> None:
            if argv is not None:
                # before the port opens: the first student's app is forked too, not kept waiting for the imports
                probe = ForkedAppService(self.command, zygote=None, argv=argv, write_bytes=_nothing, write_str=_nothing,
                                         close=_nothing, download_manager=self.download_manager, debug=self.debug)
                self.zygote = Zygote(probe._build_environment(), argv)
                try:
                    self.zygote.start()
                except OSError as exc:
                    print(f"qkv-tui: cannot start the app starter ({exc.strerror or exc}): each student's app starts"
                          " as a fresh Python (slower)", file=sys.stderr, flush=True)
                    self.zygote = None
                else:
                    await self.zygote.wait_ready()  # one that fails has said so; the first tab tries a new one
            shown = f"[{self.host}]" if ":" in self.host else self.host
            seats = "" if max_students is None else f", at most {max_students} at once"
            where = "" if public_url is None else f", for students at {public_url}"
            print(f"qkv-tui: serving {self.title!r} at http://{shown}:{self.port}/{where} (one app per browser tab{seats})")
            if self.host in ("127.0.0.1", "localhost", "::1"):
                print("Only this computer can connect. For a classroom: --host, behind a reverse proxy with TLS and a login.")
            else:
                print("There is no login: anyone who can reach this address gets an app. Put a proxy with one in front.")
            print("Press Ctrl+C to stop.", flush=True)

        async def on_shutdown(self, app: web.Application) -> None:
            if self.zygote is not None:
                self.zygote.stop()

    async def _nothing(*_args: object) -> None:
        return None

    return ClassroomServer(command, host=host, port=port, title=title)


def serve(spec: str, title: str, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, options: list[str] | None = None,
          public_url: str | None = None, max_students: int | None = None) -> int:
    """Serve until Ctrl+C; returns the exit status (2 when the address cannot be used)."""
    if (problem := port_problem(host, port)) is not None:
        sys.stderr.write(f"error: cannot serve on {host}:{port}: {problem}\n")
        return 2
    server = make_server(app_command(spec, options), host, port, title, app_argv(spec, options),
                         public_url=public_url, max_students=max_students)
    try:
        server.serve()
    except OSError as exc:
        sys.stderr.write(f"error: cannot serve on {host}:{port}: {exc.strerror or exc}\n")
        return 2
    return 0
