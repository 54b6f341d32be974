"""Reading a scenario file without trusting it, and its TOML with a position in every error.

A scenario is a few bytes to a few tens of megabytes of text. Anything else a path can
name (a FIFO with no writer, /dev/zero, a multi-gigabyte log) is refused before it is read,
and the TOML reader's own failures (nesting deep enough to exhaust the stack, integers too
long to convert) become messages with a line and column, like its syntax errors.
"""

from __future__ import annotations

import functools
import os
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from qkv_tui.base.files import NotRegularError, TooLargeError, UnreadableError, read_capped
from qkv_tui.base.fixed import fixed
from qkv_tui.base.values import tame

if TYPE_CHECKING:
    import numpy.typing as npt

MAX_BYTES = 64 * 1024 * 1024  # 64 MiB: a 4,096 x 512 matrix at full precision is about 45 MB
MAX_BYTES_TEXT = "64 MiB"
_DEPTH_SHOWN = 64  # where a runaway nesting is reported; tomllib itself gives up near 500


class ReadError(Exception):
    """A file that cannot be read as TOML; ``message`` is the text after ``<file>: ``."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# --- the file -------------------------------------------------------------------------


def stat_path(path: Path) -> os.stat_result | None:
    """The file's status, or None when nothing is there; other failures are ReadError."""
    try:
        return os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except ValueError:  # an embedded NUL: no file can have that name
        raise ReadError("cannot open: the path contains a NUL character") from None
    except OSError as exc:  # a name too long, a folder without search permission, a loop of links
        raise ReadError(f"cannot open: {_reason(exc)}") from None


def _reason(exc: OSError) -> str:
    text = exc.strerror or type(exc).__name__
    if isinstance(exc, PermissionError):
        text += " (a folder on the path, or the file, is not readable by you)"
    return text


def _not_regular(kind: str) -> str:
    if kind == "a directory":
        return "is a directory; expected a .toml scenario file"
    return f"is {kind}, not a regular file; expected a .toml scenario file"


def _too_big(size: int) -> str:
    return f"is {size / 1e6:,.1f} MB; scenario files are limited to {MAX_BYTES_TEXT}"


def read_bytes(path: Path, status: os.stat_result) -> bytes:
    """The file's bytes, refusing anything that is not a regular file of at most MAX_BYTES."""
    try:
        return read_capped(path, status, MAX_BYTES)
    except NotRegularError as problem:
        raise ReadError(_not_regular(problem.kind)) from None
    except TooLargeError as problem:
        if problem.size is not None:
            raise ReadError(_too_big(problem.size)) from None
        raise ReadError(f"is more than {MAX_BYTES_TEXT}; scenario files are limited to {MAX_BYTES_TEXT}") from None
    except UnreadableError as problem:
        raise ReadError(f"cannot {problem.stage}: {_reason(problem.error)}") from None


