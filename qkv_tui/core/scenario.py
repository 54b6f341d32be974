"""Scenario files: TOML in, a frozen, validated :class:`Scenario` out.

The format is contracts §1. Every rule the loader enforces fails with a
:class:`ScenarioError` whose message names the file, the key and what was
expected, so the command line can print one clean line (contracts §4).
"""

from __future__ import annotations

import difflib
import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

Matrix = npt.NDArray[np.float64]
BoolMatrix = npt.NDArray[np.bool_]

TOP_KEYS = (
    "title", "description", "tokens", "X", "mask", "scale",
    "heads", "attention", "output", "context",
)
HEAD_KEYS = ("name", "W_Q", "W_K", "W_V")
ATTENTION_KEYS = ("num_heads", "W_Q", "W_K", "W_V")
OUTPUT_KEYS = ("W_O",)
CONTEXT_KEYS = ("tokens", "X")
MASK_KEYS = ("kind", "pad", "allow")
MASK_KINDS = ("none", "causal", "padding", "custom")


class ScenarioError(Exception):
    """A scenario that cannot be loaded or computed; ``str()`` is ``<file>: <message>``."""

    def __init__(self, source: str, message: str) -> None:
        super().__init__(f"{source}: {message}")
        self.source = source
        self.message = message


@dataclass(frozen=True, eq=False)
class Head:
    """One attention head's projections."""

    name: str
    W_Q: Matrix  # (d_model, d_k)
    W_K: Matrix  # (d_in, d_k)
    W_V: Matrix  # (d_in, d_v)

    @property
    def d_k(self) -> int:
        return int(self.W_Q.shape[1])

    @property
    def d_v(self) -> int:
        return int(self.W_V.shape[1])


@dataclass(frozen=True, eq=False)
class Scenario:
    """A validated attention problem (contracts §1)."""

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
        return ", ".join(parts)


# --- locating files -------------------------------------------------------


def builtin_dir() -> Path:
    """Where the shipped scenarios live: inside the installed package, or in a source checkout."""
    package = Path(__file__).resolve().parent.parent
    packaged = package / "scenarios"  # the wheel carries them here (pyproject's force-include)
    return packaged if packaged.is_dir() else package.parent / "scenarios"


def builtin_names() -> list[str]:
    return sorted(p.stem for p in builtin_dir().glob("*.toml"))


def resolve(spec: str | Path) -> Path:
    """A path as given, or a built-in scenario's bare name (``causal_mask``)."""
    path = Path(spec)
    if path.exists():
        return path
    text = str(spec)
    if "/" not in text and "\\" not in text:
        stem = text[:-5] if text.endswith(".toml") else text
        candidate = builtin_dir() / f"{stem}.toml"
        if candidate.is_file():
            return candidate
    return path


def load_scenario(spec: str | Path | Scenario) -> Scenario:
    """Load and validate a scenario from a path or a built-in name; raises ScenarioError."""
    if isinstance(spec, Scenario):
        return spec
    path = resolve(spec)
    source = str(spec)
    if not path.exists():
        names = ", ".join(builtin_names())
        raise ScenarioError(source, f"no such file (built-in scenarios: {names})")
    if path.is_dir():
        raise ScenarioError(source, "is a directory; expected a .toml scenario file")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ScenarioError(source, f"cannot read: {exc.strerror or exc}") from None
    return parse_scenario(raw, source, default_title=path.stem)


def parse_scenario(raw: bytes | str, source: str, default_title: str = "scenario") -> Scenario:
    """Validate TOML text (bytes are decoded as UTF-8, with or without a BOM)."""
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            line = raw.count(b"\n", 0, exc.start) + 1
            column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
            raise ScenarioError(
                source, f"line {line}, column {column}: not UTF-8 text (byte 0x{raw[exc.start]:02x}); save the file as UTF-8"
            ) from None
    else:
        text = raw
    if not text.strip():
        raise ScenarioError(source, "the file is empty; expected tokens, X and [[heads]] or [attention]")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(source, _toml_message(str(exc))) from None
    return _Validator(source).scenario(doc, default_title)


