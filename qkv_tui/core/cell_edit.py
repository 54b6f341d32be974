"""Editing one input value of a scenario, and writing the edits back to its TOML file.

Pure: a Scenario and a cell in, a new validated Scenario out (or an :class:`EditError` with a
one-line reason); the TOML file's text and the edited cells in, new text out. The file keeps its
comments and layout (tomlkit): only the edited numbers change. :func:`save_file` is the one part
that touches the disk: it reads the file as the loader does and replaces it whole.
"""

from __future__ import annotations

import importlib
import math
import os
import re
import stat
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from qkv_tui.core import part_questions as ask
from qkv_tui.core.engine import Computation, compute
from qkv_tui.core.scenario import Head, Matrix, Scenario, ScenarioError, parse_scenario
from qkv_tui.core.tomlfile import ReadError, decode, read_bytes, stat_path
from qkv_tui.core.variants import FEATURES, TABLES
from qkv_tui.core.variants.common import Keys, Table

if TYPE_CHECKING:
    import tomlkit

WEIGHTS = ("W_Q", "W_K", "W_V")
HEAD_BIASES = ("b_Q", "b_K", "b_V")
SHARED = ("W_K", "W_V", "b_K", "b_V")  # with grouped-query attention, heads that share a K/V head share these
BACKWARD_INPUTS = ("target", "dO")  # [backward]'s: edit the target, watch the gradients
# each table that says which of its inputs a learner may edit (its faces' edit module), in the registry's order.
# Besides KEYS, VECTORS, editable, with_entry and write_cell, a module may say FIRST (its inputs come with the layer's
# first, before the heads'), DEFAULTED (vectors the file may leave out, written whole under their key when saved) and
# heads_from (its table holds every head's projections: the heads' own inputs are neither listed nor addressed, and
# an edit derives the heads again)
EDITS: tuple[tuple[Table[Any], Any], ...] = tuple((t, importlib.import_module(t.faces.edit)) for t in TABLES
                                                  if t.faces is not None and t.faces.edit is not None)
# the keys of a head's own table that are one number each and say how they are edited (a sink, a soft-cap): each
# its Keys entry's edit module (NAME, the head's key; with_value; write_value), in the registry's order
_HEAD_FACES = tuple(importlib.import_module(f.faces.edit) for f in FEATURES
                    if isinstance(f, Keys) and f.faces is not None and f.faces.edit is not None)
SCALARS = {face.NAME: face for face in _HEAD_FACES if hasattr(face, "with_value")}
# the matrices of a head's own table besides its projections (the output gate's W_G): edited as those are, and
# written by their face where the [attention] form keeps every head's side by side (write_wide)
HEAD_MATRICES = {face.NAME: face for face in _HEAD_FACES if hasattr(face, "write_wide")}
TABLE_KEYS = tuple(key for _, face in EDITS for key in face.KEYS)  # their inputs, in the order the arrow keys visit them
FIRST_KEYS = tuple(dict.fromkeys(key for _, face in EDITS if getattr(face, "FIRST", False) for key in face.KEYS))
BY_TOKEN = tuple(key for _, face in EDITS for key in getattr(face, "BY_TOKEN", ()))  # rows named by the tokens
TABLE_SCALARS = tuple(key for _, face in EDITS for key in getattr(face, "SCALARS", ()))  # one number: ``top_k = 4``
VECTORS = ("gamma", "beta", "b_O", *HEAD_BIASES,
           *(key for _, face in EDITS for key in face.VECTORS))  # one row: cell (0, i) is entry i
# NAME, NAME[row,col] or NAME[i], then an optional "(head name)"
ADDRESS = re.compile(r"\s*([A-Za-z_][A-Za-z_0-9]*)"
                     r"\s*(?:\[\s*([^,\]]+?)\s*,\s*([^\]]+?)\s*\])?\s*(?:\[\s*\d+\s*\])?\s*(?:\(([^)]*)\))?\s*")


class EditError(ValueError):
    """An edit that cannot be made; ``str()`` is one line saying why."""


