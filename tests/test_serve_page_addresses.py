"""The page --serve sends names its websocket, scripts, fonts and downloads relative to itself, or under
--public-url: behind a proxy that serves the class at a path (and strips it), the browser still finds them."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

import pytest

from qkv_tui.edges.serve.server import public_base, public_url_problem

from .test_serve import serving


def fetched(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        return str(response.read().decode())


def addresses(page: str) -> list[str]:
    return re.findall(r'(?:\bhref=|\bsrc=|\burl\()"([^"]+)"', page)


def test_without_a_public_url_every_address_is_relative_to_the_page(tmp_path: Path) -> None:
    with serving(tmp_path) as url:
        page = fetched(url)
    assert 'data-session-websocket-url="ws"' in page
    found = addresses(page)
    assert "static/js/textual.js" in found and "static/css/xterm.css" in found
    assert all(not re.match(r"[a-z]+:|/", address) for address in found), found  # no scheme, no root
    # the page's script makes the websocket address absolute from the page's own, before textual.js reads it
    assert 'new URL("", window.location.href)' in page
    assert page.index("sessionWebsocketUrl = socket.href") < page.index("</body>")


def test_a_public_url_names_every_address_under_it(tmp_path: Path) -> None:
    with serving(tmp_path, options=("--public-url", "https://class.example.org/ai/2")) as url:
        page = fetched(url)
        log = (tmp_path / "server.log").read_text()
    assert 'data-session-websocket-url="wss://class.example.org/ai/2/ws"' in page
    found = addresses(page)
    assert "https://class.example.org/ai/2/static/js/textual.js" in found
    assert all(address.startswith("https://class.example.org/ai/2/static/") for address in found), found
    assert 'new URL("https://class.example.org/ai/2/", window.location.href)' in page  # downloads go there too
    assert "fonts.googleapis.com" not in page
    assert "for students at https://class.example.org/ai/2" in log


@pytest.mark.parametrize(("url", "problem"), [
    ("https://class.example.org/ai/", None),
    ("http://10.0.0.5:8080", None),
    ("ftp://class.example.org/", "starting http:// or https://"),
    ("class.example.org/ai/", "starting http:// or https://"),
    ("https://", "expected a host"),
    ("https://class.example.org:99999/", "expected a port number from 1 to 65535"),
    ("https://class.example.org/?x=1", "expected no query"),
    ("https://me@class.example.org/", "expected no query, fragment or user name"),
    ("http://[::1/", "not an address"),
    ('https://h/class/"><script>', "expected an address without spaces, quotes"),
    ("https://h/my class/", "expected an address without spaces, quotes"),
])
def test_public_url_problem(url: str, problem: str | None) -> None:
    said = public_url_problem(url)
    assert (said is None) if problem is None else (said is not None and problem in said), said


def test_public_base_ends_in_a_slash() -> None:
    assert public_base("https://h/class") == public_base("https://h/class/") == "https://h/class/"
