"""The sliding window: ``window`` in a ``kind = "sliding"`` ``[mask]`` (docs/scenario-format.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from qkv_tui.base.values import kind as _kind
from qkv_tui.base.values import show as _show
from qkv_tui.core.variants.common import MAX_INDEX, Checker, Features, Keys, write_whole

if TYPE_CHECKING:
    import numpy.typing as npt

MASK_KEY = "window"


def parse_window(v: Checker, table: dict[str, Any], is_cross: bool, short: bool = False) -> int:
    """The sliding window of a ``kind = "sliding"`` mask (``short``: written as the string ``mask = "sliding"``)."""
    if is_cross:
        raise v.fail("mask kind 'sliding' needs self-attention (a window over the same tokens); remove [context] or the mask")
    if "window" not in table:
        need = "window = W (a whole number >= 1: each token sees itself and the W−1 before it)"
        raise v.fail(table_form("sliding", "window", need) if short else f"mask kind 'sliding' needs {need}")
    window = table["window"]
    if isinstance(window, bool) or not isinstance(window, int):
        raise v.fail(f"[mask] window is {_kind(window)}; expected a whole number >= 1 (itself and the window−1 tokens before it)"
                     f"{write_whole(window, 1)}")
    if window < 1:
        raise v.fail(f"[mask] window is {_show(window)}, too small; expected a whole number >= 1 (each token sees itself"
                     " and the window−1 tokens before it)")
    if window > MAX_INDEX:
        raise v.fail(f"[mask] window is {_show(window)}, too large; expected a whole number from 1 to 2^53"
                     " (a window as long as the text is already the causal mask)")
    return window


def sliding_allow(n: int, window: int) -> npt.NDArray[np.bool_]:
    """Query i may attend key j when 0 ≤ i − j < window (token indices, not rope positions)."""
    i = np.arange(n)[:, None]
    j = np.arange(n)[None, :]
    allow: npt.NDArray[np.bool_] = (i - j >= 0) & (i - j < window)  # (n, n)
    return allow


def summary_parts(sc: Features) -> list[str]:
    return [] if sc.window is None else [f"window {sc.window}"]


KEYS = Keys(summary_parts)


def table_form(kind: str, key: str, need: str) -> str:
    """The message for ``mask = "<kind>"`` written as a string where the kind needs a key beside it: a
    string has no room for one, so the person is shown the table form the format gives for it."""
    return (f'mask = "{kind}" needs {key}, which the string form cannot hold; write a [mask] table in its place,'
            f' with kind = "{kind}" and {need}')
