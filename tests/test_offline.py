"""A classroom may be offline: nothing the app writes or serves asks the internet for anything.

The SVG screenshots (s, and Textual's own from the palette) name only local fonts; the page --serve
sends names only its own server. The browser's own requests are checked in tests/test_serve.py.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from qkv_tui.edges.serve.server import FONTS, local_fonts
from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.screenshot import without_web_fonts

SIZE = (120, 40)
SVG_NAMESPACE = "http://www.w3.org/2000/svg"  # a name, never fetched


def fetched(text: str) -> list[str]:
    """Every address a browser would fetch from SVG or HTML: CSS url(...), and src= / href= attributes."""
    urls = re.findall(r"""url\(\s*["']?([^"')\s]+)""", text)
    urls += re.findall(r"""\b(?:src|href)\s*=\s*["']?([^"'\s>]+)""", text)
    return urls


def off_site(urls: list[str], own: str | None = None) -> list[str]:
    return [u for u in urls if re.match(r"(?:[a-z][a-z0-9+.-]*:)?//", u, re.IGNORECASE)
            and not (own and u.startswith(own + "/"))]


async def shot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> str:
    monkeypatch.chdir(tmp_path)
    app = QKVApp("i_love_ai")
    async with app.run_test(size=SIZE) as pilot:
        if how == "s":
            await pilot.press("s")
        else:
            app.deliver_screenshot(filename="palette.svg", path=str(tmp_path))  # what the palette's Screenshot calls
        for _ in range(300):  # written by a thread: wait for the file, not for a clock
            await pilot.pause(0.02)
            files = list(tmp_path.glob("*.svg"))
            if files and files[0].read_text().rstrip().endswith("</svg>"):
                return files[0].read_text()
    raise AssertionError("no screenshot was written")


@pytest.mark.parametrize("how", ["s", "palette"])
async def test_a_screenshot_fetches_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    svg = await shot(tmp_path, monkeypatch, how)
    assert off_site(fetched(svg)) == []
    assert "cdnjs" not in svg and "@font-face" in svg and 'local("FiraCode-Regular")' in svg  # the local font stays
    assert "I love AI" in svg.replace("&#160;", " ")
    ET.fromstring(svg)  # still well-formed
    assert set(re.findall(r"https?://[^\s\"'<>)]+", svg)) <= {SVG_NAMESPACE, "https://www.textualize.io"}  # a comment


def test_only_url_sources_go() -> None:
    rule = ('@font-face { font-family: "X"; src: local("X Regular"), url("https://cdn.example/x.woff2") format("woff2"),'
            " url(//cdn.example/x.woff), url('data:font/woff2;base64,AAAA') format(\"woff2\"); }")
    assert without_web_fonts(rule + " .a { color: red }") == (
        '@font-face { font-family: "X"; src: local("X Regular"), url(\'data:font/woff2;base64,AAAA\') format("woff2"); }'
        " .a { color: red }")  # a data: URL is in the file itself: it stays
    assert without_web_fonts('@font-face { font-family: "Y"; src: url("https://cdn.example/y.woff"); }\n.b {}') == ".b {}"
    assert without_web_fonts("<svg>no fonts</svg>") == "<svg>no fonts</svg>"


def test_textual_serves_page_keeps_its_own_links_and_loses_the_others() -> None:
    """textual-serve's own template, rendered as its server would: Google Fonts' stylesheet goes, the
    server's own stylesheet and script stay, and the font comes from the server's static folder."""
    import jinja2
    from textual_serve import server

    folder = Path(server.__file__).parent
    base, static = "http://127.0.0.1:8000", "http://127.0.0.1:8000/static/"
    page = jinja2.Environment(loader=jinja2.FileSystemLoader(folder / "templates"), autoescape=True).get_template(
        "app_index.html").render(font_size=16, app_websocket_url="ws://127.0.0.1:8000/ws",
                                 config={"static": {"url": static}}, application={"name": "I love AI"})
    assert off_site(fetched(page), base), "textual-serve's page no longer fetches anything off the server: review"
    shipped = [name for name, _ in FONTS if (folder / "static" / "fonts" / name).is_file()]
    assert shipped == [name for name, _ in FONTS]  # textual-serve still ships them
    ours = local_fonts(page, base, static, shipped)
    assert off_site(fetched(ours), base) == []
    assert f'href="{static}css/xterm.css"' in ours and f'src="{static}js/textual.js"' in ours
    assert f'url("{static}fonts/RobotoMono-VariableFont_wght.ttf")' in ours
    assert local_fonts(page, base, static, []).count("@font-face") == 0  # no font there: the browser's monospace
