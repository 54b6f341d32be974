"""[indexer] as one part of the layer (contracts §15): the lightning indexer runs once per layer, and its selection
narrows the mask of every head alike (DeepSeek Sparse Attention: one selection shared by all heads of a layer).

The spec carries no hook of the head pass: the driver (core/forward.py) asks each part for a ``mask`` of its own
and gives every head the scenario's mask narrowed by it, so the scores of keys not selected are −∞ and their
weights exactly 0, in the plain heads and in [mla]'s alike. Its record, :class:`Selection`, is then on every
head's result (``hr.part(Selection)``); the views that cannot show the selection refuse in one line (``refuses``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

from qkv_tui.core import part_questions as ask
from qkv_tui.core.arrays import BoolMatrix, Matrix
from qkv_tui.core.turns_columns import turner
from qkv_tui.core.variants.indexer import TABLE, Indexer, run
from qkv_tui.kernels.attention import PartSpec
from qkv_tui.kernels.indexer import Indexed


@dataclass(frozen=True, eq=False)
class Selection:
    """The layer's index and selection (the kernel's Indexed), as a head's part record."""

    indexed: Indexed
    table: Indexer
    # what the heads view says its map holds (core/part_questions.py map_formula)
    map_formula: ClassVar[tuple[tuple[str, bool], ...]] = (("softmax(Q·Kᵀ/√dₖ) on each query's top_k keys", True),
                                                          ("·V", False))
    refuses: ClassVar[Mapping[str, str]] = MappingProxyType({
        "tiles": "No tiles for sparse attention: the tiles view walks every visible key, and the indexer keeps"
                 " only each query's top-k; the stages show the selected map cell by cell.",
        "cache": "No KV-cache replay for sparse attention yet: decoding would run the indexer over the cache at"
                 " every step; the Index and Select stages show each query's choice.",
        "worksheet": "a worksheet of [indexer] is not written yet (its index scores and the selection have no"
                     " printed tables); use --export markdown for every step",
    })

    @property
    def mask(self) -> BoolMatrix:
        """The keys every head attends: the selected ones (a subset of the scenario's mask)."""
        return self.indexed.selected

    def overflow(self, stage: str, at: Any) -> tuple[str, str, str] | None:
        """The index's numbers past float64 (core/part_questions.py): kernels/indexer.py names them."""
        return self.indexed.overflow(stage, at)

    @property
    def mask_note(self) -> str:
        ix = self.indexed
        if ix.covers_all:
            return (f" The indexer's top_k = {ix.top_k} covers every key each query may see, so it masks nothing more:"
                    " this is full attention.")
        return (f" The indexer's selection applies here too: each query keeps its top_k = {ix.top_k} keys (stage"
                " Select), and a key it left out becomes −∞ like a masked one, so it gets weight 0.")

    @property
    def masked_as(self) -> str | None:
        """What else a masked cell is (core/part_masks.py): a key the indexer left out; None where it kept every
        visible key."""
        ix = self.indexed
        return "not selected by the indexer" if ix.dropped.any() else None

    def rank(self, row: int, col: int) -> tuple[int, int]:
        """(where key ``col`` ranks among row ``row``'s visible keys, 1 the highest, ties to the earlier key;
        how many keys are visible)."""
        ix = self.indexed
        visible = np.flatnonzero(ix.allow[row])
        s = ix.scores[row]
        ahead = sum(1 for j in visible if s[j] > s[col] or (s[j] == s[col] and j < col))
        return ahead + 1, len(visible)

    def mask_reason(self, row: int, col: int, query: str, key: str) -> str | None:
        """Why a key the scenario's mask lets through is masked: the indexer did not select it."""
        ix = self.indexed
        if not ix.allow[row, col] or ix.selected[row, col]:
            return None
        place, visible = self.rank(row, col)
        return (f'indexer: "{key}" ranks {place} of the {visible} keys "{query}" may see, below top_k ='
                f" {ix.top_k}: not selected, so masked; weight will be exactly 0")


@dataclass(frozen=True, eq=False)
class SelectSpec(PartSpec):
    """Every head's share of the indexer: the selection, which the driver ANDs into the head's mask."""

    record: Selection

    @property
    def mask(self) -> BoolMatrix:
        return self.record.mask


def query_latent(run_: Any) -> Matrix:
    """The query latent W_q reads ([mla]'s c_Q), as the table that gives one (its query_latent_width) computes it
    under the run's policy."""
    giver: Any = next(t for t in ask.tables(run_.sc) if getattr(t, "query_latent_width", None) is not None)
    c_Q: Matrix = giver.query_latent(run_.X_in, run_.policy)
    return c_Q


def indexer_part(run_: Any) -> Callable[[int], SelectSpec] | None:
    """One selection for the layer, the same spec for every head (``run_`` is core/head_parts.py's Run).

    By hand the index is worked under the hand policy and the selection made from the scores as written down,
    as a person choosing from the page would."""
    sc = run_.sc
    ix = TABLE.of(sc)
    if ix is None:
        return None
    # the index vectors turn as the table that turns the heads' Q and K by position would turn them (a table that
    # builds the heads keeps its own: core/turns_columns.py)
    with run_.quiet():
        c_Q = query_latent(run_) if ix.from_latent else None
        indexed = run(ix, run_.X_in, sc.allow, turner(sc), c_Q, run_.policy)
    spec = SelectSpec(Selection(indexed, ix))
    return lambda h: spec
