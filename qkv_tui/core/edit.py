"""Editing one input value of a scenario, and writing the edits back to its TOML file.

Pure: a Scenario and a cell in, a new validated Scenario out (or an :class:`EditError` with a
one-line reason); the TOML file's text and the edited cells in, new text out. The file keeps its
comments and layout (tomlkit): only the edited numbers change.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np
import tomlkit
import tomlkit.exceptions

from qkv_tui.core.engine import Computation, compute
from qkv_tui.core.scenario import Head, Matrix, Scenario, ScenarioError

WEIGHTS = ("W_Q", "W_K", "W_V")


class EditError(ValueError):
    """An edit that cannot be made; ``str()`` is one line saying why."""


@dataclass(frozen=True)
class InputCell:
    """One number the scenario gives (not one the computation derives)."""

    matrix: str  # X | context_X | W_Q | W_K | W_V | W_O | mask | scale
    head: int | None = None  # for W_Q, W_K, W_V
    row: int = 0
    col: int = 0

    def label(self, sc: Scenario) -> str:
        """How the cell is written in the prompt and in messages: ``X[love,0]``, ``W_Q[2,1]``, ``mask[I,love]``."""
        if self.matrix == "scale":
            return "scale"
        if self.matrix == "mask":
            return f"mask[{sc.tokens[self.row]},{sc.key_tokens[self.col]}]"
        if self.matrix in ("X", "context_X"):
            labels = sc.tokens if self.matrix == "X" else sc.key_tokens
            name = "X" if self.matrix == "X" else "X_ctx"
            return f"{name}[{labels[self.row]},{self.col}]"
        where = f" ({sc.heads[self.head].name})" if self.head is not None and len(sc.heads) > 1 else ""
        return f"{self.matrix}[{self.row},{self.col}]{where}"


def _array(sc: Scenario, matrix: str, head: int | None) -> Matrix | None:
    if matrix == "X":
        return sc.X
    if matrix == "context_X":
        return sc.context_X
    if matrix == "W_O":
        return sc.W_O
    if matrix in WEIGHTS and head is not None:
        return getattr(sc.heads[head], matrix)  # type: ignore[no-any-return]
    return None


def input_cells(sc: Scenario) -> list[InputCell]:
    """Every editable cell, in the order the arrow keys visit them: X, the context, each head's weights, W_O, scale, mask."""
    cells: list[InputCell] = []

    def grid(matrix: str, head: int | None) -> None:
        array = _array(sc, matrix, head)
        if array is not None:
            cells.extend(InputCell(matrix, head, r, c) for r in range(array.shape[0]) for c in range(array.shape[1]))

    grid("X", None)
    grid("context_X", None)
    for h in range(len(sc.heads)):
        for role in WEIGHTS:
            grid(role, h)
    grid("W_O", None)
    cells.append(InputCell("scale"))
    cells.extend(InputCell("mask", None, i, j) for i in range(sc.n) for j in range(sc.m))
    return cells


def value_of(sc: Scenario, cell: InputCell) -> float:
    """The cell's value; the scale's is the divisor in force (√d_k of the first head when the file sets none)."""
    if cell.matrix == "scale":
        return sc.scale if sc.scale is not None else math.sqrt(sc.heads[0].d_k)
    if cell.matrix == "mask":
        return 1.0 if sc.allow[cell.row, cell.col] else 0.0
    array = _array(sc, cell.matrix, cell.head)
    assert array is not None
    return float(array[cell.row, cell.col])


def parse_number(text: str) -> float:
    """A finite number as a person types it (``2``, ``-0.5``, ``1e-3``, ``−1``); anything else is an EditError."""
    cleaned = text.strip().replace("−", "-")
    if not cleaned:
        raise EditError("type a number, e.g. 2 or -0.5")
    if not re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", cleaned):
        raise EditError(f"{text.strip()!r} is not a number; type digits, e.g. 2 or -0.5")
    value = float(cleaned)
    if not math.isfinite(value):
        raise EditError(f"{text.strip()!r} is too large; expected a finite number")
    return value


