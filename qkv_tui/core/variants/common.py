"""What every variant module of the scenario format shares: the loader's checker, the context a table
is parsed in, the two kinds of registry entry, and the value rules the tables have in common.

A variant's keys either make a top-level table of their own (:class:`Table`: ``[norm]``, ``[rope]``,
``[alibi]``) or sit in tables the loader owns (:class:`Keys`: the biases, sinks and K/V heads in
``[[heads]]`` and ``[attention]``, the window in ``[mask]``). Both say what ``--check`` names of them
and the did-you-mean hints for their keys; a table also parses itself and writes itself back.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import numpy as np

from qkv_tui.base.fixed import fixed
from qkv_tui.base.values import kind as _kind
from qkv_tui.base.values import show as _show
from qkv_tui.core.arrays import BoolMatrix, Matrix, Vector

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

MAX_INDEX = 2**53  # the largest position, window or K/V head index: every one is exact as a float64

# (table, key) -> (the key meant, why): a key written in the form of another table
Lookalikes = Mapping[tuple[str, str], tuple[str, str]]


class Checker(Protocol):
    """What the parsers need from the loader's validator (kept abstract to avoid an import cycle)."""

    def fail(self, message: str) -> Exception: ...

    def known(self, table: dict[str, Any], allowed: tuple[str, ...], where: str) -> None: ...

    def number(self, item: Any, where: str) -> float: ...


class HeadFeatures(Protocol):
    """What the ``--check`` summary reads of a head (the loader's Head; abstract like Checker)."""

    @property
    def b_Q(self) -> Vector | None: ...

    @property
    def b_K(self) -> Vector | None: ...

    @property
    def b_V(self) -> Vector | None: ...

    @property
    def sink(self) -> float | None: ...


class Features(Protocol):
    """What the ``--check`` summary reads of a Scenario besides its tables (which it reads by key):
    abstract like Checker, so no variant module imports the loader."""

    @property
    def heads(self) -> Sequence[HeadFeatures]: ...

    @property
    def b_O(self) -> Vector | None: ...

    @property
    def num_kv_heads(self) -> int | None: ...

    @property
    def window(self) -> int | None: ...


@fixed
class Context:
    """What a table's parser may read of the scenario validated before it: one object, so a new
    table needs no new argument list in the loader."""

    v: Checker
    tokens: tuple[str, ...]  # the query labels, n
    d_model: int  # the width of X
    is_cross: bool  # [context] given: keys and queries have no shared positions
    heads: tuple[tuple[str, int], ...]  # each head as messages name it, and its d_k
    mask_kind: str
    allow: BoolMatrix  # (n, m) the mask: True = query i may attend key j
    earlier: dict[str, object] = field(default_factory=dict)  # the tables parsed before this one, by key
    num_heads_split: int | None = None  # num_heads where the heads came from [attention]; None in [[heads]] form
    num_kv_heads: int | None = None  # [attention]'s num_kv_heads where it shares K/V heads
    head_tables: tuple[Any, ...] = ()  # the loader's Heads (kv_head, sink, softcap), for tables that replace the softmax
    d_out: int = 0  # the width of the final output (W_O's columns, or the heads' d_v side by side)
    has_W_O: bool = False
    weights: tuple[str, ...] = ()  # the weights the heads and [output] give (W_Q, b_O, sinks, …), for [backward]
    trainable: tuple[str, ...] = ()  # the weights the file's variant tables give (Table.trainable), for [backward]
    latent: tuple[int, int] | None = None  # [mla]'s (d_nope, d_rope): [rope] turns the d_rope part only
    trains: tuple[Trains, ...] = ()  # every variant's Trains, in FEATURES order, for [backward] (reach_grad)


T = TypeVar("T")
DataclassT = TypeVar("DataclassT", bound="DataclassInstance")


