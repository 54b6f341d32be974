"""The side views, each listed once: the app's keys, the palette, the help, the screenshots' names and
the closing summary walk this list (display/side_view.py says what an entry holds).

An entry holds a view's key, words and help here; what it draws (its steps, frames, its own keys) is in
its module, imported the first time the view is used: the first screen loads none of them."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from qkv_tui.core.scenario import Scenario
from qkv_tui.display.side_view import SideView


def _later(module: str, name: str) -> Callable[..., Any]:
    """A side view's behaviour, ``name`` in display/<module>.py, that module imported on the first call."""

    def call(*args: Any) -> Any:
        return getattr(importlib.import_module(f"qkv_tui.display.{module}"), name)(*args)

    call.__qualname__ = call.__name__ = f"{module}.{name}"
    return call


def _has_backward(sc: Scenario) -> bool:
    """Where the Train view has something to show: its help row, palette entry and closing line appear only there."""
    return sc.backward is not None


CACHE = SideView(  # k: prefill and decode over a paged KV cache (display/decode_view.py)
    name="cache", key="k", label="cache",
    title="KV-cache decode view", summary="generation replayed token by token", closing="the KV cache",
    help=(("k", "KV cache: prefill, then decode a token at a time over a paged cache (→ ← step; k again leaves)"),
          ("c", "in the cache view: prefill at once → chunked prefill → token by token")),
    steps=_later("refused_view", "cache_steps"),  # a part may refuse it (core/part_questions.py)
    frame=_later("refused_view", "cache_frame"),
    # the default schedule goes unnamed: i_love_ai-cache-step03.svg, i_love_ai-cache-chunked-step03.svg
    asks="weights[",  # the step's softmax, from the scores the line before works out
    shot=lambda modes: "cache" if modes.schedule == "prefill" else f"cache-{modes.schedule}",
    option=_later("decode_view", "_next_schedule"),
    empty=_later("refused_view", "cache_empty"),
)
TILES = SideView(  # t: FlashAttention's online softmax (display/tiled_view.py)
    name="tiles", key="t", label="tiles",
    title="FlashAttention tiles view", summary="the online softmax, one tile of keys at a time",
    closing="FlashAttention's tiles",
    help=(("t", "tiles: FlashAttention's online softmax, one tile of keys at a time (→ ← step; t again leaves)"),),
    steps=_later("refused_view", "tiles_steps"),  # the same for every head; a part may refuse it
    frame=_later("refused_view", "tiles_frame"),
    shot=lambda modes: "tiles",
    empty=_later("refused_view", "tiles_empty"),
)
TRAIN = SideView(  # l: SGD steps on [backward] (display/train_view.py)
    name="train", key="l", label="train",
    title="Train view", summary="SGD steps on the [backward] loss: the loss falling, the weights and the map moving",
    closing="the Train view (SGD steps)",
    help=(("l", "train: one SGD step per → (← back): the loss, the weights each step moved, the attention map"
                " beside step 0's (l again leaves; only with [backward])"),),
    steps=_later("train_view", "_steps"),
    frame=_later("train_view", "_frame"),
    shot=lambda modes: "train",
    applies=_has_backward,
    act=_later("train_view", "_act"),
)
HEADS = SideView(  # v: every head's attention map side by side (display/heads_view.py)
    name="heads", key="v", label="heads",
    title="Heads view", summary="every head's attention map side by side; enter steps through one",
    closing="",  # not named in the last operation's "Next:" line, which the golden corpus keeps as it was
    help=(("v", "heads: every head's attention map side by side (a model: every head of the layer; v again leaves)"),
          ("← → ↑ ↓ / enter", "in the heads view: pick a head / step through it in the trace"),
          ("[ ]", "in the heads view of a model: the layer before / after (each layer's input computed once)")),
    steps=_later("heads_view", "_steps"),
    frame=_later("heads_view", "_frame"),
    shot=_later("heads_view", "_shot"),
    act=_later("heads_view", "_act"),
    opening=_later("heads_view", "_opening"),
    enter=_later("heads_view", "_enter"),
    per_head=False,
    quiz=False,  # its lines name where each row looks; they work out no number to predict
    in_footer=False,  # the footer's keys are full at 120 columns; v is in the help, the palette and docs/reference.md
)
COST = SideView(  # c: FLOPs, bytes, the KV cache and a roofline (display/cost_view.py)
    name="cost", key="c", label="cost",
    title="Cost view", summary="FLOPs and bytes per stage, the KV cache, FlashAttention's traffic and a roofline",
    closing="",  # not named in the last operation's "Next:" line, which the golden corpus keeps as it was
    help=(("c", "cost: each stage's FLOPs and bytes (prefill, one decode step), the KV cache, FlashAttention's"
                " traffic, MLA's two forms and a roofline, each figure with its formula (→ ← page; c again leaves;"
                " in the cache view c is its own)"),),
    steps=_later("cost_view", "_steps"),
    frame=_later("cost_view", "_frame"),
    shot=lambda modes: "cost",
    per_head=False,  # its pages count every head at once
    quiz=False,  # its figures are counts, not a cell to predict
    in_footer=False,  # the footer's keys are full at 120 columns; c is in the help, the palette and the README
)

SIDE_VIEWS: tuple[SideView, ...] = (CACHE, TILES, TRAIN, HEADS, COST)
BY_NAME = {view.name: view for view in SIDE_VIEWS}


def shown_for(view: SideView, sc: Scenario) -> bool:
    """Whether the help, the palette and the closing summary name the view for this scenario."""
    return view.applies is None or view.applies(sc)


def side_view(name: str) -> SideView | None:
    """The side view of that name (Modes.view); None for the trace."""
    return BY_NAME.get(name)
