"""What a stage's section of the Markdown export is written with, as a protocol.

The page itself (its tables' layout, which operations it works) lives in ``edges/export_markdown.py``,
above the stages; a stage's ``markdown`` method says what its section holds through this.
"""

from __future__ import annotations

from typing import Protocol

from qkv_tui.core.arrays import Matrix
from qkv_tui.teach.stages.context import TraceContext


class MarkdownPage(Protocol):
    @property
    def trace(self) -> TraceContext: ...

    @property
    def decimals(self) -> int: ...

    def table(self, name: str, head: int | None, corner: str | None = None) -> str:
        """One of the trace's matrices as a table, its rows and columns labelled (the corner: its name)."""
        ...

    def array(self, array: Matrix, rows: list[str], cols: list[str], corner: str, integral: bool) -> str:
        """Any matrix as a table (a panel that is no matrix of the trace)."""
        ...

    def worked(self, stage: str, head: int | None) -> list[str]:
        """The worked lines of a stage's operations for one head (or its only run), then a blank line."""
        ...