def _toml_message(msg: str) -> str:
    found = re.search(r"\(at line (\d+), column (\d+)\)", msg)
    if not found:
        found_eof = re.search(r"\(at end of document\)", msg)
        what = re.sub(r"\s*\(at end of document\)", "", msg)
        where = "at end of file" if found_eof else "somewhere"
        return f"TOML syntax error {where}: {what}"
    what = msg[: found.start()].strip()
    return f"line {found.group(1)}, column {found.group(2)}: TOML syntax error: {what}"


# --- validation -------------------------------------------------------------


class _Validator:
    """Turns a parsed TOML document into a Scenario, failing on the first broken rule."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, message: str) -> ScenarioError:
        return ScenarioError(self.source, message)

    def known(self, table: dict[str, Any], allowed: tuple[str, ...], where: str) -> None:
        for key in table:
            if key not in allowed:
                hint = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
                if not hint:
                    lowered = {a.lower(): a for a in allowed}
                    hint = [lowered[key.lower()]] if key.lower() in lowered else []
                suggestion = f"; did you mean {hint[0]!r}?" if hint else f"; expected one of: {', '.join(allowed)}"
                place = f" in {where}" if where else ""
                raise self.fail(f"unknown key {key!r}{place}{suggestion}")

    def string(self, value: Any, key: str) -> str:
        if not isinstance(value, str):
            raise self.fail(f"{key} must be a string, got {_kind(value)}")
        return value

    def labels(self, value: Any, key: str) -> tuple[str, ...]:
        if not isinstance(value, list) or not value:
            raise self.fail(f"{key} must be a non-empty list of strings, got {_kind(value)}")
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise self.fail(f"{key}[{i}] must be a string, got {_kind(item)}")
        return tuple(value)

    def matrix(self, value: Any, key: str) -> Matrix:
        if not isinstance(value, list) or not value:
            raise self.fail(f"{key} must be a non-empty list of rows (a 2-D array of numbers), got {_kind(value)}")
        width = None
        rows: list[list[float]] = []
        for r, row in enumerate(value):
            if not isinstance(row, list):
                raise self.fail(f"{key} row {r} must be a list of numbers, got {_kind(row)}")
            if not row:
                raise self.fail(f"{key} row {r} is empty; expected numbers")
            if width is None:
                width = len(row)
            elif len(row) != width:
                raise self.fail(f"{key} is ragged: row {r} has {len(row)} numbers, row 0 has {width}")
            out: list[float] = []
            for c, item in enumerate(row):
                where = f"{key}[{r}][{c}]"
                if isinstance(item, list):
                    raise self.fail(f"{where} is a list; {key} must be 2-D (rows of numbers)")
                if isinstance(item, bool) or not isinstance(item, (int, float)):
                    raise self.fail(f"{where} must be a number, got {_kind(item)}")
                try:
                    number = float(item)
                except OverflowError:
                    raise self.fail(f"{where} = {item} is too large; expected a finite number") from None
                if not math.isfinite(number):
                    raise self.fail(f"{where} is {item}; expected a finite number")
                out.append(number)
            rows.append(out)
        array = np.array(rows, dtype=np.float64)
        array.setflags(write=False)
        return array

    def scenario(self, doc: dict[str, Any], default_title: str) -> Scenario:
        self.known(doc, TOP_KEYS, "")
        title = self.string(doc.get("title", default_title), "title")
        description = self.string(doc.get("description", ""), "description")
        if "tokens" not in doc:
            raise self.fail("missing key 'tokens'; expected a list of token labels, e.g. tokens = [\"I\", \"love\", \"AI\"]")
        tokens = self.labels(doc["tokens"], "tokens")
        if "X" not in doc:
            raise self.fail(f"missing key 'X'; expected {len(tokens)} rows of embeddings, one per token")
        X = self.matrix(doc["X"], "X")
        if X.shape[0] != len(tokens):
            raise self.fail(f"X has {X.shape[0]} rows but there are {len(tokens)} tokens; expected one row per token")
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
            key_tokens = self.labels(ctx["tokens"], "context.tokens")
            context_X = self.matrix(ctx["X"], "context.X")
            if context_X.shape[0] != len(key_tokens):
                raise self.fail(
                    f"context.X has {context_X.shape[0]} rows but there are {len(key_tokens)} context tokens;"
                    " expected one row per context token"
                )
        d_in = context_X.shape[1] if context_X is not None else d_model
        d_in_name = "context.X's width" if context_X is not None else "d_model"

        heads, split = self.heads(doc, d_model, d_in, d_in_name)
        W_O = self.output(doc, heads)
        scale = self.scale(doc)
        mask_kind, allow = self.mask(doc, tokens, key_tokens)
        return Scenario(
            title=title, description=description, source=self.source,
            tokens=tokens, X=X, key_tokens=key_tokens, context_X=context_X,
            mask_kind=mask_kind, allow=allow, scale=scale, heads=heads, W_O=W_O,
            num_heads_split=split,
        )

    def heads(self, doc: dict[str, Any], d_model: int, d_in: int, d_in_name: str) -> tuple[tuple[Head, ...], int | None]:
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
            result = []
            for i, table in enumerate(raw):
                where = f"heads[{i}]"
                self.known(table, HEAD_KEYS, f"[[heads]] #{i + 1}")
                name = self.string(table.get("name", f"head {i + 1}"), f"{where}.name")
                mats = {}
                for role in ("W_Q", "W_K", "W_V"):
                    if role not in table:
                        raise self.fail(f"{where} (head {i + 1}) is missing {role}")
                    mats[role] = self.matrix(table[role], f"{where}.{role}")
                self.check_projection(mats["W_Q"], mats["W_K"], mats["W_V"], where, d_model, d_in, d_in_name)
                result.append(Head(name, mats["W_Q"], mats["W_K"], mats["W_V"]))
            return tuple(result), None

        table = doc["attention"]
        if not isinstance(table, dict):
            raise self.fail(f"attention must be a table ([attention]), got {_kind(table)}")
        self.known(table, ATTENTION_KEYS, "[attention]")
        for need in ATTENTION_KEYS:
            if need not in table:
                raise self.fail(f"[attention] is missing {need!r}")
        count = table["num_heads"]
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise self.fail(f"attention.num_heads must be a whole number >= 1, got {count!r}")
        mats = {role: self.matrix(table[role], f"attention.{role}") for role in ("W_Q", "W_K", "W_V")}
        self.check_projection(mats["W_Q"], mats["W_K"], mats["W_V"], "attention", d_model, d_in, d_in_name)
        for role, mat in mats.items():
            if mat.shape[1] % count:
                raise self.fail(
                    f"attention.{role} has {mat.shape[1]} columns, which num_heads = {count} does not divide;"
                    " expected num_heads * d_k columns"
                )
        d_k = mats["W_Q"].shape[1] // count
        d_v = mats["W_V"].shape[1] // count
        heads = []
        for h in range(count):
            parts = []
            for role, width in (("W_Q", d_k), ("W_K", d_k), ("W_V", d_v)):
                part = np.ascontiguousarray(mats[role][:, h * width:(h + 1) * width])
                part.setflags(write=False)
                parts.append(part)
            heads.append(Head(f"head {h + 1}", parts[0], parts[1], parts[2]))
        return tuple(heads), count

    def check_projection(
        self, W_Q: Matrix, W_K: Matrix, W_V: Matrix, where: str, d_model: int, d_in: int, d_in_name: str
    ) -> None:
        if W_Q.shape[0] != d_model:
            raise self.fail(f"{where}.W_Q has {W_Q.shape[0]} rows; expected d_model = {d_model} (the width of X)")
        for role, mat in (("W_K", W_K), ("W_V", W_V)):
            if mat.shape[0] != d_in:
                raise self.fail(f"{where}.{role} has {mat.shape[0]} rows; expected {d_in_name} = {d_in}")
        if W_Q.shape[1] != W_K.shape[1]:
            raise self.fail(
                f"{where}.W_Q has {W_Q.shape[1]} columns but W_K has {W_K.shape[1]};"
                " expected the same width d_k (Queries and Keys are dotted together)"
            )

    def output(self, doc: dict[str, Any], heads: tuple[Head, ...]) -> Matrix | None:
        if "output" not in doc:
            return None
        table = doc["output"]
        if not isinstance(table, dict):
            raise self.fail(f"output must be a table ([output]), got {_kind(table)}")
        self.known(table, OUTPUT_KEYS, "[output]")
        if "W_O" not in table:
            raise self.fail("[output] is missing 'W_O'")
        W_O = self.matrix(table["W_O"], "output.W_O")
        total = sum(h.d_v for h in heads)
        if W_O.shape[0] != total:
            widths = " + ".join(str(h.d_v) for h in heads)
            raise self.fail(f"output.W_O has {W_O.shape[0]} rows; expected the concatenated heads' width {widths} = {total}")
        return W_O

    def scale(self, doc: dict[str, Any]) -> float | None:
        if "scale" not in doc:
            return None
        value = doc["scale"]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(f"scale must be a number > 0, got {_kind(value)}")
        try:
            number = float(value)
        except OverflowError:
            raise self.fail(f"scale = {value} is too large; expected a finite number > 0") from None
        if not math.isfinite(number) or number <= 0:
            raise self.fail(f"scale = {value}; expected a finite number > 0")
        return number

    def mask(self, doc: dict[str, Any], tokens: tuple[str, ...], key_tokens: tuple[str, ...]) -> tuple[str, BoolMatrix]:
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
            where = "mask.kind"
        else:
            raise self.fail(f"mask must be a string or a [mask] table, got {_kind(raw)}")
        kind = table["kind"]
        if not isinstance(kind, str) or kind not in MASK_KINDS:
            hint = difflib.get_close_matches(str(kind), MASK_KINDS, n=1)
            extra = f"; did you mean {hint[0]!r}?" if hint else ""
            raise self.fail(f"{where} = {kind!r} is not a mask kind; expected one of: {', '.join(MASK_KINDS)}{extra}")
        for extra_key, owner in (("pad", "padding"), ("allow", "custom")):
            if extra_key in table and kind != owner:
                raise self.fail(f"mask.{extra_key} is only used with kind = {owner!r}, but kind = {kind!r}")

        allow = np.ones((n, m), dtype=bool)
        if kind == "causal":
            if n != m:
                raise self.fail(f"a causal mask needs as many keys as queries, but there are {n} queries and {m} keys")
            allow = np.tril(allow)
        elif kind == "padding":
            if "pad" not in table:
                raise self.fail(f"mask kind 'padding' needs pad = [...], one true/false per key token ({m})")
            pad = table["pad"]
            if not isinstance(pad, list) or len(pad) != m:
                got = f"{len(pad)} flags" if isinstance(pad, list) else _kind(pad)
                raise self.fail(f"mask.pad must have one true/false per key token: expected {m}, got {got}")
            for j, flag in enumerate(pad):
                if not isinstance(flag, bool):
                    raise self.fail(f"mask.pad[{j}] must be true or false, got {_kind(flag)}")
            allow = np.tile(~np.array(pad, dtype=bool), (n, 1))
        elif kind == "custom":
            if "allow" not in table:
                raise self.fail(f"mask kind 'custom' needs allow = [[...]], {n} rows of {m} flags (1/true = may attend)")
            rows = table["allow"]
            if not isinstance(rows, list) or len(rows) != n:
                got = f"{len(rows)} rows" if isinstance(rows, list) else _kind(rows)
                raise self.fail(f"mask.allow must have one row per query token: expected {n}, got {got}")
            for i, row in enumerate(rows):
                if not isinstance(row, list) or len(row) != m:
                    got = f"{len(row)} flags" if isinstance(row, list) else _kind(row)
                    raise self.fail(f"mask.allow row {i} must have one flag per key token: expected {m}, got {got}")
                for j, flag in enumerate(row):
                    if isinstance(flag, bool) or (flag in (0, 1) and isinstance(flag, int)):
                        allow[i, j] = bool(flag)
                    else:
                        raise self.fail(f"mask.allow[{i}][{j}] must be 1/0 or true/false, got {flag!r}")
        for i in range(n):
            if not allow[i].any():
                raise self.fail(
                    f"with mask {kind!r}, query {i} ({tokens[i]!r}) may attend no key;"
                    " every query row needs at least one allowed key"
                )
        allow.setflags(write=False)
        return kind, allow


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, str):
        return f"a string ({value!r})"
    if isinstance(value, (int, float)):
        return f"a number ({value})"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a table"
    return type(value).__name__
