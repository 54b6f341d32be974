"""Every head's attention map side by side, as plain data (the heads view, display/heads_view.py).

``HeadsGrid`` holds each head's weights and a one-line reading; ``lay_out`` fits the maps into the room a
screen gives them. A map shows every weight while the room allows: two columns a key with the query's
label (and, where a line is left for them, the keys' labels along the top, cut to the key's columns),
then one column a key, then bins of tokens, each cell the largest weight of its bin (so a peak
is never averaged away); where not every head fits even so, rows of maps scroll to keep the picked one
in view. What was dropped is said in ``Layout.note``. The layouts are kept per size: an arrow key only
moves the highlight.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from qkv_tui.core.fmt import cell_len
from qkv_tui.core.scenario import BoolMatrix, Matrix

GLYPHS = " ░▒▓█"  # one column per key: the map's shades (display/heatmap.py), one character each
MASKED = "·"
NEGATIVE, MINUS = -2, "−"  # the level and mark of a weight below 0 (a map that is no distribution)
LABEL_MAX = 6  # a query's label beside a full map, cut to this many columns
GAP = 2  # columns between two maps
MIN_ROWS = 1  # a map keeps at least one row of cells; below that its row of maps scrolls


@dataclass(frozen=True, eq=False)
class HeadMap:
    name: str  # "head 1", "L1 H0"
    weights: Matrix  # (n, m)
    pairs: str  # "I→love love→I AI→love": each query's strongest key
    pattern: str  # the same in fewer words, for a narrow map: "→ previous token 17/19" (rows peaking there)

    def reading(self, width: int) -> str:
        """The line under the map: its pairs where they fit in ``width``, else its pattern (cut with … if need be)."""
        text = self.pairs if cell_len(self.pairs) <= width else self.pattern
        if cell_len(text) > width:  # "→ previous token 10/20" -> "→prev 10/20", then "→prev" (the count left out)
            short = "→" + (self.pattern.removeprefix("→ ").replace("previous token", "prev").replace(" token", "")
                           .replace(" most often", ""))
            text = short if cell_len(short) <= width else short.split(" ")[0]
        return text if cell_len(text) <= width else text[: max(width - 1, 0)] + "…"


@dataclass(frozen=True)
class MapCells:
    """One map at one size: ``levels[r][c]`` is 0 … 4 (shade), -1 masked, NEGATIVE below 0; ``strongest`` marks
    each full row's largest."""

    levels: tuple[tuple[int, ...], ...]
    strongest: tuple[int | None, ...]  # the column of each row's largest weight, at full size only


@dataclass(frozen=True)
class Layout:
    per_row: int  # maps across
    rows: int  # cell rows of each map
    cols: int  # cell columns of each map
    cell: int  # characters a cell: 2 or 1
    label: int  # characters of the query labels at the left of each map (0: none)
    map_width: int  # characters of one map, labels included
    slot: int  # characters each map's column of the grid has (its title and reading use them all)
    visible: range  # the rows of maps in view (all of them unless they scroll)
    note: str  # what the maps leave out at this size ("" when every weight shows)
    keys: bool = False  # a line of the keys' labels above the cells (only where every key has its column)

    @property
    def lines(self) -> int:
        """Lines the maps in view take: a title, the keys' labels, the cells, a reading and a blank line a row of maps."""
        return len(self.visible) * (self.rows + 3 + self.keys)