def decode(raw: bytes) -> str:
    """UTF-8 text, with or without a byte-order mark; otherwise the first bad byte's position."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ReadError(
            f"line {line}, column {column}: not UTF-8 text (byte 0x{raw[exc.start]:02x}); save the file as UTF-8"
        ) from None


# --- the TOML -------------------------------------------------------------------------


def parse_toml(text: str) -> dict[str, Any]:
    """tomllib's document, with every failure turned into a ReadError with a position.
    Large 2-D arrays of plain decimal numbers arrive as NumberGrid (see below)."""
    try:
        doc = _with_grids(text)
    except tomllib.TOMLDecodeError as exc:
        raise ReadError(syntax_message(text, str(exc))) from None
    except RecursionError:
        raise ReadError(_nesting_message(text)) from None
    except ValueError as exc:  # int() refuses more than sys.get_int_max_str_digits() digits
        raise ReadError(_long_integer_message(text, exc)) from None
    # an integer too long to print formats as its description (base/values.py); large matrices
    # are NumberGrids by now, so the walk sees only what tomllib itself built, for far less
    tamed: dict[str, Any] = tame(doc)
    return tamed


# One pass over TOML that knows strings and comments: brackets inside them do not count.
# TOML's four kinds of string, each written as one possessive run of a character class
# between its rare exceptions (an escape, a lone quote), so that a string of tens of
# megabytes is matched in one pass of C with constant memory; ``(?:a|b)*`` would take a
# backtracking frame per character (7 GB and half a minute for a 52 MB description).
_MULTI_BASIC = r'"""[^"\\]*+(?:(?:\\.|"(?!""))[^"\\]*+)*+"{3,5}'
_MULTI_LITERAL = r"'''[^']*+(?:'(?!'')[^']*+)*+'{3,5}"
_BASIC = r'"[^"\\\n]*+(?:\\.[^"\\\n]*+)*+"'
_LITERAL = r"'[^'\n]*+'"
_STRINGS = f"{_MULTI_BASIC}|{_MULTI_LITERAL}|{_BASIC}|{_LITERAL}"

# The patterns below are compiled the first time they are used (a syntax error's message, a file of 4,096
# characters or more): a scenario tomllib reads alone, as it reads every built-in one, needs none of them,
# and compiling them took a millisecond of every start.


@functools.cache
def _lex() -> re.Pattern[str]:
    return re.compile(
        rf"""
        (?P<comment>\#[^\n]*+)
        | (?P<string>{_MULTI_BASIC}|{_MULTI_LITERAL})
        | (?P<unclosed>\"\"\"|''')
        | (?P<string1>{_BASIC}|{_LITERAL})
        | (?P<unclosed1>["'])
        | (?P<open>[\[{{])
        | (?P<close>[\]}}])
        | (?P<other>[^\s\#"'\[\]{{}}]++)
        """,
        re.VERBOSE | re.DOTALL,
    )


class _Scan:
    """What the lexer saw in a prefix of the text: open brackets, a runaway string, the last value."""

    def __init__(self, text: str, end: int) -> None:
        self.stack: list[int] = []  # offsets of the open '[' and '{'
        self.unclosed_string: int | None = None
        self.last_end = 0  # just past the last thing that is not a comment or white space
        self.deepest: int | None = None  # the first opener past _DEPTH_SHOWN levels
        for match in _lex().finditer(text, 0, end):
            kind = match.lastgroup
            if kind == "comment":
                continue
            if kind in ("unclosed", "unclosed1"):
                self.unclosed_string = match.start()
                break
            if kind == "open":
                self.stack.append(match.start())
                if len(self.stack) > _DEPTH_SHOWN and self.deepest is None:
                    self.deepest = match.start()
            elif kind == "close" and self.stack:
                self.stack.pop()
            self.last_end = match.end()


def position(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of a character offset."""
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def _at(text: str, offset: int) -> str:
    line, column = position(text, offset)
    return f"line {line}, column {column}"


def syntax_message(text: str, message: str) -> str:
    """tomllib's message, placed where the mistake is (not where tomllib noticed it)."""
    found = re.search(r"\s*\(at line (\d+), column (\d+)\)$", message)
    at_end = message.endswith("(at end of document)")
    what = message[: found.start()] if found else re.sub(r"\s*\(at end of document\)$", "", message)
    if found:
        line, column = int(found.group(1)), int(found.group(2))
        lines = text.split("\n", line)
        offset = sum(len(part) + 1 for part in lines[: line - 1]) + column - 1
    else:
        offset = len(text)
    unclosed = what.startswith(("Unclosed array", "Unclosed inline table"))
    declared = re.fullmatch(r"Cannot declare \((.*?),?\) twice", what)
    if (declared or what == "Cannot overwrite a value" or what.startswith("Cannot mutate immutable")) and found:
        twice = _given_twice(text, offset)
        if twice:
            return twice
    if declared:
        name = ".".join(part.strip().strip("'\"") for part in declared.group(1).split(","))
        what = f"the table [{name}] is declared twice; expected one [{name}] header (or [[{name}]] for a list of tables)"
    # a one-line string that runs into the end of its line: tomllib names the new line, not the string
    if at_end or unclosed or what.startswith("Unterminated string") or what == "Illegal character '\\n'":
        scan = _Scan(text, offset)
        if scan.unclosed_string is not None:
            quote = text[scan.unclosed_string: scan.unclosed_string + 3]
            quote = quote if quote in ('"""', "'''") else quote[0]
            return (f"{_at(text, scan.unclosed_string)}: TOML syntax error: the string that starts here"
                    f" is never closed; expected a closing {quote}")
        if scan.stack:
            opener = scan.stack[-1]
            name, closer = ("array", "]") if text[opener] == "[" else ("inline table", "}")
            if at_end:
                return (f"{_at(text, opener)}: TOML syntax error: the file ends inside the {name} that"
                        f" opens here; expected '{closer}'")
            if closer == "}":
                return (f"{_at(text, scan.last_end)}: TOML syntax error: expected ',' or '}}' here; an inline"
                        f" table must close on the line where it opens (at {_at(text, opener)})")
            # tomllib notices at the next value, often on the next line; the fix goes after the last one
            return (f"{_at(text, scan.last_end)}: TOML syntax error: expected ',' or '{closer}' here"
                    f" (the {name} opened at {_at(text, opener)} continues at {_at(text, offset)})")
    if at_end:
        return f"{_at(text, offset)} (the end of the file): TOML syntax error: {what}"
    return f"{_at(text, offset)}: TOML syntax error: {what}"


_KEY_PART = r"""(?:[A-Za-z0-9_-]+|"(?:[^"\\\n]|\\.)*"|'[^'\n]*')"""
_KEY_PATH = rf"{_KEY_PART}(?:[ \t]*\.[ \t]*{_KEY_PART})*"


@functools.cache
def _header() -> re.Pattern[str]:
    return re.compile(rf"(\[\[?)[ \t]*({_KEY_PATH})[ \t]*\]")


@functools.cache
def _assign() -> re.Pattern[str]:
    return re.compile(rf"({_KEY_PATH})[ \t]*=[ \t]*(\{{)?")


@fixed
class _Statement:
    """A table header or a key = value line, as the file writes it."""

    line: int
    kind: str  # "table" ([a.b]), "array" ([[a.b]]) or "key" (a.b = ...)
    path: tuple[str, ...]  # the full dotted path: the header's, or the key's table's and the key's
    table: tuple[str, ...]  # for a key: the table it sits in
    written: str  # the key or header path as written
    inline: bool = False  # a key whose value is an inline table { ... }

    def form(self, name: tuple[str, ...]) -> str:
        """How this statement gives ``name`` (its own path or a prefix of it), in words."""
        header = f"[{self.written}]" if self.kind == "table" else f"[[{self.written}]]"
        if self.path != name:
            return f"as a table, by {self.written} = …" if self.kind == "key" else f"as a table, by {header}"
        if self.kind != "key":
            return f"as the table {header}" if self.kind == "table" else f"as the list of tables {header}"
        return f"as the inline table {self.written} = {{…}}" if self.inline else f"as {self.written} = …"


def _key_parts(written: str) -> tuple[str, ...]:
    parts = re.findall(_KEY_PART, written)
    return tuple(tomllib.loads(f"k = {part}")["k"] if part[0] in "\"'" else part for part in parts)


def _statements(text: str, end: int) -> list[_Statement]:
    """Every header and key line that starts before ``end`` (brackets and strings understood)."""
    found: list[_Statement] = []
    table: tuple[str, ...] = ()
    depth = 0
    skip = 0
    line, counted = 1, 0  # the line number at offset ``counted``
    for match in _lex().finditer(text, 0, end):
        kind, start = match.lastgroup, match.start()
        if kind == "comment" or start < skip:
            continue
        if kind in ("unclosed", "unclosed1"):
            break
        if depth == 0 and not text[text.rfind("\n", 0, start) + 1:start].strip():
            header = _header().match(text, start) if kind == "open" and text[start] == "[" else None
            assign = _assign().match(text, start) if header is None else None
            line += text.count("\n", counted, start)
            counted = start
            if header is not None:
                table = _key_parts(header.group(2))
                array = header.group(1) == "[["
                if array and any(s.kind == "array" and s.path == table for s in found):
                    # a new element of the list: what the previous element held is no longer in the way
                    found = [s for s in found if len(s.path) <= len(table) or s.path[: len(table)] != table]
                found.append(_Statement(line, "array" if array else "table", table, table, header.group(2)))
                skip = header.end() + (1 if array else 0)
                continue
            if assign is not None:
                found.append(_Statement(line, "key", table + _key_parts(assign.group(1)), table, assign.group(1),
                                        inline=assign.group(2) is not None))
        if kind == "open":
            depth += 1
        elif kind == "close" and depth:
            depth -= 1
    return found


def _given_twice(text: str, offset: int) -> str | None:
    """A key or table given twice (tomllib's bare "Cannot overwrite a value" and "Cannot declare
    twice"): the statement at fault, where the same name was given first, and in which forms."""
    statements = _statements(text, offset + 1)
    if not statements:
        return None
    here, earlier = statements[-1], statements[:-1]
    for first in earlier:
        shorter = min(first.path, here.path, key=len)
        if first.path[: len(shorter)] != here.path[: len(shorter)]:
            continue
        if first.kind != "key" and len(first.path) < len(here.path):
            continue  # [a] then [a.b] or a key in [a]: what tables are for
        if first.kind == here.kind == "array" and first.path == here.path:
            continue
        at = f"line {here.line}: TOML syntax error: "
        if first.kind == here.kind == "key" and first.path == here.path and first.table == here.table:
            return f"{at}{here.written} is given twice in this table (first at line {first.line}); expected each key once"
        name = ".".join(shorter)
        if first.kind == here.kind == "table" and first.path == here.path:
            return (f"{at}the table [{name}] is declared twice (first at line {first.line}); expected one [{name}]"
                    f" header (or [[{name}]] for a list of tables)")
        hint = ' (mask = "causal" is short for a [mask] table with kind = "causal")' if name == "mask" else ""
        return (f"{at}{name} is given twice, {first.form(shorter)} at line {first.line} and {here.form(shorter)}"
                f" here; expected one of the two{hint}")
    return None


def _nesting_message(text: str) -> str:
    scan = _Scan(text, len(text))
    where = f"{_at(text, scan.deepest)}: " if scan.deepest is not None else ""
    return (f"{where}arrays or tables nested more than {_DEPTH_SHOWN} levels deep;"
            " a scenario needs at most 3 (a matrix is a list of rows)")


@functools.cache
def _long_integer() -> re.Pattern[str]:
    return re.compile(r"(?<![\w.])[+-]?[0-9][0-9_]{999,}")


def _long_integer_message(text: str, exc: ValueError) -> str:
    found = _long_integer().search(text)
    if found is None:
        return f"the TOML reader failed: {exc}"
    digits = sum(ch.isdigit() for ch in found.group())
    return (f"{_at(text, found.start())}: an integer of {digits:,} digits; numbers must fit a float64"
            " (at most 309 digits, about 1.8e308)")


# --- large matrices, read without tomllib ---------------------------------------------
#
# tomllib is pure Python: a 45 MB scenario (a 4,096 x 512 X) took 14 s of a 17 s --check.
# A matrix written as rows of plain decimal numbers is recognised with one regular
# expression that accepts only what TOML accepts, converted by NumPy, and replaced in
# the text by a unique integer marker that keeps every line (and every column after
# it) where it was; tomllib then reads the rest. A file that is not valid TOML is read
# again by tomllib alone, so its errors and their positions are exactly tomllib's.
# Anything unusual in an array (comments, underscores, hex, inf, a ragged row, a long
# integer) leaves that array to tomllib.

_FAST_MIN_CHARS = 4096  # below this tomllib is quick enough, and exactness is easiest
_WS = r"(?:[ \t]|\r?\n)*+"
# TOML's decimal integer and float (an integer part of at most 300 digits: longer ones
# are left to tomllib, whose integer the validator names as too large)
_NUM = r"[+-]?(?:0|[1-9][0-9]{0,299})(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
_ROW = rf"\[{_WS}{_NUM}(?:{_WS},{_WS}{_NUM})*+{_WS},?{_WS}\]"
_GRID = rf"\[{_WS}{_ROW}(?:{_WS},{_WS}{_ROW})*+{_WS},?{_WS}\]"


@functools.cache
def _grid_pattern() -> re.Pattern[str]:
    """_GRID compiled when a file first needs it (one of 4,096 characters or more): compiling it takes about
    2 ms, which every start-up would pay for a built-in scenario that tomllib reads alone."""
    return re.compile(_GRID)


@functools.cache
def _line_end() -> re.Pattern[str]:
    return re.compile(r"[ \t]*(?:\#[^\n]*)?(?:\r?\n|\Z)")


# What can come before a matrix: strings and comments (skipped whole, so that text
# inside them is never taken for a key), or a `key = [[` at the start of a line
# (never inside an inline table or an array, where TOML puts no line start).
@functools.cache
def _scan() -> re.Pattern[str]:
    return re.compile(
        rf"""
        (?P<skip>\#[^\n]*+ | {_STRINGS})
        | (?P<stop>["'])
        | ^[ \t]*[A-Za-z0-9_-]+(?:[ \t]*\.[ \t]*[A-Za-z0-9_-]+)*[ \t]*=[ \t]*(?P<grid>\[(?:[ \t]|\r?\n)*\[)
        """,
        re.VERBOSE | re.DOTALL | re.MULTILINE,
    )


# An integer -0 (also matches an exponent "e-0", which only costs the fast path)
@functools.cache
def _integer_minus_zero() -> re.Pattern[str]:
    return re.compile(r"-0(?![0-9.eE])")


_MARKER = "7316029485731602948573160"  # 25 digits, then 6 of index: far beyond any real value


@fixed
class NumberGrid:
    """A large matrix of decimal numbers read straight into NumPy.

    ``values`` is what tomllib's numbers would give as floats, bit for bit; ``integers``
    says every number was written as an integer. ``as_lists()`` gives tomllib's own
    nested lists, for a consumer that needs exactly what the file says (a mask)."""

    values: npt.NDArray[np.float64]
    integers: bool
    text: str

    def as_lists(self) -> list[Any]:
        value: list[Any] = tame(tomllib.loads("v = " + self.text)["v"])
        return value


def _grid(span: str) -> NumberGrid | None:
    integers = not any(ch in span for ch in ".eE")
    if not integers and _integer_minus_zero().search(span):
        return None  # an integer -0 among floats: tomllib's +0.0 is not worth a special case
    rows = [part.split("]", 1)[0] for part in span.split("[")[2:]]  # the grammar matched: no brackets elsewhere
    values = np.empty((0, 0), dtype=np.float64)
    width = None
    for i, body in enumerate(rows):
        body = body.strip(" \t\r\n")
        if body.endswith(","):
            body = body[:-1]
        count = body.count(",") + 1
        if width is None:
            width = count
            values = np.empty((len(rows), width), dtype=np.float64)
        elif count != width:
            return None  # ragged: tomllib's lists, and the validator's message
        parsed = np.fromstring(body, dtype=np.float64, sep=",")
        if parsed.shape[0] != width:
            return None
        values[i] = parsed
    if integers and "-0" in span:
        values[values == 0] = 0.0  # tomllib's -0 is the integer 0, not the float -0.0
    values.setflags(write=False)
    return NumberGrid(values, integers, span)


def _with_grids(text: str) -> dict[str, Any]:
    if len(text) < _FAST_MIN_CHARS or _MARKER in text:
        return tomllib.loads(text)
    grids: dict[int, NumberGrid] = {}
    pieces: list[str] = []
    done = 0
    scan = _Lines(text)
    for candidate in _grid_start().finditer(text):
        start = candidate.end() - 1 - len(candidate.group("inner"))  # the outer '['
        if start < done:
            continue  # inside a matrix already taken
        match = _grid_pattern().match(text, start)
        if match is None or match.end() - start < _FAST_MIN_CHARS or not _line_end().match(text, match.end()):
            continue  # small matrices are left to tomllib: no need to know where they sit
        where = scan.grid_at(start)
        if where == "stop":  # an unterminated string before it: tomllib will say where
            return tomllib.loads(text)
        if where != "key":
            continue  # inside a string or a comment, or not a key = [[ line
        span = match.group()
        grid = _grid(span)
        scan.pos = match.end()
        if grid is None:
            continue
        marker = f"{_MARKER}{len(grids):06d}"
        grids[int(marker)] = grid
        lines = span.count("\n")
        tail = len(span) - span.rfind("\n") - 1 if lines else len(span) - len(marker)
        pieces += [text[done:start], marker, "\n" * lines, " " * max(tail, 0)]
        done = match.end()
    if not grids:
        return tomllib.loads(text)
    pieces.append(text[done:])
    try:
        doc = tomllib.loads("".join(pieces))
    except (ValueError, RecursionError):
        # The original text fails too (the grids were valid TOML): let tomllib report it there,
        # since a position just after a marker is not the position just after its matrix.
        return tomllib.loads(text)
    _put_back(doc, grids)
    return doc


# Where a large matrix may start: found in C over the whole text, so that a file whose only
# matrices are small (a long description and a 3 x 4 X) is never scanned string by string.
@functools.cache
def _grid_start() -> re.Pattern[str]:
    return re.compile(r"=[ \t]*\[(?P<inner>(?:[ \t]|\r?\n)*\[)")


class _Lines:
    """The scan of the text for strings, comments and key lines, run only as far as needed."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0  # everything before this is scanned

    def grid_at(self, start: int) -> str:
        """"key" when the matrix at ``start`` is the value of a ``key = [[`` line; "stop" at an
        unterminated string before it; "no" inside a string or a comment, or elsewhere."""
        while True:
            found = _scan().search(self.text, self.pos)
            if found is None or found.start() > start:
                return "no"
            if found.lastgroup == "stop":
                return "stop"
            if found.lastgroup == "grid" and found.start("grid") >= start:
                if found.start("grid") > start:
                    return "no"
                self.pos = found.end()
                return "key"
            self.pos = found.end()
            if found.end() > start:
                return "no"  # the candidate is inside this string or comment


def table_values(doc: dict[str, Any]) -> Iterator[tuple[dict[str, Any], str, Any]]:
    """Every (table, key, value) whose value is not itself a table, in every table and array of
    tables. Assigning ``table[key]`` while iterating is safe: no key is added or removed."""
    tables: list[dict[str, Any]] = [doc]
    while tables:
        table = tables.pop()
        for key, value in table.items():
            if isinstance(value, dict):
                tables.append(value)
            elif isinstance(value, list):
                tables.extend(item for item in value if isinstance(item, dict))
            yield table, key, value


def _put_back(doc: dict[str, Any], grids: dict[int, NumberGrid]) -> None:
    """Replace each marker by its grid; markers sit only in tables (a key = value line)."""
    for table, key, value in table_values(doc):
        if type(value) is int and value in grids:
            table[key] = grids[value]