@dataclass(frozen=True)
class InputCell:
    """One number the scenario gives (not one the computation derives)."""

    matrix: str  # X | context_X | W_Q | W_K | W_V | W_O | gamma | beta | b_Q | b_K | b_V | b_O | sink | mask | scale
    head: int | None = None  # for the per-head inputs: W_Q, W_K, W_V, b_Q, b_K, b_V, sink
    row: int = 0
    col: int = 0

    def label(self, sc: Scenario) -> str:
        """How the cell is written in the prompt and in messages: ``X[love,0]``, ``W_Q[2,1]``, ``mask[I,love]``."""
        if self.matrix in ("scale", *TABLE_SCALARS):
            return self.matrix
        where = f" ({sc.heads[self.head].name})" if self.head is not None and len(sc.heads) > 1 else ""
        if self.matrix in SCALARS:
            return f"{self.matrix}{where}"
        if self.matrix in VECTORS:
            return f"{self.matrix}[{self.col}]{where}"
        if self.matrix == "mask":
            return f"mask[{sc.labels[self.row]},{sc.key_labels[self.col]}]"
        if self.matrix in (*BACKWARD_INPUTS, *BY_TOKEN):
            return f"{self.matrix}[{sc.labels[self.row]},{self.col}]"
        if self.matrix in ("X", "context_X"):
            labels = sc.labels if self.matrix == "X" else sc.key_labels
            name = "X" if self.matrix == "X" else "X_ctx"
            return f"{name}[{labels[self.row]},{self.col}]"
        return f"{self.matrix}[{self.row},{self.col}]{where}"


def _vector(sc: Scenario, name: str, head: int | None) -> Matrix | None:
    """A 1-D input (gamma, beta, a bias) where the scenario has it; None otherwise (or from a file that predates the key)."""
    found = _table_input(sc, name)
    if found is not None:
        table, face = found
        given = face.editable(table.of(sc)).get(name)
        return None if given is None else given[0]
    if name in HEAD_BIASES:
        return getattr(sc.heads[head], name, None) if head is not None else None
    if name == "b_O":
        return getattr(sc, "b_O", None)
    norm = getattr(sc, "norm", None)
    if norm is None:
        return None
    if name == "beta" and norm.kind != "layer":
        return None
    if name == "beta" and norm.beta is None:
        zeros: Matrix = np.zeros_like(norm.gamma)  # "layer" with beta left out: all 0, and editable
        return zeros
    vector: Matrix | None = getattr(norm, name, None)
    return vector


def _table_input(sc: Scenario, name: str) -> tuple[Table[Any], Any] | None:
    """The table (and its edit module) whose input ``name`` is, among the tables the scenario has; None if none."""
    return next(((t, face) for t, face in EDITS if name in face.KEYS and t.of(sc) is not None), None)


def _owns_heads(sc: Scenario) -> bool:
    """Whether a table the scenario has holds every head's projections (their own inputs are then not edited)."""
    return any(hasattr(face, "heads_from") and t.of(sc) is not None for t, face in EDITS)


def value_of_vector(sc: Scenario, name: str) -> Matrix:
    vector = _vector(sc, name, None)
    assert vector is not None
    return vector


def _kv(sc: Scenario, head: int) -> int:
    kv = getattr(sc.heads[head], "kv_head", None)
    return head if kv is None else int(kv)


def _array(sc: Scenario, matrix: str, head: int | None) -> Matrix | None:
    if matrix in VECTORS:
        vector = _vector(sc, matrix, head)
        return None if vector is None else vector[None, :]  # (1, size)
    # a table's own inputs ([deltanet]'s g and β, [differential]'s λ, a latent layer's weights), where it gives them
    table_input = _table_input(sc, matrix) if head is None else None
    if table_input is not None:
        table, face = table_input
        found: Matrix | None = face.editable(table.of(sc)).get(matrix)
        return found
    if matrix == "X":
        return sc.X
    if matrix in BACKWARD_INPUTS:  # what the backward pass starts from, where the scenario has [backward]
        bw = getattr(sc, "backward", None)
        given: Matrix | None = None if bw is None else getattr(bw, matrix)
        return given
    if matrix == "context_X":
        return sc.context_X
    if matrix == "W_O":
        return sc.W_O
    if matrix in WEIGHTS and head is not None:
        return getattr(sc.heads[head], matrix)  # type: ignore[no-any-return]
    if matrix in HEAD_MATRICES and head is not None:  # where the head has one (an output gate's weights)
        found_matrix: Matrix | None = getattr(sc.heads[head], matrix, None)
        return found_matrix
    return None


