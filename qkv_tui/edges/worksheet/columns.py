"""``--heads`` on a table of the whole layer whose columns are the heads' side by side: only the asked heads' columns.

Concat (and, without W_O, the target and dO, which are concat's shape) holds every head's columns in head order; a
sheet of head 1 printed the tilted head's four columns of each too, and asked blanks in them that no question of head
1 reads. Such a table keeps its column labels (dO's 4 … 7 for head 2, as the key's lines name them) and prints the
asked heads' columns only; its blanks and the tables it reads are those of those columns (edges/worksheet/make.py).
So are a latent layer's weights, every head's columns side by side ([mla]'s W_Q, W_UK, W_UV, their gradients and
their SGD steps).
"""

from __future__ import annotations

from collections.abc import Sequence

from qkv_tui.core.engine import Computation
from qkv_tui.edges.faces import faces
from qkv_tui.teach.stages.printed import Table


def head_spans(comp: Computation, tables: Sequence[Table]) -> dict[str, list[range]]:
    """For each table of no head whose columns are every head's output side by side, each head's columns."""
    widths = [hr.output.shape[1] for hr in comp.heads]
    spans, start = [], 0
    for width in widths:
        spans.append(range(start, start + width))
        start += width
    kinds = {"concat", "dConcat"} | ({"target", "dO"} if comp.scenario.W_O is None else set())
    out = {t.key: spans for t in tables if t.key in kinds and t.head is None and t.values.shape[1] == start}
    # a layer's weights, each head's columns side by side (edges/faces/: sheet_head_columns; [mla]'s W_Q, W_UK, W_UV)
    each = {key: width for f in faces() if f.sheet_head_columns is not None
            for key, width in f.sheet_head_columns(comp.scenario).items()}
    out.update({t.key: [range(h * each[t.key], (h + 1) * each[t.key]) for h in range(len(widths))] for t in tables
                if t.key in each and t.head is None and t.values.shape[1] == each[t.key] * len(widths)})
    return out


def asked_columns(comp: Computation, tables: Sequence[Table], heads: Sequence[int] | None) -> dict[str, tuple[int, ...]]:
    """The columns a --heads sheet prints of each such table (every table not named: all of its columns)."""
    if heads is None or len(comp.heads) < 2:
        return {}
    return {key: tuple(j for h in sorted(heads) for j in spans[h]) for key, spans in head_spans(comp, tables).items()}