@fixed
class Faces:
    """Where a part's faces above its keys live, each ``"module:name"`` (or, for stages, ``(after, module, name)``).

    Each face is imported by its own layer the first time a scenario has the table: the head-pass builder by the
    forward driver (core/head_parts.py), the stages by the stage registry (teach/stages/__init__.py), the JSON
    field by the export (edges/export_json.py). So a variant registers with one line in ``FEATURES``, a scenario
    without it loads none of its modules, and this module imports no layer above the core.
    """

    head: str | None = None  # Run -> (head index -> PartSpec | None) | None, as core/head_parts.py's builders
    # (the key of the stage they follow, or "before:KEY" of the one they precede; the module under
    # qkv_tui.teach.stages; the StageSpec's name), in walk order (teach/stages/__init__.py places them)
    stages: tuple[tuple[str, str, str], ...] = ()
    json: str | None = None  # (scenario, norm, write_fields) -> the document's fields: [("name", value)] or []
    # its tables of the backward worksheet (edges/worksheet/backward/parts.py PartSheet), where it reads itself
    # backwards in place of the one softmax; None: the page's own tables cover it, or it refuses the page
    worksheet_back: str | None = None
    # how --compare holds a learner's numbers against a head with this part, in a few words (core/diagnose.py
    # refused); None: it does not model the part, and refuses the scenario in one line rather than compare wrongly
    compared: str | None = None
    # the module that says which of its inputs a learner may edit (core/cell_edit.py): KEYS, VECTORS, editable,
    # with_entry, write_cell, and where it has them BY_TOKEN and alias
    edit: str | None = None
    # the learner's mistakes in its step that --compare tries (core/diagnose.py), by the names its report uses, in
    # the report's order; the table's value applies them (``compared_step``)
    mistakes: tuple[str, ...] = ()


def face(path: str) -> Any:
    """The object a face names, ``"package.module:name"``, its module imported on first use."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


@fixed
class Later:
    """A function named ``"package.module:name"``, its module imported on its first call: a table registered
    without its module (its key, keys, lookalikes and faces in a small module of their own) parses, sums up and
    writes through these, so a scenario without the table never loads the module that reads it."""

    path: str

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return face(self.path)(*args, **kwargs)


@fixed
class Table(Generic[T]):
    """A top-level table of the format: ``[key]``. A table of the first variants fills the Scenario field of the
    same name; a part registered since is kept in the Scenario's ``parts`` by its key (there is no field of its
    name). Read either with :meth:`of`."""

    key: str
    keys: tuple[str, ...]  # every key it takes, in the order the messages list them
    parse: Callable[[dict[str, Any], Context], T]  # the table as written (its keys already known) -> its value
    summary: Callable[[T], str]  # its part of the ``--check`` line
    write: Callable[[T], list[str]]  # its lines of a scenario file, the header first
    lookalikes: Lookalikes = field(default_factory=dict)
    faces: Faces | None = None  # a part's other faces; None for a table read by name where it is used
    # the weights [backward] may train that the table gives, read from the table as written (so a [backward]
    # parsed before it knows them): their names in a train list, in the order the default list names them
    trainable: Callable[[dict[str, Any]], tuple[str, ...]] | None = None
    trains: Trains | None = None  # its weights in [backward]'s train list, read from it parsed (reach_grad)

    @property
    def header(self) -> str:
        return f"[{self.key}]"

    def of(self, sc: Any) -> T | None:
        """The table's value in a scenario, None where the scenario has none."""
        if not _field_of(sc, self.key):
            value: T | None = getattr(sc, "parts", {}).get(self.key)
            return value
        return getattr(sc, self.key, None)

    def put(self, sc: DataclassT, value: T | None) -> DataclassT:
        """The scenario (a dataclass) with the table's value replaced: a part's in ``parts``, else its field."""
        if not _field_of(sc, self.key):
            parts = {k: v for k, v in getattr(sc, "parts", {}).items() if k != self.key}
            if value is not None:
                parts[self.key] = value
            return dataclasses.replace(sc, parts=parts)
        return dataclasses.replace(sc, **{self.key: value})

    def summary_parts(self, sc: Features) -> list[str]:
        value = self.of(sc)
        return [] if value is None else [self.summary(value)]


def _field_of(sc: Any, key: str) -> bool:
    """Whether the scenario keeps a table of ``key`` in a field of its own (the first variants') rather than in
    ``parts``."""
    return key in getattr(type(sc), "__dataclass_fields__", {})


@fixed
class Keys:
    """A variant whose keys sit in tables the loader owns; the loader calls its parsers where those tables are read."""

    summary_parts: Callable[[Features], list[str]]
    lookalikes: Lookalikes = field(default_factory=dict)
    faces: Faces | None = None  # its other faces (the head-pass builder), as a Table's
    trains: Trains | None = None  # its weights in [backward]'s train list, as a Table's (reach_grad)


