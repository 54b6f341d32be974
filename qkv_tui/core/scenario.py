"""Scenario files: TOML in, a frozen, validated :class:`Scenario` out.

The format is docs/scenario-format.md. Every rule the loader enforces fails with a
:class:`ScenarioError` whose message names the file, the key and what was
expected, so the command line can print one clean line (its Errors section).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import math
import re
from collections.abc import Mapping
from dataclasses import field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from qkv_tui.base.fixed import fixed
from qkv_tui.base.values import distinct_labels, escaped, visible
from qkv_tui.base.values import kind as _kind
from qkv_tui.base.values import show as _show
from qkv_tui.core import variants
from qkv_tui.core.arrays import BoolMatrix as BoolMatrix  # re-exported: most modules take the array types from here
from qkv_tui.core.arrays import Matrix as Matrix
from qkv_tui.core.arrays import Vector
from qkv_tui.core.inputs import INPUT_KEYS, Input, parse_input
from qkv_tui.core.production import CACHE_KEYS, TILES_KEYS, ProductionSettings, parse_production
from qkv_tui.core.tomlfile import NumberGrid, ReadError, decode, parse_toml, read_bytes, stat_path, table_values
from qkv_tui.core.variants import Norm, QKNorm, Rope
from qkv_tui.core.variants.common import write_whole
from qkv_tui.core.variants.window import table_form as _table_form

if TYPE_CHECKING:  # [linear]'s, [mla]'s, [backward]'s and [deltanet]'s modules load with the first file that has the table
    from qkv_tui.core.variants.backward import Backward
    from qkv_tui.core.variants.deltanet import DeltaNet
    from qkv_tui.core.variants.linear import Linear
    from qkv_tui.core.variants.mla import Mla

TOP_KEYS = (
    "title", "description", "tokens", "X", "mask", "scale",
    "heads", "attention", "output", "context",
    *(t.key for t in variants.TABLES),  # modern attention's tables (core/variants/)
    "model",  # a real model's head: expanded by the importers before validation
    "input",  # what X is (core/inputs.py); the importers set it
    "tiles", "cache",  # the production views' settings (core/production.py)
    variants.softcap.KEY, variants.scale_from.KEY,  # the soft-cap for every head; where scale comes from
    variants.gate.TABLE_KEY,  # [gate]: the output gate's wide W_G, read with [attention] (core/variants/gate.py)
)
# the variants' keys inside the loader's own tables come from their modules (core/variants/)
HEAD_KEYS = ("name", "W_Q", "W_K", "W_V", *variants.biases.HEAD_KEYS, variants.sinks.HEAD_KEY, variants.kv_heads.HEAD_KEY,
             variants.softcap.KEY, variants.gate.HEAD_KEY)
ATTENTION_REQUIRED = ("num_heads", "W_Q", "W_K", "W_V")
ATTENTION_KEYS = (
    *ATTENTION_REQUIRED, variants.kv_heads.ATTENTION_KEY, *variants.biases.HEAD_KEYS, variants.sinks.ATTENTION_KEY,
    variants.softcap.KEY,
)
OUTPUT_KEYS = ("W_O", *variants.biases.OUTPUT_KEYS)
CONTEXT_KEYS = ("tokens", "X")
MASK_KEYS = ("kind", "pad", "allow", variants.window.MASK_KEY)
MASK_KINDS = ("none", "causal", "padding", "custom", "sliding")


class ScenarioError(Exception):
    """A scenario that cannot be loaded or computed; ``str()`` is ``<file>: <message>``."""

    def __init__(self, source: str, message: str) -> None:
        source, message = escaped(source), escaped(message)
        super().__init__(f"{source}: {message}")
        self.source = source
        self.message = message


@fixed
class Head:
    """One attention head's projections."""

    name: str
    W_Q: Matrix  # (d_model, d_k)
    W_K: Matrix  # (d_in, d_k)
    W_V: Matrix  # (d_in, d_v)
    # each optional key's ``not_plain``: what a head that has it makes the attention other than plain (core/diagnose.py)
    b_Q: Vector | None = field(default=None, metadata={"not_plain": "biases"})  # (d_k,) added to every Query row
    b_K: Vector | None = field(default=None, metadata={"not_plain": "biases"})  # (d_k,)
    b_V: Vector | None = field(default=None, metadata={"not_plain": "biases"})  # (d_v,)
    # what a key is to the tables that refuse it (core/variants/refusals.py): a part of the softmax (``softmax``),
    # a column that joins each row's sum (``joins_sum``), a step after the mix (``after_mix``), in their words
    sink: float | None = field(default=None, metadata={"not_plain": "sinks", "softmax": "a sink's logit",
                                                       "joins_sum": "a sink"})  # the attention sink's logit
    kv_head: int | None = None  # which K/V head it reads (GQA); None = its own index
    # c of c·tanh(scaled / c) before the bias and mask
    softcap: float | None = field(default=None, metadata={"not_plain": "soft-caps", "softmax": "a soft-cap"})
    # (d_model, d_v) the output gate's weights
    W_G: Matrix | None = field(default=None, metadata={"not_plain": "output gates", "after_mix": "an output gate"})

    @property
    def d_k(self) -> int:
        return int(self.W_Q.shape[1])

    @property
    def d_v(self) -> int:
        return int(self.W_V.shape[1])