def _inputs(sc: Scenario) -> Iterator[tuple[str, int | None]]:
    """Every input (matrix, head) in the order the arrow keys visit them: X, the context, the norm,
    each head's weights, biases and one-number keys (a sink, a soft-cap), W_O, b_O, scale, mask. Arrays where the
    scenario has them; "scale" and "mask" always, a head's one-number key where the head has it."""
    yield from (("X", None), ("context_X", None), ("gamma", None), ("beta", None))
    yield from ((key, None) for key in FIRST_KEYS)  # the tables' that come first (a latent layer's weights)
    if _owns_heads(sc):  # the heads are derived from a table's weights: none of their own
        yield from (("W_O", None), ("b_O", None), ("scale", None), ("mask", None))
        return
    reused = ask.scenario_has(sc, "kv_given")  # [shared_kv]: K and V are another layer's, no W_K or W_V to edit
    for h, head in enumerate(sc.heads):
        yield from ((role, h) for role in ("W_Q", "b_Q", "W_K", "b_K", "W_V", "b_V") if not (reused and role in SHARED))
        yield from ((name, h) for name in SCALARS if getattr(head, name, None) is not None)
        yield from ((name, h) for name in HEAD_MATRICES if getattr(head, name, None) is not None)
    yield from ((target, None) for target in TABLE_KEYS if target not in FIRST_KEYS)
    yield from (("W_O", None), ("b_O", None), ("scale", None), ("mask", None))
    yield from ((name, None) for name in BACKWARD_INPUTS)


def input_cells(sc: Scenario) -> list[InputCell]:
    """Every editable cell, in the order the arrow keys visit them: X, the context, each head's weights, W_O, scale, mask."""
    cells: list[InputCell] = []
    for matrix, head in _inputs(sc):
        if matrix in ("scale", *SCALARS):
            cells.append(InputCell(matrix, head))
            continue
        array = sc.allow if matrix == "mask" else _array(sc, matrix, head)
        if array is not None:
            cells.extend(InputCell(matrix, head, r, c) for r in range(array.shape[0]) for c in range(array.shape[1]))
    return cells


def changed_cells(base: Scenario, sc: Scenario) -> list[InputCell]:
    """The input cells whose value in ``sc`` differs from ``base`` (the file as read), in input_cells order.

    Whole arrays are compared at once, so a real model's head (a million weights) costs milliseconds.
    An edit back to the file's value is no change; an input the two do not share in shape is ignored
    (edits never change a shape: only a reload does, and it makes the reloaded file the new base).
    """
    cells: list[InputCell] = []
    for matrix, head in _inputs(sc):
        if head is not None and head >= len(base.heads):
            continue
        if matrix in ("scale", *SCALARS):
            cell = InputCell(matrix, head)
            shared = matrix == "scale" or getattr(base.heads[head or 0], matrix, None) is not None
            if shared and value_of(base, cell) != value_of(sc, cell):
                cells.append(cell)
            continue
        old, new = (base.allow, sc.allow) if matrix == "mask" else (_array(base, matrix, head), _array(sc, matrix, head))
        if old is not None and new is not None and old.shape == new.shape:
            cells.extend(InputCell(matrix, head, int(r), int(c)) for r, c in np.argwhere(old != new))
    return cells


