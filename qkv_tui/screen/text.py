"""Text as a terminal can show it: control characters made visible (no Textual, no Rich).

A scenario's labels and names are the author's own words. A newline, a tab or an escape
byte inside one would start a new screen line or a terminal command in the middle of a
pane, so each is drawn as its Unicode "control picture" (newline as ␊), one cell wide,
like the character it stands for.
"""

from __future__ import annotations

import unicodedata

REPLACEMENT = "\ufffd"  # �: C1 controls and line separators have no picture of their own
_PICTURES = {**{i: chr(0x2400 + i) for i in range(0x20)}, 0x7F: "\u2421"}  # ␀ … ␟, ␡


def printable(text: str) -> str:
    """``text`` with every control character and line separator replaced by a visible one."""
    if text.isprintable() or not any(_is_control(ch) for ch in text):
        return text
    return "".join(_PICTURES.get(ord(ch), REPLACEMENT) if _is_control(ch) else ch for ch in text)


def _is_control(ch: str) -> bool:
    return unicodedata.category(ch) in ("Cc", "Zl", "Zp")
