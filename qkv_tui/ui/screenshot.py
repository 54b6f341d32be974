"""Screenshots that open without a network: the SVG names only fonts already on the reader's computer.

Textual's SVG (Rich's export template) loads Fira Code from cdnjs.cloudflare.com in its @font-face
rules, so a screenshot opened in a classroom that is offline asks the internet for fonts, and one
opened later reports to a third party that it was. Each rule keeps its ``local(...)`` sources and
loses its ``url(...)`` ones; the text then falls back to the viewer's own monospace font, as
Rich's ``font-family: Fira Code, monospace`` says. Rich places every character at a fixed
position, so a different monospace font changes the glyphs, never the layout (keeping_blanks makes
that so in every viewer).
"""

from __future__ import annotations

import re

FONT_FACE = re.compile(r"@font-face\s*\{([^{}]*)\}\s*")
# a url(...) naming another host (http:, https: or scheme-relative //), with its optional format(...)
REMOTE = re.compile(r"""url\(\s*["']?(?:[a-z][a-z0-9+.-]*:)?//.*\)(\s*format\(.*\))?""", re.IGNORECASE | re.DOTALL)


def without_web_fonts(svg: str) -> str:
    """The SVG with every @font-face source fetched from another host removed (a rule left with no
    source is dropped); local() and data: sources, and everything else, as they were."""

    def local_only(rule: re.Match[str]) -> str:
        declarations = _split(rule.group(1), ";")
        kept_rule = []
        for declaration in declarations:
            name, colon, value = declaration.partition(":")
            if colon and name.strip().lower() == "src":
                sources = [entry.strip() for entry in _split(value, ",")]
                kept = [entry for entry in sources if entry and not REMOTE.fullmatch(entry)]
                if not kept:
                    return ""
                declaration = f"{name}: {', '.join(kept)}"
            kept_rule.append(declaration)
        return f"@font-face {{{';'.join(kept_rule)}}}" + rule.group(0)[len(rule.group(0).rstrip()):]

    return FONT_FACE.sub(local_only, svg)


def keeping_blanks(svg: str) -> str:
    """The SVG with its blanks kept where they are: ``xml:space="preserve"`` on the root element.

    Rich writes each run of equally styled cells as one ``<text>`` placed at its first cell, and a run
    often starts with blanks: the space between a row label and the first number ("love" │ " 0 1 0 1"),
    a right-aligned number's padding, a header's. Under XML's default whitespace rule librsvg (rsvg-convert,
    and the SVG viewers of many desktops) drops a text's leading blanks, non-breaking ones included, and
    draws the rest from the run's first cell: every such number moved one cell left, onto the label
    ("love0 1 0 1"), and headers left of their columns. Browsers kept them; with the rule every viewer does.
    """
    return svg.replace("<svg ", '<svg xml:space="preserve" ', 1)


def _split(text: str, separator: str) -> list[str]:
    """``text`` split at each ``separator`` outside quotes and brackets (a data: URL holds ; and ,)."""
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
        elif ch == separator and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts
