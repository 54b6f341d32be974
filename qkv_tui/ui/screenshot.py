"""Screenshots that open without a network: the SVG names only fonts already on the reader's computer.

Textual's SVG (Rich's export template) loads Fira Code from cdnjs.cloudflare.com in its @font-face
rules, so a screenshot opened in a classroom that is offline asks the internet for fonts, and one
opened later reports to a third party that it was. Each rule keeps its ``local(...)`` sources and
loses its ``url(...)`` ones; the text then falls back to the viewer's own monospace font, as
Rich's ``font-family: Fira Code, monospace`` says. Rich places every character at a fixed
position, so a different monospace font changes the glyphs, never the layout.
"""

from __future__ import annotations

import re

FONT_FACE = re.compile(r"@font-face\s*\{[^{}]*\}\s*")
SOURCES = re.compile(r"(\bsrc\s*:\s*)([^;{}]*)(;?)")
# a url(...) with its optional format(...), one entry of a src list
URL_SOURCE = re.compile(r"""url\(\s*(["']?)[^)]*?\1\s*\)(\s*format\([^)]*\))?""")


def without_web_fonts(svg: str) -> str:
    """The SVG with every @font-face source that is fetched by URL removed (a rule left with no
    source is dropped); everything else as it was."""

    def local_only(rule: re.Match[str]) -> str:
        block = rule.group(0)
        found = SOURCES.search(block)
        if found is None:
            return block
        entries = [entry.strip() for entry in _split_sources(found.group(2))]
        kept = [entry for entry in entries if entry and not URL_SOURCE.fullmatch(entry)]
        if not kept:
            return ""
        return block[: found.start(2)] + ", ".join(kept) + block[found.end(2):]

    return FONT_FACE.sub(local_only, svg)


def _split_sources(text: str) -> list[str]:
    """A src list split at its top-level commas (a quoted name or a url may hold one)."""
    parts, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(depth - 1, 0)
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts
