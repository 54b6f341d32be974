"""Opening a model folder's files safely: regular files only, size-checked before a byte is read.

A name too long for the file system, a FIFO or a device named like a model file (an open for reading
would wait for a writer forever), or a config.json of gigabytes are each one error line. Every open
is non-blocking and re-checked on the open descriptor, so a FIFO swapped in after the check cannot
hang it either.
"""

from __future__ import annotations

import os
from pathlib import Path

from qkv_tui.base.files import FileError, NotRegularError, TooLargeError, UnreadableError, file_kind, open_checked, read_capped
from qkv_tui.importers.errors import ImporterError


def size_text(size: int) -> str:
    return f"{size / 2**20:,.0f} MiB" if size >= 2**20 else f"{size:,} bytes"


def status(path: Path) -> os.stat_result | None:
    """The path's status (links followed), or None when nothing is there."""
    try:
        return os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except ValueError:  # an embedded NUL
        raise ImporterError(f"{_name(path)}: cannot open: the path contains a NUL character") from None
    except OSError as exc:  # a name over the file system's limit (255 bytes a name on most), a loop of links
        raise ImporterError(f"{_name(path)}: cannot open: {exc.strerror or type(exc).__name__}") from None


def check_regular(path: Path, what: str) -> os.stat_result:
    """The status of a file that must be a regular file; refuses anything else without opening it."""
    found = status(path)
    if found is None:
        raise ImporterError(f"{_name(path)}: no such file; expected {what}")
    kind = file_kind(found.st_mode)
    if kind is not None:
        raise ImporterError(f"{_name(path)} is {kind}; expected {what} (a regular file)")
    return found


def open_regular(path: Path, what: str) -> int:
    """A descriptor of the regular file at ``path`` (the caller closes it), opened without blocking."""
    check_regular(path, what)
    try:
        return open_checked(path)
    except FileError as problem:
        raise _error(path, what, problem, 0) from None


def read_limited(path: Path, what: str, limit: int) -> bytes:
    """The whole file, refused by its size (before reading) when it is larger than ``limit`` bytes."""
    found = check_regular(path, what)
    try:
        return read_capped(path, found, limit)
    except FileError as problem:
        raise _error(path, what, problem, limit) from None


def _error(path: Path, what: str, problem: FileError, limit: int) -> ImporterError:
    if isinstance(problem, NotRegularError):  # swapped after the check
        return ImporterError(f"{_name(path)} is {problem.kind}; expected {what} (a regular file)")
    if isinstance(problem, TooLargeError):
        size = size_text(problem.size) if problem.size is not None else f"more than {size_text(limit)}"
        return ImporterError(f"{_name(path)} is {size}; expected {what} of at most {size_text(limit)}")
    assert isinstance(problem, UnreadableError)
    return ImporterError(f"{_name(path)}: cannot {problem.stage}: {problem.error.strerror or problem.error}")


def _name(path: Path) -> str:
    """A path as a message shows it: the file's name, shortened when it is absurdly long."""
    text = str(path.name or path)
    return text if len(text) <= 60 else text[:57] + "..."
