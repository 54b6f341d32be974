"""A head's result: what every head has, and one record per part its variants add (core/forward.py makes it)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import field, replace
from types import MappingProxyType
from typing import TypeVar, cast

from qkv_tui.base.fixed import fixed
from qkv_tui.core.scenario import Matrix
from qkv_tui.core.variants import Vector

P = TypeVar("P")
T = TypeVar("T")
Parts = Mapping[type, object]


def parts_of(records: tuple[object, ...]) -> Parts:
    """The read-only mapping of a head's part records, keyed by each record's type, in the order they ran."""
    return MappingProxyType({type(r): r for r in records})


NO_PARTS: Parts = parts_of(())


@fixed(repr=True)
class HeadResult:
    """One head's computation; every array is read-only. A variant's own numbers are its part's record
    (``part(Rotated)``, ``part(Gated)``, ...), None where the head has no such part."""

    name: str
    d_k: int
    d_v: int
    scale: float  # the divisor used
    scale_is_default: bool  # True when scale = sqrt(d_k) (shown as √d_k)
    W_Q: Matrix  # (d_model, d_k)
    W_K: Matrix  # (d_in, d_k)
    W_V: Matrix  # (d_in, d_v)
    Q: Matrix  # (n, d_k) X W_Q + b_Q, before any part turns it
    K: Matrix  # (m, d_k)
    V: Matrix  # (m, d_v)
    scores: Matrix  # (n, m) Q_used K_usedᵀ
    scaled: Matrix  # (n, m) scores / scale, without the bias
    masked: Matrix  # (n, m) scaled (capped) + bias, -inf where the mask forbids: the softmax's input
    row_max: Matrix  # (n,) subtracted before exp: the row's max, or the sink where it is larger
    exps: Matrix  # (n, m) e^(masked - row_max); exactly 0 where masked
    row_sum: Matrix  # (n,) Σ exps, plus the sink's exponential where there is one
    weights: Matrix  # (n, m) the map that multiplies V: rows sum to 1, less with a sink (part_questions.row_total)
    output: Matrix  # (n, d_v)
    kv_head: int = 0  # the K/V head whose K and V this head reads
    b_Q: Vector | None = None  # (d_k,)
    b_K: Vector | None = None  # (d_k,)
    b_V: Vector | None = None  # (d_v,)
    parts: Parts = field(default_factory=lambda: NO_PARTS)  # each part's record, keyed by its type, in the order they ran

    def part(self, kind: type[P]) -> P | None:
        """This head's record of the part ``kind``; None where the head has no such part."""
        return cast("P | None", self.parts.get(kind))

    def read(self, kind: type[P], get: Callable[[P], T]) -> T | None:
        """``get`` of this head's record of the part ``kind``; None where the head has no such part."""
        found = self.part(kind)
        return None if found is None else get(found)

    def need(self, kind: type[P]) -> P:
        """This head's record of the part ``kind``, where the caller knows the head has it."""
        found = self.parts.get(kind)
        if found is None:
            raise LookupError(f"{self.name} has no {kind.__name__}")
        return cast(P, found)

    def with_parts(self, *records: object, **fields: object) -> HeadResult:
        """This head with ``records`` in the place of its records of the same types, and ``fields`` replaced."""
        return replace(self, parts=parts_of(tuple(self.parts.values()) + records), **fields)  # type: ignore[arg-type]

    def before(self, side: str, kind: type | None = None) -> Matrix:
        """Q or K (``side``) as the parts leave them, up to the part whose record is of ``kind`` (what RoPE turns:
        ``before("Q", Rotated)``, normalised where the head has QK-norm): each part that turns them says so by
        ``Q_after``/``K_after``."""
        out: Matrix = self.Q if side == "Q" else self.K
        for record_kind, record in self.parts.items():
            if record_kind is kind:
                break
            turned = getattr(record, side + "_after", None)
            if turned is not None:
                out = turned
        return out

    @property
    def Q_used(self) -> Matrix:
        """The Queries that are scored: as every part left them (normalised, rotated where the scenario says so)."""
        return self.before("Q")

    @property
    def K_used(self) -> Matrix:
        return self.before("K")

    @property
    def joined(self) -> Matrix:
        """What Concat joins: the last part's that replaces the output (the gate's, the output norm's), else the output."""
        for record in reversed(tuple(self.parts.values())):
            joined = getattr(record, "joined", None)
            if joined is not None:
                return cast(Matrix, joined)
        return self.output