def parse_address(sc: Scenario, text: str) -> tuple[InputCell | None, str]:
    """``W_Q[2,1] = 0.5`` -> (that cell, "0.5"); a bare value -> (None, value). Token labels or indices name rows."""
    name, sep, value = text.partition("=")
    if not sep:
        return None, text
    found = re.fullmatch(r"\s*([A-Za-z_]+)\s*(?:\[\s*([^,\]]+?)\s*,\s*([^\]]+?)\s*\])?\s*(?:\(([^)]*)\))?\s*", name)
    if not found:
        raise EditError(f"{name.strip()!r} is not a cell; write e.g. X[love,0] = 2 or W_Q[1,2] = 0.5")
    matrix, row_text, col_text, head_text = found.groups()
    matrix = {"X_ctx": "context_X", "context.X": "context_X"}.get(matrix, matrix)
    if matrix == "scale" and row_text is None:
        return InputCell("scale"), value
    if row_text is None or col_text is None:
        raise EditError(f"{name.strip()!r}: give a row and a column, e.g. {matrix}[0,1]")
    head: int | None = None
    if matrix in WEIGHTS:
        head = 0
        if head_text:
            names = [h.name for h in sc.heads]
            if head_text.strip() not in names:
                raise EditError(f"no head named {head_text.strip()!r}; the heads are {', '.join(names)}")
            head = names.index(head_text.strip())
    elif matrix not in ("X", "context_X", "W_O", "mask"):
        raise EditError(f"{matrix!r} is not an input; edit X, X_ctx, W_Q, W_K, W_V, W_O, scale or mask")

    def index(text: str, labels: tuple[str, ...] | None, size: int, what: str) -> int:
        if labels is not None and text in labels:
            return labels.index(text)
        if text.isascii() and text.isdigit() and int(text) < size:
            return int(text)
        raise EditError(f"{what} {text!r} is not in {matrix}; expected 0 … {size - 1}"
                        + (f" or a token ({', '.join(labels)})" if labels else ""))

    if matrix == "mask":
        row, col = index(row_text, sc.tokens, sc.n, "row"), index(col_text, sc.key_tokens, sc.m, "column")
        return InputCell("mask", None, row, col), value
    array = _array(sc, matrix, head)
    if array is None:
        raise EditError(f"this scenario has no {matrix}")
    rows = sc.tokens if matrix == "X" else sc.key_tokens if matrix == "context_X" else None
    cell = InputCell(matrix, head, index(row_text, rows, array.shape[0], "row"), index(col_text, None, array.shape[1], "column"))
    return cell, value


def _with(array: Matrix, row: int, col: int, value: float) -> Matrix:
    out = array.copy()
    out[row, col] = value
    out.setflags(write=False)
    return out


def apply_edit(sc: Scenario, cell: InputCell, text: str) -> Scenario:
    """The scenario with one input changed; raises EditError (one line) for input it cannot take."""
    if cell.matrix == "mask":
        flag = text.strip().lower()
        if flag not in ("0", "1", "true", "false"):
            raise EditError("a mask cell is 1 (may attend) or 0 (masked)")
        allow = sc.allow.copy()
        allow[cell.row, cell.col] = flag in ("1", "true")
        if not allow[cell.row].any():
            raise EditError(f"{sc.tokens[cell.row]!r} would attend no key; every query row needs at least one allowed key")
        allow.setflags(write=False)
        return replace(sc, allow=allow, mask_kind="custom" if not allow.all() else "none")
    value = parse_number(text)
    if cell.matrix == "scale":
        if value <= 0:
            raise EditError(f"scale = {text.strip()}: expected a number > 0 (what the scores are divided by)")
        return replace(sc, scale=value)
    if cell.matrix == "X":
        return replace(sc, X=_with(sc.X, cell.row, cell.col, value))
    if cell.matrix == "context_X":
        assert sc.context_X is not None
        return replace(sc, context_X=_with(sc.context_X, cell.row, cell.col, value))
    if cell.matrix == "W_O":
        assert sc.W_O is not None
        return replace(sc, W_O=_with(sc.W_O, cell.row, cell.col, value))
    if cell.matrix in WEIGHTS and cell.head is not None:
        heads = list(sc.heads)
        head: Head = heads[cell.head]
        changed: dict[str, Matrix] = {cell.matrix: _with(getattr(head, cell.matrix), cell.row, cell.col, value)}
        heads[cell.head] = replace(head, **changed)  # type: ignore[arg-type]
        return replace(sc, heads=tuple(heads))
    raise EditError(f"{cell.matrix} cannot be edited")