def value_of(sc: Scenario, cell: InputCell) -> float:
    """The cell's value; the scale's is the divisor in force (√d_k of the first head when the file sets none)."""
    if cell.matrix == "scale":
        return sc.scale if sc.scale is not None else math.sqrt(sc.heads[0].d_k)
    if cell.matrix == "mask":
        return 1.0 if sc.allow[cell.row, cell.col] else 0.0
    if cell.matrix in SCALARS and cell.head is not None:
        number = getattr(sc.heads[cell.head], cell.matrix)
        assert number is not None
        return float(number)
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
    found = ADDRESS.fullmatch(name)
    if not found:
        raise EditError(f"{name.strip()!r} is not a cell; write e.g. X[love,0] = 2 or W_Q[1,2] = 0.5")
    matrix, row_text, col_text, head_text = found.groups()
    matrix = {"X_ctx": "context_X", "context.X": "context_X"}.get(matrix, matrix)
    for table, face in EDITS:  # a table's own names for its inputs, where the scenario has it
        if hasattr(face, "alias") and table.of(sc) is not None:
            matrix = face.alias(matrix, col_text is not None)
    if matrix == "scale" and row_text is None:
        return InputCell("scale"), value
    if matrix in TABLE_SCALARS and _array(sc, matrix, None) is not None:  # a table's one number, its 1×1 cell
        if row_text is not None:
            raise EditError(f"{matrix} is one number, with no row or column: write e.g. {matrix} = 4")
        return InputCell(matrix), value
    head: int | None = None
    if matrix in (*WEIGHTS, *HEAD_BIASES, *SCALARS, *HEAD_MATRICES) and not _owns_heads(sc):
        head = 0
        if head_text:
            names = [h.name for h in sc.heads]
            if head_text.strip() not in names:
                raise EditError(f"no head named {head_text.strip()!r}; the heads are {', '.join(names)}")
            head = names.index(head_text.strip())
    if matrix in SCALARS and row_text is None:
        if getattr(sc.heads[head or 0], matrix, None) is None:
            raise EditError(f"this head has no {matrix}")
        return InputCell(matrix, head), value
    if matrix in VECTORS and row_text is None:
        entry = re.fullmatch(r"\s*[A-Za-z_][A-Za-z_0-9]*\s*\[\s*(\d+)\s*\]\s*(?:\([^)]*\))?\s*", name)
        vector = _vector(sc, matrix, head)
        if vector is None:
            raise EditError(f"this scenario has no {matrix}")
        if not entry or int(entry.group(1)) >= vector.shape[0]:
            raise EditError(f"{name.strip()!r}: give an entry, e.g. {matrix}[0] (0 … {vector.shape[0] - 1})")
        return InputCell(matrix, head, 0, int(entry.group(1))), value
    if row_text is None or col_text is None:
        raise EditError(f"{name.strip()!r}: give a row and a column, e.g. {matrix}[0,1]")
    if matrix not in ("X", "context_X", "W_O", "mask", *WEIGHTS, *HEAD_MATRICES, *BACKWARD_INPUTS,
                      *(key for table, face in EDITS if table.of(sc) is not None for key in face.KEYS)):
        raise EditError(f"{matrix!r} is not an input; edit X, X_ctx, W_Q, W_K, W_V, W_O, scale, mask"
                        " (and gamma, beta, b_Q, b_K, b_V, b_O, sink, W_G where the scenario has them)")

    def index(text: str, labels: tuple[str, ...] | None, size: int, what: str, spelt: tuple[str, ...] = ()) -> int:
        """A token label (as the screens show it, ▁the₂, or as the file spells it), or an index from 0."""
        if labels is not None and text in labels:
            return labels.index(text)
        if text in spelt:
            return spelt.index(text)
        if text.isascii() and text.isdigit() and int(text) < size:
            return int(text)
        raise EditError(f"{what} {text!r} is not in {matrix}; expected an index 0 … {size - 1}"
                        + (f" or a token ({', '.join(labels)})" if labels else ""))

    if matrix == "mask":
        row = index(row_text, sc.labels, sc.n, "row", sc.tokens)
        col = index(col_text, sc.key_labels, sc.m, "column", sc.key_tokens)
        return InputCell("mask", None, row, col), value
    array = _array(sc, matrix, head)
    if array is None:
        raise EditError(f"this scenario has no {matrix}")
    by_token = ("X", *BACKWARD_INPUTS, *BY_TOKEN)
    rows = sc.labels if matrix in by_token else sc.key_labels if matrix == "context_X" else None
    spelt = sc.tokens if matrix in by_token else sc.key_tokens if matrix == "context_X" else ()
    cell = InputCell(matrix, head, index(row_text, rows, array.shape[0], "row", spelt),
                     index(col_text, None, array.shape[1], "column"))
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
            raise EditError(f"{sc.labels[cell.row]!r} would attend no key; every query row needs at least one allowed key")
        for table in ask.tables(sc):  # a table that reads the mask may refuse the edited one (ALiBi's later keys)
            refuses = getattr(table, "refuses_mask", None)
            refused = None if refuses is None else refuses(allow, sc.positions)
            if refused is not None:
                raise EditError(f"{sc.labels[cell.row]!r} {refused}")
        allow.setflags(write=False)
        kind = "custom" if not allow.all() else "none"
        return replace(sc, allow=allow, mask_kind=kind, window=None)  # a sliding window edited by hand is custom now
    value = parse_number(text)
    table_input = _table_input(sc, cell.matrix) if cell.head is None else None
    if table_input is not None:
        table, face = table_input
        try:
            put = table.put(sc, face.with_entry(table.of(sc), cell.matrix, cell.row, cell.col, value))
        except ValueError as exc:
            raise EditError(str(exc)) from None
        heads_from = getattr(face, "heads_from", None)  # a table that holds every head's projections
        return put if heads_from is None else heads_from(put)
    if cell.matrix in SCALARS and cell.head is not None:
        try:
            edited: Scenario = SCALARS[cell.matrix].with_value(sc, cell.head, value, text)
        except ValueError as exc:
            raise EditError(str(exc)) from None
        return edited
    if cell.matrix in ("gamma", "beta"):
        current = _vector(sc, cell.matrix, None)
        assert sc.norm is not None and current is not None
        entry = _with(current[None, :], 0, cell.col, value)[0]
        norm = replace(sc.norm, gamma=entry) if cell.matrix == "gamma" else replace(sc.norm, beta=entry)
        return replace(sc, norm=norm)
    if cell.matrix == "b_O":
        assert sc.b_O is not None
        return replace(sc, b_O=_with(sc.b_O[None, :], 0, cell.col, value)[0])
    if cell.matrix == "scale":
        if value <= 0:
            raise EditError(f"scale = {text.strip()}: expected a number > 0 (what the scores are divided by)")
        return replace(sc, scale=value)
    if cell.matrix == "X":
        return replace(sc, X=_with(sc.X, cell.row, cell.col, value))
    if cell.matrix in BACKWARD_INPUTS and sc.backward is not None:
        start = getattr(sc.backward, cell.matrix)
        assert start is not None
        moved = _with(start, cell.row, cell.col, value)
        bw = replace(sc.backward, target=moved) if cell.matrix == "target" else replace(sc.backward, dO=moved)
        return replace(sc, backward=bw)
    if cell.matrix == "context_X":
        assert sc.context_X is not None
        return replace(sc, context_X=_with(sc.context_X, cell.row, cell.col, value))
    if cell.matrix == "W_O":
        assert sc.W_O is not None
        return replace(sc, W_O=_with(sc.W_O, cell.row, cell.col, value))
    if cell.matrix in HEAD_MATRICES and cell.head is not None:
        own = _array(sc, cell.matrix, cell.head)
        assert own is not None
        heads = list(sc.heads)
        owned: dict[str, Matrix] = {cell.matrix: _with(own, cell.row, cell.col, value)}
        heads[cell.head] = replace(heads[cell.head], **owned)  # type: ignore[arg-type]
        return replace(sc, heads=tuple(heads))
    if cell.matrix in (*WEIGHTS, *HEAD_BIASES) and cell.head is not None:
        heads = list(sc.heads)
        source = _array(sc, cell.matrix, cell.head)
        assert source is not None
        new = _with(source, cell.row, cell.col, value)
        if cell.matrix in HEAD_BIASES:
            new = new[0]
        # heads sharing this K/V head (grouped-query attention) share its W_K, W_V and biases
        owners = [h for h in range(len(heads)) if cell.matrix not in SHARED or _kv(sc, h) == _kv(sc, cell.head)]
        for h in owners if cell.matrix in SHARED else [cell.head]:
            head: Head = heads[h]
            changed: dict[str, Matrix] = {cell.matrix: new}
            heads[h] = replace(head, **changed)  # type: ignore[arg-type]
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

    Raises EditError when the file does not hold the numbers (a ``[model]`` scenario, or a file
    changed on disk since it was read so that a cell's place is gone) or cannot be parsed.
    """
    import tomlkit  # only saving writes TOML back: the app starts without it
    import tomlkit.exceptions

    try:
        doc = tomlkit.parse(original)
    except tomlkit.exceptions.ParseError as exc:
        raise EditError(f"the file on disk is not valid TOML any more ({exc}); reload (r) first") from None
    if "model" in doc:
        raise EditError("this scenario's numbers come from a [model]; write them out with --export toml and edit that file")
    mask_done = False
    for cell in dict.fromkeys(cells):
        try:
            if cell.matrix == "mask":
                if not mask_done:
                    _write_mask(doc, sc)
                    mask_done = True
            else:
                _write_cell(doc, sc, cell)
        except (LookupError, TypeError, ValueError, AttributeError, tomlkit.exceptions.TOMLKitError):
            # emptied, cut short or reshaped since it was read: there is no place for the number
            raise EditError(f"the file on disk has changed and no longer holds {cell.label(sc)} where it was read from;"
                            " the edits stay in the app: put the file back and save again, or reload (r) to take"
                            " the file as it is now") from None
    return tomlkit.dumps(doc)


def _write_cell(doc: tomlkit.TOMLDocument, sc: Scenario, cell: InputCell) -> None:
    """Set one edited number (not a mask cell) in its place in the document; a place that is not there
    raises what tomlkit or the indexing raises (KeyError, IndexError, TypeError)."""
    value = value_of(sc, cell)
    table_input = _table_input(sc, cell.matrix) if cell.head is None else None
    if table_input is not None:
        table, face = table_input
        if cell.matrix in getattr(face, "DEFAULTED", ()) and cell.matrix not in doc[table.key]:
            # left at its default in the file: write the whole vector
            doc[table.key][cell.matrix] = [_number(float(v)) for v in value_of_vector(sc, cell.matrix)]
        else:
            face.write_cell(doc[table.key], cell.matrix, cell.row, cell.col, _number(value))
    elif cell.matrix == "scale":
        doc["scale"] = _number(value)
    elif cell.matrix == "X":
        doc["X"][cell.row][cell.col] = _number(value)
    elif cell.matrix in BACKWARD_INPUTS:
        doc["backward"][cell.matrix][cell.row][cell.col] = _number(value)
    elif cell.matrix == "context_X":
        doc["context"]["X"][cell.row][cell.col] = _number(value)
    elif cell.matrix == "W_O":
        doc["output"]["W_O"][cell.row][cell.col] = _number(value)
    elif cell.matrix in ("gamma", "beta"):
        vector = _vector(sc, cell.matrix, None)
        assert vector is not None
        if cell.matrix in doc["norm"]:
            doc["norm"][cell.matrix][cell.col] = _number(value)
        else:  # left at its default in the file: write the whole vector
            doc["norm"][cell.matrix] = [_number(float(v)) for v in vector]
    elif cell.matrix == "b_O":
        doc["output"]["b_O"][cell.col] = _number(value)
    elif cell.matrix in SCALARS and cell.head is not None:
        SCALARS[cell.matrix].write_value(doc, sc, cell.head, _number(value))
    elif cell.matrix in HEAD_MATRICES and cell.head is not None and sc.num_heads_split is not None:
        HEAD_MATRICES[cell.matrix].write_wide(doc, sc, cell.head, cell.row, cell.col, _number(value))
    elif cell.head is not None and sc.num_heads_split is not None:
        # one head's slice of the wide matrix; K/V slices are numbered by K/V head
        index = _kv(sc, cell.head) if cell.matrix in SHARED else cell.head
        if cell.matrix in HEAD_BIASES:
            width = _vector(sc, cell.matrix, cell.head).shape[0]  # type: ignore[union-attr]
            doc["attention"][cell.matrix][index * width + cell.col] = _number(value)
        else:
            width = getattr(sc.heads[cell.head], cell.matrix).shape[1]
            doc["attention"][cell.matrix][cell.row][index * width + cell.col] = _number(value)
    elif cell.head is not None and cell.matrix in HEAD_BIASES:
        doc["heads"][cell.head][cell.matrix][cell.col] = _number(value)
    elif cell.head is not None:
        doc["heads"][cell.head][cell.matrix][cell.row][cell.col] = _number(value)


def edited_text(source: Path, sc: Scenario, cells: Iterable[InputCell]) -> str:
    """``source``'s text with the edited cells set (save_text), checked to be a valid scenario still.
    Raises EditError, one line.

    ``source`` is read as a scenario is loaded: anything but a regular file (a FIFO, a device, a folder)
    is refused without a blocking open, and so is a file over the size limit or not UTF-8.
    """
    try:
        status = stat_path(source)
        if status is None:
            raise EditError("the file is gone (deleted or renamed); the edits stay in the app")
        text = decode(read_bytes(source, status))
    except ReadError as exc:
        raise EditError(exc.message) from None
    new_text = save_text(text, sc, cells)
    try:  # a file changed on disk can take the numbers and still not be a scenario (emptied, then a mask edit)
        parse_scenario(new_text, str(source))
    except ScenarioError as exc:
        raise EditError(f"the file on disk has changed and with the edits would not be a valid scenario ({exc.message});"
                        " the edits stay in the app: put the file back and save again") from None
    return new_text


def save_file(source: Path, target: Path, sc: Scenario, cells: Iterable[InputCell]) -> Path:
    """Write :func:`edited_text` to ``target``; returns the file written. Raises EditError, one line, for
    anything that stops it; then nothing is written.

    The new text goes to a fresh file beside the target, renamed over it (whole or not at all: an editor
    never reads half a file), with the target's permissions. A symbolic link is followed, so the link
    stays a link; a target that is not a regular file is refused.
    """
    new_text = edited_text(source, sc, cells)
    real = Path(os.path.realpath(target))
    try:
        existing = os.stat(real)
    except FileNotFoundError:
        existing = None
    except OSError as exc:
        raise EditError(f"cannot write: {exc.strerror or exc}") from None
    if existing is not None and not stat.S_ISREG(existing.st_mode):
        raise EditError("cannot write over something that is not a regular file")
    try:
        fd, temporary = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".qkv-tui-save", dir=real.parent)
    except OSError as exc:
        raise EditError(f"cannot write in {real.parent}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(new_text)
        os.chmod(temporary, stat.S_IMODE(existing.st_mode) if existing else 0o666 & ~_umask())
        os.replace(temporary, real)
    except OSError as exc:
        Path(temporary).unlink(missing_ok=True)
        raise EditError(f"cannot write: {exc.strerror or exc}") from None
    return real


def _umask() -> int:
    mask = os.umask(0o022)  # the only way to read it is to set it
    os.umask(mask)
    return mask


def _write_mask(doc: tomlkit.TOMLDocument, sc: Scenario) -> None:
    import tomlkit

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
        for stale in ("pad", "window"):  # what the old kind needed, and "custom" refuses
            if stale in current:
                del current[stale]
        current["allow"] = allow
        return
    table = tomlkit.inline_table()
    table.update({"kind": "custom", "allow": allow})
    doc["mask"] = table


def _same_shape(rows: object, allow: list[list[int]]) -> bool:
    return (isinstance(rows, list) and len(rows) == len(allow)
            and all(isinstance(r, list) and len(r) == len(a) for r, a in zip(rows, allow)))