@fixed(repr=True)
class Scenario:
    """A validated attention problem (docs/scenario-format.md)."""

    title: str
    description: str
    source: str  # the file's path as given, or "<built-in name>"; used in error lines
    tokens: tuple[str, ...]  # query labels, n
    X: Matrix  # (n, d_model)
    key_tokens: tuple[str, ...]  # key labels, m (= tokens unless cross-attention)
    context_X: Matrix | None  # (m, d_in) for cross-attention, else None
    mask_kind: str  # none | causal | padding | custom
    allow: BoolMatrix  # (n, m): True = query i may attend key j
    scale: float | None  # divisor set by the file; None = sqrt(d_k) per head
    heads: tuple[Head, ...]
    W_O: Matrix | None  # (sum d_v, d_out)
    num_heads_split: int | None  # set when heads came from [attention]
    norm: Norm | None = None  # [norm]: applied to X before the projections
    rope: Rope | None = None  # [rope]: rotates Q and K by position
    qk_norm: QKNorm | None = None  # [qk_norm]: RMSNorm of each query and key vector, before the rotation
    window: int | None = None  # the sliding window when mask_kind == "sliding"
    b_O: Vector | None = None  # (d_out,) added after W_O
    num_kv_heads: int | None = None  # set when [attention] shares K/V heads (GQA/MQA)
    production: ProductionSettings = field(default_factory=ProductionSettings)  # [tiles], [cache] (core/production.py)
    input: Input = field(default_factory=Input)  # what the rows of X are: embeddings, or a model's residual stream
    scale_from: str | None = None  # where a scenario's own scale comes from, in words (core/variants/scale_from.py)
    linear: Linear | None = None  # [linear]: linear attention in place of every head's softmax
    deltanet: DeltaNet | None = None  # [deltanet]: the gated delta rule in place of every head's softmax
    mla: Mla | None = None  # [mla]: DeepSeek's latent attention; ``heads`` then hold its per-head shapes
    backward: Backward | None = None  # [backward]: a loss (or dO) and the training steps on it
    # tokens a [model]'s tokenizer gave for its text, not labels the file wrote: a repeat is the sentence's own
    tokenized: bool = False
    # the tables of the parts registered with their faces ([value_scale], [differential], …), by key: read each
    # with its Table's ``of`` (core/variants/common.py), so a new part adds no field here
    parts: Mapping[str, Any] = field(default_factory=dict)

    @property
    def positions(self) -> tuple[int, ...] | None:
        """Token positions for RoPE and ALiBi: rope's, or 0 … n−1; None for cross-attention."""
        if self.is_cross:
            return None
        rope = self.rope if self.mla is None else self.mla.rope
        return rope.positions if rope is not None else tuple(range(self.n))

    def kv_head(self, h: int) -> int:
        """The K/V head that query head h reads (its own index unless heads share K/V)."""
        kv = self.heads[h].kv_head
        return h if kv is None else kv

    @cached_property
    def labels(self) -> tuple[str, ...]:
        """The query labels as every screen and explanation shows them: repeated ones told apart (``▁the₂``)."""
        return distinct_labels(self.tokens)

    @cached_property
    def key_labels(self) -> tuple[str, ...]:
        return self.labels if self.key_tokens is self.tokens else distinct_labels(self.key_tokens)

    @property
    def n(self) -> int:
        return len(self.tokens)

    @property
    def m(self) -> int:
        return len(self.key_tokens)

    @property
    def is_cross(self) -> bool:
        return self.context_X is not None

    @property
    def X_kv(self) -> Matrix:
        return self.context_X if self.context_X is not None else self.X

    def summary(self) -> str:
        """One line for ``--check``: what the file describes."""
        heads = len(self.heads)
        kind = "cross-attention" if self.is_cross else "self-attention"
        parts = [
            f"{self.title!r}",
            f"{self.n} token{'s' if self.n != 1 else ''}",
            f"d_model {self.X.shape[1]}",
            f"{heads} head{'s' if heads != 1 else ''} (d_k {'/'.join(dict.fromkeys(str(h.d_k) for h in self.heads))})",
            kind,
            f"mask {self.mask_kind}",
        ]
        if self.W_O is not None:
            parts.append("W_O")
        if self.scale is not None:
            parts.append(f"scale {self.scale:g}")
        parts.extend(variants.summary_parts(self))
        return ", ".join(parts)

    def warnings(self) -> list[str]:
        """Legal but probably unintended: ``--check`` prints each as a ``warning:`` line. Labels a file wrote
        that repeat may be a slip; a tokenizer's tokens repeat wherever the sentence repeats a word or a piece
        (the file cannot spell them otherwise, and the screens number them), so a [model]'s are not warned of."""
        found = []
        for key, labels, shown in (("tokens", () if self.tokenized else self.tokens, self.labels),
                                   ("[context] tokens", self.key_tokens if self.is_cross else (), self.key_labels)):
            places: dict[str, list[int]] = {}
            for i, label in enumerate(labels):
                places.setdefault(label, []).append(i + 1)
            repeated = [(label, items) for label, items in places.items() if len(items) > 1]
            if not repeated:
                continue
            # one line however many repeat (a real sentence repeats "the" and word pieces often)
            parts = [f"{_quote(label)} at items {', '.join(map(str, items[:4]))}{', …' if len(items) > 4 else ''}"
                     for label, items in repeated[:4]]
            more = f" and {len(repeated) - 4} more" if len(repeated) > 4 else ""
            example = ", ".join(shown[i - 1] for i in repeated[0][1][:2])
            verb = "labels repeat" if len(repeated) > 1 else "label repeats"
            found.append(f"{key}: {len(repeated)} {verb} ({'; '.join(parts)}{more});"
                         f" the screens tell them apart by occurrence ({example})")
        return found