def edit(sc: Scenario, cell: InputCell, text: str) -> tuple[Scenario, Computation]:
    """apply_edit, then the computation of the result (a value that overflows is an EditError too)."""
    new = apply_edit(sc, cell, text)
    try:
        return new, compute(new)
    except ScenarioError as exc:
        raise EditError(exc.message) from None


# --- writing back ------------------------------------------------------------------------------


def _number(value: float) -> int | float:
    return int(value) if value == round(value) and abs(value) < 2**53 else value


def save_text(original: str, sc: Scenario, cells: Iterable[InputCell]) -> str:
    """The file's text with the edited cells set to ``sc``'s values; comments and layout kept.

    Raises EditError when the file does not hold the numbers (a ``[model]`` scenario) or cannot be parsed.
    """
    try:
        doc = tomlkit.parse(original)
    except tomlkit.exceptions.ParseError as exc:
        raise EditError(f"the file on disk is not valid TOML any more ({exc}); reload (r) first") from None
    if "model" in doc:
        raise EditError("this scenario's numbers come from a [model]; write them out with --export toml and edit that file")
    mask_done = False
    for cell in dict.fromkeys(cells):
        value = value_of(sc, cell)
        if cell.matrix == "scale":
            doc["scale"] = _number(value)
        elif cell.matrix == "mask":
            if not mask_done:
                _write_mask(doc, sc)
                mask_done = True
        elif cell.matrix == "X":
            doc["X"][cell.row][cell.col] = _number(value)
        elif cell.matrix == "context_X":
            doc["context"]["X"][cell.row][cell.col] = _number(value)
        elif cell.matrix == "W_O":
            doc["output"]["W_O"][cell.row][cell.col] = _number(value)
        elif cell.head is not None and sc.num_heads_split is not None:
            width = getattr(sc.heads[cell.head], cell.matrix).shape[1]  # one head's slice of the wide matrix
            doc["attention"][cell.matrix][cell.row][cell.head * width + cell.col] = _number(value)
        elif cell.head is not None:
            doc["heads"][cell.head][cell.matrix][cell.row][cell.col] = _number(value)
    return tomlkit.dumps(doc)


def _write_mask(doc: tomlkit.TOMLDocument, sc: Scenario) -> None:
    allow = [[int(flag) for flag in row] for row in np.asarray(sc.allow)]
    if sc.allow.all():
        if "mask" in doc:
            doc["mask"] = "none"
        return
    current = doc.get("mask")
    if isinstance(current, dict) and current.get("kind") == "custom" and _same_shape(current.get("allow"), allow):
        rows = current["allow"]  # a custom mask already written out: change its flags in place, layout and all
        for i, row in enumerate(allow):
            for j, flag in enumerate(row):
                if bool(rows[i][j]) != bool(flag):
                    rows[i][j] = bool(flag) if isinstance(rows[i][j], bool) else flag
        return
    if isinstance(current, dict) and not isinstance(current, tomlkit.items.InlineTable):
        current["kind"] = "custom"  # a [mask] table keeps its place and comments
        if "pad" in current:
            del current["pad"]
        current["allow"] = allow
        return
    table = tomlkit.inline_table()
    table.update({"kind": "custom", "allow": allow})
    doc["mask"] = table


def _same_shape(rows: object, allow: list[list[int]]) -> bool:
    return (isinstance(rows, list) and len(rows) == len(allow)
            and all(isinstance(r, list) and len(r) == len(a) for r, a in zip(rows, allow)))
