"""Opening a model folder's files safely: regular files only, size-checked before a byte is read.

A name too long for the file system, a FIFO or a device named like a model file (an open for reading
would wait for a writer forever), or a config.json of gigabytes are each one error line. Every open
is non-blocking and re-checked on the open descriptor, so a FIFO swapped in after the check cannot
hang it either.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from qkv_tui.importers.errors import ImporterError

O_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)


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


def not_regular(mode: int) -> str | None:
    """What a file that is not a regular file is, in words; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return (
        "a directory" if stat.S_ISDIR(mode)
        else "a named pipe (FIFO)" if stat.S_ISFIFO(mode)
        else "a character device" if stat.S_ISCHR(mode)
        else "a block device" if stat.S_ISBLK(mode)
        else "a socket" if stat.S_ISSOCK(mode)
        else "not a regular file"
    )


def check_regular(path: Path, what: str) -> os.stat_result:
    """The status of a file that must be a regular file; refuses anything else without opening it."""
    found = status(path)
    if found is None:
        raise ImporterError(f"{_name(path)}: no such file; expected {what}")
    kind = not_regular(found.st_mode)
    if kind is not None:
        raise ImporterError(f"{_name(path)} is {kind}; expected {what} (a regular file)")
    return found


def open_regular(path: Path, what: str) -> int:
    """A descriptor of the regular file at ``path`` (the caller closes it), opened without blocking."""
    check_regular(path, what)
    try:
        fd = os.open(path, O_FLAGS)
    except OSError as exc:
        raise ImporterError(f"{_name(path)}: cannot open: {exc.strerror or exc}") from None
    kind = not_regular(os.fstat(fd).st_mode)
    if kind is not None:  # swapped after the check
        os.close(fd)
        raise ImporterError(f"{_name(path)} is {kind}; expected {what} (a regular file)")
    return fd


def read_limited(path: Path, what: str, limit: int) -> bytes:
    """The whole file, refused by its size (before reading) when it is larger than ``limit`` bytes."""
    size = check_regular(path, what).st_size
    if size > limit:
        raise ImporterError(f"{_name(path)} is {size_text(size)}; expected {what} of at most {size_text(limit)}")
    fd = open_regular(path, what)
    chunks: list[bytes] = []
    total = 0
    try:
        while total <= limit:  # the file may grow after the stat: read one byte past the limit at most
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as exc:
        raise ImporterError(f"{_name(path)}: cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if total > limit:
        raise ImporterError(f"{_name(path)} is more than {size_text(limit)}; expected {what} of at most {size_text(limit)}")
    return b"".join(chunks)


def _name(path: Path) -> str:
    """A path as a message shows it: the file's name, shortened when it is absurdly long."""
    text = str(path.name or path)
    return text if len(text) <= 60 else text[:57] + "..."