_FIELDS = frozenset(f.name for f in dataclasses.fields(Scenario))


# --- locating files -------------------------------------------------------


def builtin_dir() -> Path:
    """Where the shipped scenarios live: inside the installed package, or in a source checkout."""
    package = Path(__file__).resolve().parent.parent
    packaged = package / "scenarios"  # the wheel carries them here (pyproject's force-include)
    return packaged if packaged.is_dir() else package.parent / "scenarios"


def builtin_names() -> list[str]:
    return sorted(p.stem for p in builtin_dir().glob("*.toml"))


def resolve(spec: str | Path) -> Path:
    """The file a SCENARIO argument names, in this order: the path as given; for a bare
    name, ``NAME.toml`` in the current folder; then the built-in scenario ``NAME``.
    Raises ScenarioError when checking a candidate fails for a reason other than absence."""
    path = Path(spec)
    text = str(spec)
    try:
        if stat_path(path) is not None:
            return path
        if "/" in text or "\\" in text or text in ("", ".", ".."):
            return path
        stem = text[:-5] if text.endswith(".toml") else text
        local = Path(f"{stem}.toml")
        if stem != text or stat_path(local) is None:
            candidate = builtin_dir() / f"{stem}.toml"
            return candidate if stat_path(candidate) is not None else path
        return local
    except ReadError as exc:
        raise ScenarioError(text, exc.message) from None


def load_scenario(spec: str | Path | Scenario) -> Scenario:
    """Load and validate a scenario from a path or a built-in name; raises ScenarioError."""
    if isinstance(spec, Scenario):
        return spec
    source = str(spec)
    path = resolve(spec)
    try:
        status = stat_path(path)
        if status is None:
            names = ", ".join(builtin_names())
            bare = "/" not in source and "\\" not in source
            stem = source[:-5] if source.endswith(".toml") else source
            looked = f", no {stem}.toml in this folder, and no built-in scenario of that name" if bare else ""
            raise ScenarioError(source, f"no such file{looked} (built-in scenarios: {names})")
        raw = read_bytes(path, status)
    except ReadError as exc:
        raise ScenarioError(source, exc.message) from None
    return parse_scenario(raw, source, default_title=escaped(path.stem), base=path.parent)


def parse_scenario(raw: bytes | str, source: str, default_title: str = "scenario", base: Path | None = None) -> Scenario:
    """Validate TOML text (bytes are decoded as UTF-8, with or without a BOM).

    ``base``: the file's folder, where a [model] table's relative model folder is found."""
    try:
        text = decode(raw) if isinstance(raw, bytes) else raw
        if not text.strip():
            raise ReadError("the file is empty; expected tokens, X and [[heads]] or [attention]")
        doc = parse_toml(text)
    except ReadError as exc:
        raise ScenarioError(source, exc.message) from None
    _plain_lists(doc)
    if "model" not in doc:
        return _Validator(source).scenario(doc, default_title)
    sc = _Validator(source).scenario(_expand_model(doc, source, base), default_title)
    return dataclasses.replace(sc, tokenized=True)


def _expand_model(doc: dict[str, Any], source: str, base: Path | None) -> dict[str, Any]:
    """A [model] table becomes the plain scenario data a file would hold, then is validated like one."""
    from qkv_tui.importers import ImporterError, expand_model  # the models extra loads only for a model

    try:
        return expand_model(doc, base)
    except ImporterError as exc:
        raise ScenarioError(source, str(exc)) from None


MATRIX_KEYS = frozenset({"X", "W_Q", "W_K", "W_V", "W_O", "allow"})


def _plain_lists(doc: dict[str, Any]) -> None:
    """Large number arrays come from the reader as NumberGrid (tomlfile); only matrix keys
    take them as they are. Anywhere else one gets tomllib's own lists, so every other
    rule (and its message) sees exactly what the file says."""
    for table, key, value in table_values(doc):
        if isinstance(value, NumberGrid) and key not in MATRIX_KEYS:
            table[key] = value.as_lists()


# --- where each key belongs -------------------------------------------------------


def key_tables() -> dict[str, tuple[str, ...]]:
    """Every table of the format and the keys it takes ("" is the top level)."""
    return {
        "": TOP_KEYS,
        "[[heads]]": HEAD_KEYS,
        "[attention]": ATTENTION_KEYS,
        "[output]": OUTPUT_KEYS,
        "[context]": CONTEXT_KEYS,
        "[mask]": MASK_KEYS,
        **{t.header: t.keys for t in variants.TABLES},
        "[tiles]": TILES_KEYS,
        "[cache]": CACHE_KEYS,
        "[input]": INPUT_KEYS,
        "[gate]": variants.gate.GATE_KEYS,
    }


TOP_TABLES = ("heads", "attention", "output", "context", "mask", *(t.key for t in variants.TABLES), "model", "tiles", "cache")
TOP_TABLES += (variants.gate.TABLE_KEY,)


