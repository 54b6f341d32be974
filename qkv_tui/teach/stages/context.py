"""What a stage reads from the trace it belongs to, as a protocol.

The stage modules are imported by the registry that ``teach/trace.py`` walks, so they cannot import
the Trace class itself without an import circle; they name this protocol instead, and ``Trace``
satisfies it (mypy checks that where the trace hands itself to a stage).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from qkv_tui.core.arrays import Matrix
from qkv_tui.core.engine import Computation

T = TypeVar("T")


class TraceContext(Protocol):
    comp: Computation
    kv_owner: list[int]  # query head -> the first query head that reads its K/V head
    kv_readers: dict[int, list[int]]  # that first head -> every query head reading the same K and V

    @property
    def hand(self) -> int | None: ...

    def filled(self, target: str, head: int | None, index: int) -> int: ...

    def memo(self, key: str, make: Callable[[], T]) -> T: ...

    def is_wide(self, role: str) -> bool: ...

    def wide(self, name: str) -> Matrix: ...

    def wide_offset(self, role: str, head: int) -> int: ...

    def integral(self, name: str, head: int | None) -> bool: ...

    def row_label(self, name: str, row: int) -> str: ...

    def slice_label(self, role: str, col: int) -> str: ...

    def formatted(self, name: str, head: int | None, value: float, decimals: int) -> str: ...
