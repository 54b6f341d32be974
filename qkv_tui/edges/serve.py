"""The app in web browsers, for a classroom: textual-serve starts one app process per browser tab.

It binds to 127.0.0.1 unless told otherwise and has no login of its own: for students on other
machines, put a reverse proxy with TLS and a login in front of it (README, "A classroom in the
browser"). Each tab costs one Python process running the app (measured by benchmarks/serve_cost.py).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiohttp import web
    from textual_serve.server import Server

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000


def app_command(spec: str, options: list[str] | None = None) -> str:
    """The shell command each browser tab runs: this Python, this package, the scenario."""
    path = Path(spec)
    # a file is named absolutely, so the app finds it whatever folder the server was started from
    target = str(path.resolve()) if path.is_file() else spec
    return shlex.join([sys.executable, "-m", "qkv_tui", *(options or []), target])


def make_server(command: str, host: str, port: int, title: str) -> Server:
    """textual-serve's server, with the page's websocket address taken from the browser's own request.

    textual-serve writes ``http://HOST:PORT`` into the page; with ``--host 0.0.0.0`` that address means
    nothing to a student's browser, and behind a reverse proxy the port and scheme differ too. The
    address the browser used (the Host header, and X-Forwarded-Proto from a TLS proxy) always works.
    Imported here, not at the top: the edges load no UI library until one is used.
    """
    import aiohttp_jinja2
    from textual_serve.server import Server

    class ClassroomServer(Server):
        def __init__(self, command: str, host: str, port: int, title: str) -> None:
            super().__init__(command, host=host, port=port, title=title)

        @aiohttp_jinja2.template("app_index.html")
        async def handle_index(self, request: web.Request) -> dict[str, Any]:
            scheme = request.headers.get("X-Forwarded-Proto", request.scheme).split(",")[0].strip()
            base = f"{'https' if scheme == 'https' else 'http'}://{request.host}"
            websocket = ("wss" if base.startswith("https") else "ws") + base[base.index(":"):]
            static = f"{base}{request.app.router['static'].url_for(filename='/')}".rstrip("/") + "/"
            try:
                font_size = int(request.query.get("fontsize", "16"))
            except ValueError:
                font_size = 16
            return {
                "font_size": font_size,
                "app_websocket_url": f"{websocket}{request.app.router['websocket'].url_for()}",
                "config": {"static": {"url": static}},
                "application": {"name": self.title},
            }

        async def on_startup(self, app: web.Application) -> None:
            shown = f"[{self.host}]" if ":" in self.host else self.host
            print(f"qkv-tui: serving {self.title!r} at http://{shown}:{self.port}/ (one app per browser tab)")
            if self.host in ("127.0.0.1", "localhost", "::1"):
                print("Only this computer can connect. For a classroom: --host, behind a reverse proxy with TLS and a login.")
            else:
                print("There is no login: anyone who can reach this address gets an app. Put a proxy with one in front.")
            print("Press Ctrl+C to stop.", flush=True)

    return ClassroomServer(command, host=host, port=port, title=title)


def serve(spec: str, title: str, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, options: list[str] | None = None) -> int:
    """Serve until Ctrl+C; returns the exit status (2 when the address cannot be used)."""
    server = make_server(app_command(spec, options), host, port, title)
    try:
        server.serve()
    except OSError as exc:
        sys.stderr.write(f"error: cannot serve on {host}:{port}: {exc.strerror or exc}\n")
        return 2
    return 0
