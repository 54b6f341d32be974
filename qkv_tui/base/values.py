"""How an error message names a value from a scenario file: short, one line, safe at any size.

Shared by the importers, the loader and the modern keys, so all three say the same; the
importers sit below the core, so this sits below them both.
"""

from __future__ import annotations

import math
import unicodedata
from typing import Any

_LONG_BITS = 256  # an integer past this (about 78 digits) is described, never written out


def _about(value: int) -> str:
    return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1:,} digits"


class LongInt(int):
    """An integer from a file too long to print: it compares and computes like any int, but
    formats as its description. Python refuses ``str()`` of an int past 4,300 digits (a
    ValueError, raised while a message is being built), so :func:`tame` wraps every such
    integer as the file is read, and no f-string of any message can trip on one."""

    def __repr__(self) -> str:
        return _about(self)

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        try:
            return format(_about(self), spec)  # a width or an alignment applies to the description
        except ValueError:  # a number's spec (",", "d", ".2f") does not
            return _about(self)


def tame(value: Any) -> Any:
    """``value`` (a parsed TOML document, or any part of one) with every integer of more than
    256 bits made a :class:`LongInt`, in place where it sits in a list or a table. A list of
    numbers is looked at in C (its largest magnitude), so a matrix costs next to nothing."""
    if _is_long(value):
        return LongInt(value)
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, inner in item.items():
                if _is_long(inner):
                    item[key] = LongInt(inner)
                elif isinstance(inner, (dict, list)):
                    stack.append(inner)
        elif isinstance(item, list) and item:
            kinds = set(map(type, item))
            numbers = kinds & _NUMBER_TYPES
            if int in kinds and (kinds != numbers or max(map(abs, item)) >= _LONG):
                for i, inner in enumerate(item):
                    if _is_long(inner):
                        item[i] = LongInt(inner)
            if kinds != numbers:
                stack.extend(inner for inner in item if isinstance(inner, (dict, list)))
    return value


_NUMBER_TYPES = frozenset({int, float, bool})
_LONG = 1 << _LONG_BITS  # the smallest magnitude with more than 256 bits


def _is_long(value: Any) -> bool:
    return type(value) is int and value.bit_length() > _LONG_BITS


def show(value: Any) -> str:
    """A value as a message shows it; an integer of thousands of digits is described, not printed."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > _LONG_BITS:
        return _about(value)
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


def escaped(text: str) -> str:
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
    text = escaped(text)
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
