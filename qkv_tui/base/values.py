"""How an error message names a value from a scenario file: short, one line, safe at any size.

Shared by the importers, the loader and the modern keys, so all three say the same; the
importers sit below the core, so this sits below them both.
"""

from __future__ import annotations

import math
import unicodedata
from typing import Any


def show(value: Any) -> str:
    """A value as a message shows it; an integer of thousands of digits is described, not printed."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1:,} digits"
    if isinstance(value, str):
        return repr(value if len(value) <= 60 else value[:57] + "...")
    return repr(value) if isinstance(value, float) else str(value)


def kind(value: Any) -> str:
    """What a value is, with the value where it is short: ``a number (3)``, ``an empty list``."""
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, str):
        return f"a string ({show(value)})"
    if isinstance(value, (int, float)):
        return f"a number ({show(value)})"
    if isinstance(value, list):
        return "a list" if value else "an empty list"
    if isinstance(value, dict):
        return "a table"
    return f"a {type(value).__name__}"


def printable(text: str) -> str:
    """One line of text that any terminal shows as written: control characters and
    undecodable bytes (a path from argv) become escapes such as ``\\n``."""
    if text.isprintable():
        return text
    out = []
    for ch in text:
        if ch.isprintable() or ch == " ":
            out.append(ch)
        else:
            out.append(ch.encode("unicode_escape", "backslashreplace").decode("ascii"))
    return "".join(out)


def visible(text: str) -> bool:
    """True when the text leaves a mark: some character that is not a space (Zs) or zero-width (Cf)."""
    return any(not ch.isspace() and unicodedata.category(ch) not in ("Zs", "Cf") for ch in text)


def token_label(text: str) -> str:
    """A tokenizer's token as a label that shows: escaped where it would not, and ``␣`` for each space
    of a token that is only spaces (a model's token must never be refused as a blank label)."""
    text = printable(text)
    if visible(text):
        return text
    return "".join("␣" if ch == " " else ch.encode("unicode_escape").decode("ascii") for ch in text) or "∅"


SUBSCRIPTS = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")


def distinct_labels(labels: tuple[str, ...]) -> tuple[str, ...]:
    """Labels as the screens show them: a label that repeats gets its occurrence as a subscript on every
    occurrence (``▁the₁ … ▁the₃``), so rows, columns and arithmetic lines name one token each; labels that
    occur once are unchanged. Should a suffixed label collide with another label, positions are used instead."""
    counts: dict[str, int] = {}
    for label in labels:
        counts[label] = counts.get(label, 0) + 1
    if all(c == 1 for c in counts.values()):
        return labels
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        if counts[label] == 1:
            out.append(label)
            continue
        seen[label] = seen.get(label, 0) + 1
        out.append(label + str(seen[label]).translate(SUBSCRIPTS))
    if len(set(out)) == len(out):
        return tuple(out)
    return tuple(label if counts[label] == 1 else f"{label}@{i}" for i, label in enumerate(labels))