def _misplaced(key: str, here: str, value: Any = None) -> str | None:
    """Where a key that does not belong in ``here`` does belong, in words; None if nowhere."""
    homes = [table for table, keys in key_tables().items() if table != here and key in keys]
    if not homes:
        return None
    if "" in homes and key in TOP_TABLES and isinstance(value, (dict, list)):
        # [heads.rope], rope = {...} or rope.layout = ... inside a table: a table put one level too deep
        header = "[[heads]]" if key == "heads" else f"[{key}]"
        inside = "a [[heads]] table" if here == "[[heads]]" else here
        return (f"{header} is a table of its own at the top level, one for the whole scenario;"
                f" write it under its own {header} header, not as [{here.strip('[]')}.{key}] or inside {inside}")
    if "" in homes:
        return (f"{key} is a top-level key; write it above the first [table] header"
                " (in TOML every key after a [header] belongs to that table)")
    tables = " or ".join(("a [[heads]] table" if t == "[[heads]]" else t) for t in homes)
    return f"{key} belongs in {tables}"


# --- validation -------------------------------------------------------------


class _Validator:
    """Turns a parsed TOML document into a Scenario, failing on the first broken rule."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, message: str) -> ScenarioError:
        return ScenarioError(self.source, message)

    def known(self, table: dict[str, Any], allowed: tuple[str, ...], where: str) -> None:
        for key in table:
            if key in allowed:
                continue
            place = f" in {where}" if where else ""
            same_but_case = [a for a in allowed if a.lower() == key.lower()]
            if same_but_case:
                raise self.fail(f"unknown key {_show(key)}{place}; did you mean {same_but_case[0]!r}? (keys are case-sensitive)")
            twin = variants.LOOKALIKES.get((where.split(" #")[0], key))
            if twin:
                raise self.fail(f"unknown key {_show(key)}{place}; did you mean {twin[0]!r}? ({twin[1]})")
            elsewhere = _misplaced(key, where.split(" #")[0], table[key])
            if elsewhere:
                raise self.fail(f"key {_show(key)} is not allowed{place}: {elsewhere}")
            hint = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
            suggestion = f"; did you mean {hint[0]!r}?" if hint else f"; expected one of: {', '.join(allowed)}"
            raise self.fail(f"unknown key {_show(key)}{place}{suggestion}")

    def string(self, value: Any, key: str, *, multiline: bool = False) -> str:
        if not isinstance(value, str):
            raise self.fail(f"{key} must be a string, got {_kind(value)}")
        bad = _unprintable(value, allow="\n\t" if multiline else "")
        if bad:
            raise self.fail(f"{key} contains {bad}; expected text that shows on one line" if not multiline
                            else f"{key} contains {bad}; expected printable text (new lines and tabs are fine)")
        return value

    def label(self, value: Any, key: str) -> str:
        text = self.string(value, key)
        if not text:
            raise self.fail(f"{key} is empty; every label needs at least one visible character")
        if not visible(text):
            raise self.fail(f"{key} is {_show(text)}, which shows nothing (only spaces or invisible characters);"
                            " every label needs at least one visible character")
        return text

    def labels(self, value: Any, key: str) -> tuple[str, ...]:
        if not isinstance(value, list) or not value:
            raise self.fail(f"{key} must be a non-empty list of strings, got {_kind(value)}")
        return tuple(self.label(item, f"{key} item {i + 1}") for i, item in enumerate(value))

    def matrix(self, value: Any, key: str, labels: tuple[str, ...] = ()) -> Matrix:
        if isinstance(value, NumberGrid):  # already numbers, rectangular; only finiteness is left
            bad = np.argwhere(~np.isfinite(value.values))
            if bad.size:
                r, c = (int(i) for i in bad[0])
                self.number(float(value.values[r, c]), f"{_row(key, r, labels)}, column {c + 1}")
            return value.values
        if isinstance(value, np.ndarray):  # an importer's own float64 matrix (expand_model); no file gives one
            return self.matrix(NumberGrid(value, False, ""), key, labels)
        if not isinstance(value, list) or not value:
            raise self.fail(f"{key} must be a non-empty list of rows (a 2-D array of numbers), got {_kind(value)}")
        width = None
        rows: list[list[float]] = []
        for r, row in enumerate(value):
            name = _row(key, r, labels)
            if not isinstance(row, list):
                raise self.fail(f"{name} must be a list of numbers, got {_kind(row)}")
            if not row:
                raise self.fail(f"{name} is empty; expected numbers")
            if width is None:
                width = len(row)
            elif len(row) != width:
                raise self.fail(
                    f"{key} is ragged: {_row('', r, labels).strip()} has {len(row)} numbers,"
                    f" {_row('', 0, labels).strip()} has {width}; every row needs the same count"
                )
            out: list[float] = []
            for c, item in enumerate(row):
                if isinstance(item, list):
                    raise self.fail(f"{name}, column {c + 1} is a list; {key} must be 2-D (rows of numbers)")
                out.append(self.number(item, f"{name}, column {c + 1}"))
            rows.append(out)
        array = np.array(rows, dtype=np.float64)
        array.setflags(write=False)
        return array

    def number(self, item: Any, where: str) -> float:
        if isinstance(item, bool) or not isinstance(item, (int, float)):
            raise self.fail(f"{where} must be a number, got {_kind(item)}")
        try:
            number = float(item)
        except OverflowError:
            raise self.fail(f"{where} is {_show(item)}, too large; expected a finite number (at most about 1.8e308)") from None
        if not math.isfinite(number):
            raise self.fail(f"{where} is {_show(item)}; expected a finite number")
        return number

    def scenario(self, doc: dict[str, Any], default_title: str) -> Scenario:
        self.known(doc, TOP_KEYS, "")
        title = self.label(doc["title"], "title") if "title" in doc else default_title
        description = self.string(doc.get("description", ""), "description", multiline=True)
        if "tokens" not in doc:
            raise self.fail("missing key 'tokens'; expected a list of token labels, e.g. tokens = [\"I\", \"love\", \"AI\"]")
        tokens = self.labels(doc["tokens"], "tokens")
        if "X" not in doc:
            raise self.fail(f"missing key 'X'; expected {_count(len(tokens), 'row')} of embeddings, one per token")
        X = self.matrix(doc["X"], "X", tokens)
        if X.shape[0] != len(tokens):
            raise self.fail(
                f"X has {_count(X.shape[0], 'row')} but there {_count(len(tokens), 'token', are=True)};"
                " expected one row per token"
            )
        d_model = X.shape[1]

        context_X = None
        key_tokens = tokens
        if "context" in doc:
            ctx = doc["context"]
            if not isinstance(ctx, dict):
                raise self.fail(f"context must be a table ([context]), got {_kind(ctx)}")
            self.known(ctx, CONTEXT_KEYS, "[context]")
            for need in CONTEXT_KEYS:
                if need not in ctx:
                    raise self.fail(f"[context] is missing {need!r}; cross-attention needs tokens and X for the key side")
            key_tokens = self.labels(ctx["tokens"], "[context] tokens")
            context_X = self.matrix(ctx["X"], "[context] X", key_tokens)
            if context_X.shape[0] != len(key_tokens):
                raise self.fail(
                    f"[context] X has {_count(context_X.shape[0], 'row')} but there"
                    f" {_count(len(key_tokens), 'context token', are=True)};"
                    " expected one row per context token"
                )
        d_in = context_X.shape[1] if context_X is not None else d_model
        d_in_name = "the width of [context] X" if context_X is not None else "d_model (the width of X)"

        mla = None
        if "mla" in doc:  # [mla] defines the heads itself (core/variants/mla.py, loaded with the first such file)
            from qkv_tui.core.variants import mla as latent

            latent.refuse_with(self, doc)
            variants.gate.no_table_with_built_heads(self, doc, latent.TABLE.header)
            mla = latent.read_mla(self, variants.table_of(self, doc, "mla") or {}, d_model)
        if mla is None:
            heads, split, kv_split = self.heads(doc, d_model, d_in, d_in_name)
        else:
            heads, split, kv_split = self.mla_heads(doc, mla), None, None
        W_O, b_O = self.output(doc, heads)
        scale = self.scale(doc)
        mask_kind, allow, window = self.mask(doc, tokens, key_tokens, context_X is not None)
        ctx = variants.Context(
            self, tokens, d_model, context_X is not None,
            tuple((f"head {i + 1}" + ("" if h.name == f"head {i + 1}" else f" ({_quote(h.name)})"),
                   h.d_k if mla is None else mla.d_rope)  # [mla]: [rope] turns the rotary parts only
                  for i, h in enumerate(heads)),
            mask_kind, allow, num_heads_split=split, num_kv_heads=kv_split,
            head_tables=heads,
            d_out=int(W_O.shape[1]) if W_O is not None else sum(h.d_v for h in heads), has_W_O=W_O is not None,
            weights=variants.backward_table.weights_of(heads, W_O, b_O),
            trainable=tuple(name for t in variants.TABLES if t.trainable is not None and isinstance(doc.get(t.key), dict)
                            for name in t.trainable(doc[t.key])),
            latent=None if mla is None else (mla.d_nope, mla.d_rope),
            trains=tuple(f.trains for f in variants.FEATURES if f.trains is not None),
        )
        tables = self.tables(doc, ctx)
        if tables.get("mla") is not None:  # its [rope] turns q_R and k_R only, so it is the [mla]'s, not every head's
            tables["rope"] = None
        # a table with no Scenario field of its name is kept in ``parts`` (core/variants/common.py Table.of)
        parts = {key: tables.pop(key) for key in list(tables) if key not in _FIELDS}
        parts = {key: value for key, value in parts.items() if value is not None}
        return Scenario(
            title=title, description=description, source=self.source,
            tokens=tokens, X=X, key_tokens=key_tokens, context_X=context_X,
            mask_kind=mask_kind, allow=allow, scale=scale, heads=heads, W_O=W_O,
            num_heads_split=split, **tables, parts=parts, window=window,
            b_O=b_O, num_kv_heads=kv_split, production=parse_production(doc, len(tokens), self.fail),
            input=parse_input(self, doc), scale_from=variants.scale_from.check(self, doc),
        )

    def tables(self, doc: dict[str, Any], ctx: variants.Context) -> dict[str, Any]:
        """Each variant table the file has, in the registry's order, by key (the Scenario field it fills); None where absent."""
        found: dict[str, Any] = {}
        for t in variants.TABLES:
            table = variants.table_of(self, doc, t.key)
            if table is not None:
                self.known(table, t.keys, t.header)
                ctx.earlier[t.key] = t.parse(table, ctx)
            found[t.key] = ctx.earlier.get(t.key)
        return found

    def mla_heads(self, doc: dict[str, Any], mla: Mla) -> tuple[Head, ...]:
        softcap = variants.softcap.parse_softcap(self, doc, "")
        with np.errstate(over="ignore", invalid="ignore"):
            weights = mla.head_weights()
        for h, (_, *products) in enumerate(weights):
            # the heads' shapes multiply the latent through: a product past float64 is named, not a NumPy warning
            q = "W_Q" if mla.W_Q is not None else "W_DQ·W_UQ"
            for what, M in zip((q, "W_DKV·W_UK", "W_DKV·W_UV"), products, strict=True):
                if not np.isfinite(M).all():
                    raise self.fail(f"[mla]'s {what} for head {h + 1} overflows float64; expected smaller"
                                    f" {' or '.join(what.split('·'))}")
        return tuple(Head(name, W_Q, W_K, W_V, softcap=softcap) for name, W_Q, W_K, W_V in weights)

    def heads(
        self, doc: dict[str, Any], d_model: int, d_in: int, d_in_name: str
    ) -> tuple[tuple[Head, ...], int | None, int | None]:
        softcap = variants.softcap.parse_softcap(self, doc, "")  # every head's, unless its table sets its own
        doc = variants.shared_kv_table.without_kv(self, doc, d_in)  # [shared_kv]: K and V are an earlier layer's
        has_heads, has_split = "heads" in doc, "attention" in doc
        if has_heads and has_split:
            raise self.fail("both [[heads]] and [attention] are given; expected exactly one way to define the heads")
        if not has_heads and not has_split:
            raise self.fail("no heads: expected [[heads]] tables (W_Q, W_K, W_V) or an [attention] table")
        if has_heads:
            raw = doc["heads"]
            if not isinstance(raw, list) or not all(isinstance(h, dict) for h in raw):
                raise self.fail("heads must be written as [[heads]] tables, each with W_Q, W_K and W_V")
            if not raw:
                raise self.fail("heads is empty; expected at least one [[heads]] table")
            variants.gate.no_table_with_heads(self, doc)
            result: list[Head] = []
            for i, table in enumerate(raw):
                where = f"[[heads]] #{i + 1}"
                self.known(table, HEAD_KEYS, where)
                name = self.label(table.get("name", f"head {i + 1}"), f"{where} name")
                mats = {}
                for role in ("W_Q", "W_K", "W_V"):
                    if role not in table:
                        raise self.fail(f"{where} is missing {role}; every head needs W_Q, W_K and W_V")
                    mats[role] = self.matrix(table[role], f"{where} {role}")
                self.check_projection(mats["W_Q"], mats["W_K"], mats["W_V"], where, d_model, d_in, d_in_name)
                d_k, d_v = mats["W_Q"].shape[1], mats["W_V"].shape[1]
                b_Q, b_K, b_V = (
                    variants.parse_bias(self, table, role, where, width, f"one per column of W_{role}")
                    for role, width in (("Q", d_k), ("K", d_k), ("V", d_v))
                )
                sink = variants.parse_sink(self, table, f"{where} sink")
                kv_head = variants.parse_kv_head(self, table, where, i, result, (mats["W_K"], mats["W_V"], b_K, b_V))
                cap = variants.softcap.parse_softcap(self, table, where, softcap)
                W_G = variants.gate.parse_head_gate(self, table, where, d_model, d_v)
                result.append(Head(name, mats["W_Q"], mats["W_K"], mats["W_V"], b_Q, b_K, b_V, sink=sink, kv_head=kv_head,
                                   softcap=cap, W_G=W_G))
            variants.gate.every_head_or_none(self, [h.W_G for h in result],
                                             [f"[[heads]] #{i + 1}" for i in range(len(result))])
            return tuple(result), None, None

        table = doc["attention"]
        if not isinstance(table, dict):
            raise self.fail(f"attention must be a table ([attention]), got {_kind(table)}")
        self.known(table, ATTENTION_KEYS, "[attention]")
        for need in ATTENTION_REQUIRED:
            if need not in table:
                raise self.fail(f"[attention] is missing {need!r}")
        count = table["num_heads"]
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise self.fail(f"[attention] num_heads must be a whole number >= 1, got {_kind(count)}{write_whole(count, 1)}")
        kv_count = variants.parse_num_kv_heads(self, table, count)
        mats = {role: self.matrix(table[role], f"[attention] {role}") for role in ("W_Q", "W_K", "W_V")}
        # grouped K/V heads make W_K narrower than W_Q: its width is checked per head below
        self.check_projection(
            mats["W_Q"], mats["W_K"], mats["W_V"], "[attention]", d_model, d_in, d_in_name, same_width=kv_count == count
        )
        for role, mat in mats.items():
            what, divisor = ("num_heads", count) if role == "W_Q" else ("num_kv_heads", kv_count)
            if kv_count == count:
                what = "num_heads"
            if mat.shape[1] % divisor:
                raise self.fail(
                    f"[attention] {role} has {mat.shape[1]} columns, which {what} = {_show(divisor)} does not divide;"
                    f" expected {what} × d_{'v' if role == 'W_V' else 'k'} columns"
                )
        d_k = mats["W_Q"].shape[1] // count
        d_v = mats["W_V"].shape[1] // kv_count
        if mats["W_K"].shape[1] // kv_count != d_k:
            raise self.fail(
                f"[attention] W_K has {mats['W_K'].shape[1]} columns; expected num_kv_heads × d_k = {kv_count} × {d_k}"
                f" (d_k = {d_k} from W_Q's {mats['W_Q'].shape[1]} columns over num_heads = {count})"
            )
        wide = {
            role: variants.parse_bias(self, table, role, "[attention]", heads_of * width, f"{what} × {name}")
            for role, heads_of, width, what, name in (
                ("Q", count, d_k, "num_heads", "d_k"), ("K", kv_count, d_k, "num_kv_heads", "d_k"),
                ("V", kv_count, d_v, "num_kv_heads", "d_v"),
            )
        }
        sinks = variants.parse_sinks(self, table, count)
        softcap = variants.softcap.parse_softcap(self, table, "[attention]", softcap)
        gates = variants.gate.parse_wide_gate(self, doc, d_model, count, d_v)

        def cut(array: Any, index: int, width: int) -> Any:
            if array is None:
                return None
            part = np.ascontiguousarray(array[..., index * width:(index + 1) * width])
            part.setflags(write=False)
            return part

        # each K/V slice is cut once, so the query heads that share it hold the very same arrays
        kv_parts = [
            (cut(mats["W_K"], kv, d_k), cut(mats["W_V"], kv, d_v), cut(wide["K"], kv, d_k), cut(wide["V"], kv, d_v))
            for kv in range(kv_count)
        ]
        heads = []
        for h in range(count):
            kv = variants.kv_head_of(h, count, kv_count)
            W_K, W_V, b_K, b_V = kv_parts[kv]
            heads.append(Head(
                f"head {h + 1}", cut(mats["W_Q"], h, d_k), W_K, W_V, cut(wide["Q"], h, d_k), b_K, b_V,
                sink=sinks[h], kv_head=kv, softcap=softcap, W_G=gates[h],
            ))
        return tuple(heads), count, (kv_count if kv_count != count else None)

    def check_projection(
        self, W_Q: Matrix, W_K: Matrix, W_V: Matrix, where: str, d_model: int, d_in: int, d_in_name: str,
        same_width: bool = True,
    ) -> None:
        if W_Q.shape[0] != d_model:
            raise self.fail(f"{where} W_Q has {W_Q.shape[0]} rows; expected d_model = {d_model} (the width of X)")
        for role, mat in (("W_K", W_K), ("W_V", W_V)):
            if mat.shape[0] != d_in:
                raise self.fail(f"{where} {role} has {mat.shape[0]} rows; expected {d_in_name} = {d_in}")
        if same_width and W_Q.shape[1] != W_K.shape[1]:
            raise self.fail(
                f"{where} W_Q has {W_Q.shape[1]} columns but W_K has {W_K.shape[1]};"
                " expected the same width d_k (Queries and Keys are dotted together)"
            )

    def output(self, doc: dict[str, Any], heads: tuple[Head, ...]) -> tuple[Matrix | None, Vector | None]:
        if "output" not in doc:
            return None, None
        table = doc["output"]
        if not isinstance(table, dict):
            raise self.fail(f"output must be a table ([output]), got {_kind(table)}")
        self.known(table, OUTPUT_KEYS, "[output]")
        if "W_O" not in table and "b_O" in table:
            raise self.fail("[output] b_O needs W_O beside it: the bias is added after the W_O projection")
        if "W_O" not in table:
            raise self.fail("[output] is missing 'W_O'")
        W_O = self.matrix(table["W_O"], "[output] W_O")
        total = sum(h.d_v for h in heads)
        if W_O.shape[0] != total:
            if len(heads) == 1:
                because = f"one per column of the head's output (d_v = {total})"
            else:
                widths = " + ".join(str(h.d_v) for h in heads)
                because = f"one per column of the {len(heads)} heads' outputs side by side (d_v {widths} = {total})"
            raise self.fail(f"[output] W_O has {W_O.shape[0]} rows; expected {total}, {because}")
        b_O = variants.parse_bias(self, table, "O", "[output]", W_O.shape[1], "one per column of W_O, d_out")
        return W_O, b_O

    def scale(self, doc: dict[str, Any]) -> float | None:
        if "scale" not in doc:
            return None
        return variants.positive(self, doc["scale"], "scale")

    def mask(
        self, doc: dict[str, Any], tokens: tuple[str, ...], key_tokens: tuple[str, ...], is_cross: bool = False
    ) -> tuple[str, BoolMatrix, int | None]:
        n, m = len(tokens), len(key_tokens)
        raw = doc.get("mask", "none")
        table: dict[str, Any]
        if isinstance(raw, str):
            table = {"kind": raw}
            where = "mask"
        elif isinstance(raw, dict):
            self.known(raw, MASK_KEYS, "[mask]")
            if "kind" not in raw:
                raise self.fail(f"[mask] is missing 'kind'; expected one of: {', '.join(MASK_KINDS)}")
            table = raw
            where = "[mask] kind"
        else:
            raise self.fail(f"mask must be a string or a [mask] table, got {_kind(raw)}")
        kind = table["kind"]
        if not isinstance(kind, str) or kind not in MASK_KINDS:
            hint = difflib.get_close_matches(kind, MASK_KINDS, n=1) if isinstance(kind, str) else []
            extra = f"; did you mean {hint[0]!r}?" if hint else ""
            raise self.fail(f"{where} = {_show(kind)} is not a mask kind; expected one of: {', '.join(MASK_KINDS)}{extra}")
        for extra_key, owner in (("pad", "padding"), ("allow", "custom"), ("window", "sliding")):
            if extra_key in table and kind != owner:
                raise self.fail(f"[mask] {extra_key} is only used with kind = {owner!r}, but kind = {kind!r}")

        allow = np.ones((n, m), dtype=bool)
        window = None
        if kind == "sliding":
            window = variants.parse_window(self, table, is_cross, short=where == "mask")
            allow = variants.sliding_allow(n, window)
        elif kind == "causal":
            if n != m:
                raise self.fail(f"a causal mask needs as many keys as queries, but there are {n} queries and {m} keys")
            allow = np.tril(allow)
        elif kind == "padding":
            if "pad" not in table:
                need = f"pad = [...], one true/false per key token ({m})"
                raise self.fail(_table_form("padding", "pad", need) if where == "mask" else f"mask kind 'padding' needs {need}")
            pad = table["pad"]
            if not isinstance(pad, list) or len(pad) != m:
                got = _count(len(pad), "flag") if isinstance(pad, list) else _kind(pad)
                raise self.fail(f"[mask] pad must have one true/false per key token: expected {m}, got {got}")
            for j, flag in enumerate(pad):
                if not isinstance(flag, bool):
                    raise self.fail(
                        f"[mask] pad item {j + 1} (key {_quote(key_tokens[j])}) must be true or false, got {_kind(flag)}"
                    )
            allow = np.tile(~np.array(pad, dtype=bool), (n, 1))
        elif kind == "custom":
            if "allow" not in table:
                need = f"allow = [[...]], {n} rows of {m} flags (1/true = may attend)"
                raise self.fail(_table_form("custom", "allow", need) if where == "mask" else f"mask kind 'custom' needs {need}")
            allow = self.custom_allow(table["allow"], tokens, key_tokens)
        for i in range(n):
            if not allow[i].any():
                raise self.fail(
                    f"with mask {kind!r}, query row {i + 1} ({_quote(tokens[i])}) may attend no key;"
                    " every query row needs at least one key it may attend"
                )
        allow.setflags(write=False)
        return kind, allow, window

    def custom_allow(self, rows: Any, tokens: tuple[str, ...], key_tokens: tuple[str, ...]) -> BoolMatrix:
        n, m = len(tokens), len(key_tokens)
        if isinstance(rows, NumberGrid):
            grid = rows.values
            if rows.integers and grid.shape == (n, m) and ((grid == 0) | (grid == 1)).all():
                fast: BoolMatrix = grid == 1
                return fast
            rows = rows.as_lists()  # something is wrong: find it with the file's own values
        if not isinstance(rows, list) or len(rows) != n:
            got = _count(len(rows), "row") if isinstance(rows, list) else _kind(rows)
            raise self.fail(f"[mask] allow must have one row per query token: expected {n}, got {got}")
        allow = np.ones((n, m), dtype=bool)
        for i, row in enumerate(rows):
            name = _row("[mask] allow", i, tokens)
            if not isinstance(row, list) or len(row) != m:
                got = _count(len(row), "flag") if isinstance(row, list) else _kind(row)
                raise self.fail(f"{name} must have one flag per key token: expected {m}, got {got}")
            for j, flag in enumerate(row):
                if isinstance(flag, bool) or (isinstance(flag, int) and flag in (0, 1)):
                    allow[i, j] = bool(flag)
                else:
                    raise self.fail(
                        f"{name}, column {j + 1} ({_quote(key_tokens[j])}) must be 1/0 or true/false, got {_kind(flag)}"
                    )
        return allow


