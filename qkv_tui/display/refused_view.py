"""A side view a head's part refuses (core/part_questions.py): one frame, one line that says why.

The cache and tiles views are reached through here (display/side_views.py): a scenario whose parts refuse
neither gets the view's own steps and frames, unchanged.
"""

from __future__ import annotations

import importlib
from typing import Any

from qkv_tui.core import part_questions as ask
from qkv_tui.core.part_questions import refusal
from qkv_tui.display.frame import Frame
from qkv_tui.display.view import Explanation


def refused_frame(line: str) -> Frame:
    explanation = Explanation(stage_label="not shown", counter="", head_label="", arithmetic=line, details=(),
                              formula=(), meaning="")
    return Frame(explanation, [], [], (), "")


def _view(module: str, name: str) -> Any:
    return getattr(importlib.import_module(f"qkv_tui.display.{module}"), name)


def _steps(view: str, module: str, sources: Any, *args: Any) -> int:
    return 1 if refusal(sources.comp.heads, view) is not None else int(_view(module, "_steps")(sources, *args))


def _frame(view: str, module: str, sources: Any, *args: Any) -> Frame:
    line = refusal(sources.comp.heads, view)
    return refused_frame(line) if line is not None else _view(module, "_frame")(sources, *args)


def cache_steps(sources: Any, *args: Any) -> int:
    return _steps("cache", "decode_view", sources, *args)


def cache_frame(sources: Any, *args: Any) -> Frame:
    return _frame("cache", "decode_view", sources, *args)


def tiles_steps(sources: Any, *args: Any) -> int:
    return _steps("tiles", "tiled_view", sources, *args)


def tiles_frame(sources: Any, *args: Any) -> Frame:
    return _frame("tiles", "tiled_view", sources, *args)


def cache_empty(sources: Any) -> bool:
    """The cache view has one line here: a part refuses it."""
    return refusal(sources.comp.heads, "cache") is not None


def tiles_empty(sources: Any) -> bool:
    """The tiles view has one line here: a part refuses it, or the heads keep a state, with no n × n map to tile
    (display/state_view.py NO_TILES)."""
    return refusal(sources.comp.heads, "tiles") is not None or ask.face(sources.comp.heads, "state") is not None
