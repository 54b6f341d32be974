"""What the views ask the parts about the mask (contracts §15): a part that chooses which keys a head attends
(DeepSeek's indexer) narrows the scenario's mask, and says why a key it left out is masked.

A part's spec says so by a ``mask`` of its own (the driver, core/forward.py, ANDs it into the head's mask and
keeps the spec's ``record``); the record then answers ``mask``, ``mask_reason(row, col, query, key)`` and
``mask_note`` (a sentence for the stage that applies the mask) and ``masked_as`` (what else a masked cell is, for
a view that marks masked cells without saying why: "not selected by the indexer"; None where it masks no key the
scenario's mask lets through). No view tests for a variant by name.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from qkv_tui.core.arrays import BoolMatrix
from qkv_tui.core.head import HeadResult


def narrowed(allow: BoolMatrix, parts: Sequence[Any]) -> tuple[BoolMatrix, tuple[object, ...]]:
    """The mask a head attends with: ``allow`` narrowed by each part spec with a ``mask`` of its own; and those
    parts' records, for the head's result."""
    records: list[object] = []
    for part in parts:
        mask = getattr(part, "mask", None)
        if mask is not None:
            allow = allow & mask
            records.append(part.record)
    return allow, tuple(records)


def attended(heads: Iterable[HeadResult], allow: BoolMatrix) -> BoolMatrix:
    """The keys the heads' maps attend: ``allow`` narrowed by every record with a ``mask`` (one selection is
    shared by every head of the layer, so the first head's records say it)."""
    for hr in heads:
        for record in hr.parts.values():
            mask = getattr(record, "mask", None)
            if mask is not None:
                allow = allow & mask
        break
    return allow


def mask_reason(heads: Sequence[HeadResult], row: int, col: int, query: str, key: str) -> str | None:
    """Why a part masks a key the scenario's mask lets through; None where no part does."""
    for hr in heads[:1]:
        for record in hr.parts.values():
            why = getattr(record, "mask_reason", None)
            said = None if why is None else why(row, col, query, key)
            if said is not None:
                return str(said)
    return None


def mask_note(heads: Sequence[HeadResult]) -> str:
    """A part's sentence about the keys it masks, for the stage that applies the mask; "" where no part masks any."""
    for hr in heads[:1]:
        for record in hr.parts.values():
            note = getattr(record, "mask_note", None)
            if note is not None:
                return str(note)
    return ""


def masked_as(heads: Sequence[HeadResult]) -> str | None:
    """What else a masked cell of the heads' maps is, where a part masks keys the scenario's mask lets through
    ("not selected by the indexer"): a view that marks masked cells says it beside its mark; None where no part
    masks any."""
    for hr in heads[:1]:
        for record in hr.parts.values():
            said = getattr(record, "masked_as", None)
            if said is not None:
                return str(said)
    return None


def masked_legend(heads: Sequence[HeadResult], masked: str = "masked") -> str:
    """``masked`` as a view's legend writes it: "masked, or not selected by the indexer" where a part masks keys
    of its own."""
    also = masked_as(heads)
    return masked if also is None else f"{masked}, or {also}"