# --- how values are named in messages -------------------------------------------------


def _count(number: int, noun: str, *, are: bool = False) -> str:
    """``1 row``, ``2 rows``; with ``are``: ``is 1 token``, ``are 2 tokens``."""
    text = f"{number} {noun}{'' if number == 1 else 's'}"
    return (("is " if number == 1 else "are ") + text) if are else text


def _quote(label: str) -> str:
    return json.dumps(label, ensure_ascii=False)


def _row(key: str, r: int, labels: tuple[str, ...]) -> str:
    """``X row 2 ("love")``: counted from 1, and named by its token where rows are tokens."""
    named = f" ({_quote(labels[r])})" if r < len(labels) else ""
    return f"{key} row {r + 1}{named}"


_CONTROL_NAMES = {"\n": "a new line", "\r": "a carriage return", "\t": "a tab", "\x1b": "an escape character"}
_BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
# Unicode's Cc (C0, DEL, C1), Zl and Zp, and the bidirectional overrides: what breaks a line
_BREAKS = "".join(map(chr, (*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029))) + _BIDI


@functools.lru_cache(maxsize=4)
def _breaking(allow: str) -> re.Pattern[str]:
    """One character class of every line-breaking character but ``allow``: a description of
    tens of megabytes is searched in C, not walked a character at a time in Python."""
    return re.compile("[" + "".join(re.escape(ch) for ch in _BREAKS if ch not in allow) + "]")


def _unprintable(text: str, allow: str = "") -> str | None:
    """The first character that would break a terminal line (with its code point), or None."""
    if text.isprintable():
        return None
    found = _breaking(allow).search(text)
    if found is None:
        return None
    ch = found.group()
    return f"{_CONTROL_NAMES.get(ch, 'a control character')} (U+{ord(ch):04X})"


def scenario_from_data(doc: dict[str, Any], source: str, default_title: str = "scenario") -> Scenario:
    """Validate plain scenario data (what a file parses to, a [model] table already expanded), as a file is."""
    return _Validator(source).scenario(doc, default_title)
