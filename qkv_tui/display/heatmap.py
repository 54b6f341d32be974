"""The attention pattern of one head at a glance: its weights as shaded cells, token labels on both axes.

Plain data (no Textual): one row per query token, one two-column cell per key token, the key
labels written downwards above their columns. Only the weights computed so far are shown, as in
the panes, so the map never gives away an answer the learner has not reached.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from qkv_tui.core.fmt import cell_len
from qkv_tui.core.part_masks import masked_legend
from qkv_tui.teach.trace import Trace

# upper bounds of each shade; a weight above the last is drawn solid
SHADES = ((0.02, "  "), (0.1, "░░"), (0.3, "▒▒"), (0.6, "▓▓"), (1.01, "██"))
MASKED, PENDING = "· ", "  "
LABEL_ROWS = 6  # characters of a key label written downwards; longer labels are cut with "…"


@dataclass(frozen=True)
class MapCell:
    text: str  # two columns
    level: int  # 0 … 4 (shade), -1 masked, -2 not computed yet
    strongest: bool  # the row's largest weight


@dataclass(frozen=True)
class AttentionMap:
    title: str
    row_labels: tuple[str, ...]  # "3 ▁on": the query's index and token, padded to one width
    header: tuple[str, ...]  # the key labels downwards: line k holds character k of every label
    rows: tuple[tuple[MapCell, ...], ...]
    legend: str
    note: str  # how much is computed


def shade(weight: float) -> tuple[int, str]:
    for level, (bound, text) in enumerate(SHADES):
        if weight < bound:
            return level, text
    return len(SHADES) - 1, SHADES[-1][1]


def _downwards(label: str) -> list[str]:
    chars = [c if cell_len(c) == 1 else "?" for c in label] or [" "]
    if len(chars) > LABEL_ROWS:
        chars = [*chars[: LABEL_ROWS - 1], "…"]
    return chars


def attention_map(trace: Trace, head: int, index: int) -> AttentionMap:
    """The map of ``head`` at operation ``index`` of the trace."""
    comp = trace.comp
    sc = comp.scenario
    result = comp.heads[head]
    n, m = result.weights.shape
    filled = trace.filled("weights", head, index)
    allow = comp.allow  # the keys the map attends: a part's own mask (the indexer's selection) marks its keys too
    width = max(cell_len(f"{i} {t}") for i, t in enumerate(sc.labels))
    row_labels = tuple(f"{i} {t}" + " " * (width - cell_len(f"{i} {t}")) for i, t in enumerate(sc.labels))
    columns = [_downwards(t) for t in sc.key_labels]
    depth = max(len(c) for c in columns)
    header = tuple("".join((c[k] if k < len(c) else " ") + " " for c in columns) for k in range(depth))
    rows = []
    for i in range(n):
        complete = (i + 1) * m <= filled
        top = int(result.weights[i].argmax())
        cells = []
        for j in range(m):
            if i * m + j >= filled:
                cells.append(MapCell(PENDING, -2, False))
            elif not allow[i, j]:
                cells.append(MapCell(MASKED, -1, False))
            else:
                level, text = shade(float(result.weights[i, j]))
                cells.append(MapCell(text, level, complete and j == top))
        rows.append(tuple(cells))
    done = min(filled // m, n)
    note = "every row computed" if done == n else f"{done} of {n} rows computed so far (end computes everything)"
    middle = "  ".join(f"{text} {low:g}–{high:g}" for (low, _), (high, text) in itertools.pairwise(SHADES[:-1]))
    # two short lines, not one long one: the map's box at 80 columns holds 72
    legend = (f"weight: blank <{SHADES[0][0]:g}  {middle}  {SHADES[-1][1]} ≥{SHADES[-2][0]:g}\n"
              f"{MASKED.strip()} {masked_legend(comp.heads)} (weight exactly 0)")
    title = f"weights = softmax(scaled) · {result.name} · {n}×{m}"
    return AttentionMap(title, row_labels, header, tuple(rows), legend, note)
