"""Attention sinks ([sinks], gpt-oss): a head's logit that joins each row's sum as a column with no Value. A part of
a head's pass (SinkSpec) that hands the softmax its logit beside the map (kernels/softmax.py's ``beside``), and its
record (Sunk)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

from qkv_tui.kernels.attention import Attended, HeadPass, PartSpec
from qkv_tui.kernels.softmax import Index
from qkv_tui.kernels.stats import Matrix


@dataclass(frozen=True, eq=False)
class Sunk:
    """An attention sink's record of one head ([sinks]): a column beside the map, a logit with no Value that
    joins each row's sum (core/part_questions.py asks it as such)."""

    sink: float  # the sink's logit
    sink_exp: Matrix  # (n,) e^(sink − row_max), the part of each row sum the sink takes

    # what the views say of the column, at the places they ask (core/part_questions.said)
    words: ClassVar[Mapping[str, str]] = MappingProxyType({
        "tiles.start": "    the sink joins as a column with no Value: m starts at its logit {part.sink:g},"
                       " ℓ at e^({part.sink:g} − {part.sink:g}) = 1, Õ at 0",
        "tiles.back.dS": "the sink's column has no Value, so its dP is 0 and its dS = P_sink·(0 − D): its share"
                         " leaves the row's keys, as in the Backward stages",
        "cache.softmax": "softmax({kept} with the sink {part.sink:g}, then dropped)",
        "summary.rows": "every weight row plus its sink's share sums to 1",
    })

    @property
    def beside(self) -> float:
        """The logit of the column beside the map."""
        return self.sink

    def beside_share(self, row_sum: Matrix) -> Matrix:
        """(n,) the share of each row the column takes: its exponential over the row's sum."""
        out: Matrix = self.sink_exp / row_sum
        return out

    def softmax_options(self, rows: Index, cols: Index) -> dict[str, object]:
        return {"beside": self.sink}


@dataclass(frozen=True, eq=False)
class SinkSpec(PartSpec):
    """An attention sink as a part: a logit that joins each row's sum."""

    sink: float

    def before_score(self, p: HeadPass) -> None:
        p.beside = self.sink

    def after_mix(self, p: HeadPass, attended: Attended) -> None:
        assert attended.softmax.beside_exp is not None
        p.records.append(Sunk(self.sink, attended.softmax.beside_exp))
