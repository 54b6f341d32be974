"""A term a part adds to the scaled scores (ALiBi's bias): the module that writes its lines, as the part's record
names it, for the Scale stage and the soft-cap's operation."""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any

from qkv_tui.core import part_questions as ask
from qkv_tui.core.engine import HeadResult


def _first(heads: Iterable[HeadResult]) -> list[HeadResult]:
    # a term is a table's (ALiBi's bias): every head of the layer adds one or none does, so the first head answers
    # for the layer; asking every head at every operation made a page's work grow with the square of the heads
    first = next(iter(heads), None)
    return [] if first is None else [first]


def term_lines(heads: Iterable[HeadResult]) -> Any:
    """The module that writes the lines of a term a part of ``heads`` adds to the scaled scores, as its record names
    it (core/part_questions.py face, view ``"scale"``); None where no part adds one."""
    module = ask.face(_first(heads), "scale")
    return None if module is None else importlib.import_module(module)


def adds_term(heads: Iterable[HeadResult]) -> bool:
    """Whether a part of ``heads`` adds a term to the scaled scores (the Scale stage's pane ``bias``)."""
    return any(ask.term_name(hr) is not None for hr in _first(heads))