@dataclass(eq=False)  # hashed by identity: the widget keeps what it drew of each grid (ui/widgets/heads.py)
class HeadsGrid:
    maps: tuple[HeadMap, ...]
    allow: BoolMatrix  # (n, m)
    labels: tuple[str, ...]  # the queries'
    keys: tuple[str, ...]
    masked: str = "masked"  # what the masked mark stands for, as the legend says it (core/part_masks.py masked_legend)
    _cells: dict[tuple[int, int, int], MapCells] = field(default_factory=dict)  # (head, rows, cols) -> cells
    _layouts: dict[tuple[int, int], Layout] = field(default_factory=dict)  # (width, height) -> layout
    _readings: dict[tuple[int, int], str] = field(default_factory=dict)  # (head, width) -> its line

    @property
    def n(self) -> int:
        return int(self.allow.shape[0])

    @property
    def m(self) -> int:
        return int(self.allow.shape[1])

    def layout(self, width: int, height: int, picked: int) -> Layout:
        """The layout for ``width`` × ``height`` characters, scrolled so that map ``picked`` shows."""
        key = (width, height)
        if key not in self._layouts:
            self._layouts[key] = lay_out(len(self.maps), self.n, self.m, self.labels, width, height)
        base = self._layouts[key]
        total = math.ceil(len(self.maps) / base.per_row)
        shown = len(base.visible)
        if shown >= total:
            return base
        row = picked // base.per_row
        start = min(max(row - shown // 2, 0), total - shown)
        return Layout(**{**base.__dict__, "visible": range(start, start + shown)})

    def reading(self, head: int, width: int) -> str:
        """Head ``head``'s line under its map, ``width`` characters at most (HeadMap.reading), worked out once."""
        key = (head, width)
        if key not in self._readings:
            self._readings[key] = self.maps[head].reading(width)
        return self._readings[key]

    def cells(self, head: int, rows: int, cols: int) -> MapCells:
        """Head ``head``'s map binned to rows × cols (each bin its largest weight; masked where every cell is)."""
        key = (head, rows, cols)
        if key not in self._cells:
            self._cells[key] = _binned(self.maps[head].weights, self.allow, rows, cols)
        return self._cells[key]


@dataclass(frozen=True)
class HeadsShown:
    """The maps on one screen of the heads view: the grid, and the head picked (highlighted)."""

    grid: HeadsGrid
    picked: int


def level_of(weights: Matrix) -> np.ndarray:
    """The shade level (0 … 4) of each weight, as the attention map (m) draws them."""
    from qkv_tui.display.heatmap import SHADES  # the map's module loads with its first use, not at start-up

    bounds = np.array([bound for bound, _ in SHADES[:-1]])
    return np.searchsorted(bounds, weights, side="right")


def _edges(size: int, bins: int) -> np.ndarray:
    return np.linspace(0, size, bins + 1).round().astype(int)[:-1]  # (bins,) the first index of each bin


def _binned(weights: Matrix, allow: BoolMatrix, rows: int, cols: int) -> MapCells:
    n, m = weights.shape
    shown = np.where(allow, weights, -np.inf)  # (n, m) masked cells below every weight, a negative one too
    if (rows, cols) != (n, m):
        shown = np.maximum.reduceat(np.maximum.reduceat(shown, _edges(n, rows), axis=0), _edges(m, cols), axis=1)
    # a map that is no distribution (differential attention's) has negative cells: they keep their sign
    levels = np.where(shown == -np.inf, -1, np.where(shown < 0, NEGATIVE, level_of(np.maximum(shown, 0.0))))
    strongest: tuple[int | None, ...] = (None,) * rows
    if (rows, cols) == (n, m):
        strongest = tuple(int(j) if allow[i].any() else None for i, j in enumerate(shown.argmax(axis=1)))
    return MapCells(tuple(tuple(int(v) for v in row) for row in levels), strongest)


def lay_out(heads: int, n: int, m: int, labels: tuple[str, ...], width: int, height: int) -> Layout:
    """The best fit of ``heads`` maps of n×m weights: each map a title line, its cells and a reading line.

    The fit shows every head when it can, then as much of each map as possible (the smaller of the shares
    of rows and of columns kept), the keys' labels where a line is left for them, two columns a key where
    that costs nothing.
    """
    label = min(max((cell_len(t) for t in labels), default=1), LABEL_MAX) + 1
    best_score: tuple[bool, float, bool, float, int, int] | None = None
    best: Layout | None = None
    for per_row, keyed in itertools.product(range(1, heads + 1), (True, False)):
        map_rows = math.ceil(heads / per_row)
        room = (width - GAP * (per_row - 1)) // per_row  # characters of one map
        margin = 3 + keyed  # a title (the keys' labels), a reading and a blank line under each row of maps
        lines = height // map_rows - margin
        visible = map_rows
        if lines < MIN_ROWS:  # the rows of maps scroll: as many as hold at least MIN_ROWS rows of cells
            visible = max(height // (MIN_ROWS + margin), 1)
            lines = height // visible - margin
        rows = max(min(n, lines), 1)
        for cell in (2, 1):
            labelled = label if rows == n and room - label >= cell * m else 0
            cols = min(m, (room - labelled) // cell)
            if cols < 1 or (keyed and cols < m):  # a bin of keys has no one label
                continue
            share = min(rows / n, cols / m)
            balance = share / max(rows / n, cols / m)  # between two fits of the same share, the squarer maps
            # then the keys named, side by side, not stacked
            score = (visible == map_rows, share, keyed, balance, cell, -map_rows)
            layout = Layout(per_row, rows, cols, cell, labelled, labelled + cols * cell, room, range(visible), "",
                            keyed)
            if best_score is None or score > best_score:
                best_score, best = score, layout
    assert best is not None
    layout = best
    return Layout(**{**layout.__dict__, "note": _note(layout, heads, n, m)})


def _note(layout: Layout, heads: int, n: int, m: int) -> str:
    said = []
    if (layout.rows, layout.cols) != (n, m):
        said.append(f"each map {n}×{m} drawn in {layout.rows}×{layout.cols} bins, a bin's largest weight")
    if not layout.label and layout.rows == n:
        said.append("query labels left out")
    if not layout.keys and layout.cols == m:
        said.append("key labels left out")
    total = math.ceil(heads / layout.per_row)
    if len(layout.visible) < total:
        said.append(f"{len(layout.visible)} of {total} rows of maps in view; ↑ ↓ scroll")
    return "; ".join(said)


def key_labels(keys: tuple[str, ...], cell: int) -> str:
    """The keys' labels along the top of a map, each cut to its ``cell`` columns: ``I lo AI`` (``IlA`` at one)."""
    out = []
    for key in keys:
        cut = ""
        for ch in key:
            if cell_len(cut + ch) > cell:
                break
            cut += ch
        out.append(cut + " " * (cell - cell_len(cut)))
    return "".join(out)


def glyph(level: int, cell: int) -> str:
    """A cell's characters: the shade, the minus of a negative weight, or the masked dot."""
    if level == NEGATIVE:
        return MINUS * cell
    if level < 0:
        return MASKED.ljust(cell)
    return GLYPHS[level] * cell  # two columns a key: the map's own shades (display/heatmap.py SHADES), doubled


def readings(weights: Matrix, allow: BoolMatrix, labels: tuple[str, ...], keys: tuple[str, ...]) -> tuple[str, str]:
    """(pairs, pattern): each query's strongest key, and the pattern most rows follow (HeadMap)."""
    n = weights.shape[0]
    live = allow.any(axis=1)  # (n,) rows with a key allowed
    top = np.where(live, np.where(allow, weights, -1.0).argmax(axis=1), -1)  # (n,)
    pairs = " ".join(f"{labels[i]}→{keys[int(j)]}" for i, j in enumerate(top) if j >= 0)
    rows = int(live.sum()) or 1
    index = np.arange(n)
    patterns = (("itself", top == index), ("previous token", top == index - 1), ("first token", top == 0))
    name, hits = max(((what, int((where & live).sum())) for what, where in patterns), key=lambda p: p[1])
    if hits * 2 >= rows:  # most rows peak there: "→ previous token 12/19"
        return pairs, f"→ {name} {hits}/{rows}"
    key = int(np.bincount(top[top >= 0], minlength=len(keys)).argmax())
    count = int((top == key).sum())
    return pairs, f"→ {keys[key]} most often {count}/{rows}"