# --- value rules -----------------------------------------------------------------


def number(v: Checker, value: Any, key: str, expected: str = "a finite number") -> float:
    """A TOML integer or float, finite (the loader's own rules and wording); booleans are not numbers."""
    return v.number(value, key)


def positive(v: Checker, value: Any, key: str, why: str = "") -> float:
    """A TOML number, finite and > 0 (``scale``, ``softcap``); ``why`` (`` (the cap c …)``) says what it is for."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise v.fail(f"{key} must be a number > 0{why}, got {_kind(value)}")
    try:
        number = float(value)
    except OverflowError:
        raise v.fail(f"{key} is {_show(value)}, too large; expected a finite number > 0") from None
    if not math.isfinite(number) or number <= 0:
        raise v.fail(f"{key} = {_show(value)}; expected a finite number > 0{why}")
    return number


def numbers(v: Checker, value: Any, key: str, count: int, what: str) -> Vector:
    """A flat list of exactly ``count`` finite numbers (``what`` says what each is for)."""
    if not isinstance(value, list):
        raise v.fail(f"{key} must be a list of {count} number{'s' if count != 1 else ''} ({what}), got {_kind(value)}")
    if len(value) != count:
        raise v.fail(f"{key} has {len(value)} number{'s' if len(value) != 1 else ''}; expected {count} ({what})")
    out = [number(v, item, f"{key} item {i + 1}") for i, item in enumerate(value)]
    array = np.array(out, dtype=np.float64)  # (count,)
    array.setflags(write=False)
    return array


def write_whole(value: Any, low: int, high: int = MAX_INDEX) -> str:
    """``; write 2`` after a message about a whole number, where the file gave one with a decimal point
    (``2.0``, ``1e3``) that would be accepted written as an integer; "" otherwise. TOML reads ``2.0`` as a
    float, so the key that counts heads or positions refuses it however whole its value is."""
    if isinstance(value, float) and value.is_integer() and low <= value <= high:
        return f"; write {int(value)}, without the decimal point (TOML reads {_show(value)} as a float)"
    return ""


def table_of(v: Checker, doc: dict[str, Any], key: str) -> dict[str, Any] | None:
    if key not in doc:
        return None
    table = doc[key]
    if not isinstance(table, dict):
        raise v.fail(f"{key} must be a table ([{key}]), got {_kind(table)}")
    return table


def choice(v: Checker, value: Any, key: str, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in allowed:
        hint = difflib.get_close_matches(str(value), allowed, n=1, cutoff=0.5)
        extra = f"; did you mean {hint[0]!r}?" if hint else ""
        raise v.fail(f"{key} = {_show(value)} is not allowed; expected one of: {', '.join(map(repr, allowed))}{extra}")
    return value


# reach_core: the largest count of heads or dimensions a table takes (it was [mla]'s, and [indexer] and [ssd]
# read it from there): far past any model's (DeepSeek-V3: 128 heads, d_nope 128)
MAX_SIZE = 65_536


# reach_core: what every table that reads a matrix takes of the loader (it was the gate's, and the tables that
# read matrices imported it from there)


class MatrixReader(Protocol):
    """The loader's matrix rule (its messages for ragged rows, non-numbers and non-finite values)."""

    def matrix(self, value: Any, key: str, labels: tuple[str, ...] = ()) -> Matrix: ...


class Reader(Checker, MatrixReader, Protocol):
    pass


# reach_grad: a variant's place in [backward] (core/variants/backward.py walks Context.trains and names none)


@fixed
class Trains:
    """The weights a variant adds to [backward]'s train list, read from the heads and the tables parsed before
    [backward] (a table parsed after it gives its names by ``Table.trainable``, from the table as written); and what
    [backward] cannot read back of it yet."""

    names: tuple[str, ...]  # every weight it may add, in the order the default train list and the messages name them
    after: str  # the layer's own weight (W_Q … b_O) its names follow in that order; "" at the end, before W_U
    given: Callable[[Context], tuple[str, ...]]  # the ones this scenario gives
    instead: tuple[str, ...] = ()  # the layer's own weights its names stand for where it gives any (a latent layer's)
    # one line why [backward] cannot read this scenario back yet; None where it can
    refuse: Callable[[Context], str | None] | None = None
