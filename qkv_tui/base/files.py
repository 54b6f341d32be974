"""Reading a file a person named, without trusting it: regular files only, refused by size before a
byte is read, and never a blocking open (a FIFO named like a scenario would wait for a writer forever).

The scenario loader, the config file and the model importers all read through here; each words the
problem in its own message, so the exceptions carry facts, not text.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

# Non-blocking, so that a FIFO swapped in after the stat cannot hang the open either.
OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)


def file_kind(mode: int) -> str | None:
    """What a file that is not a regular file is, in words ("a named pipe (FIFO)"); None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return ("a directory" if stat.S_ISDIR(mode)
            else "a named pipe (FIFO)" if stat.S_ISFIFO(mode)
            else "a character device" if stat.S_ISCHR(mode)
            else "a block device" if stat.S_ISBLK(mode)
            else "a socket" if stat.S_ISSOCK(mode)
            else "not a regular file")


def kind_at(path: Path) -> str | None:
    """What is at ``path`` when it is there and not a regular file, as file_kind words it; None for a regular
    file, or for nothing there (a write makes it) or a path the stat cannot reach (the open then says why)."""
    try:
        return file_kind(os.stat(path).st_mode)
    except (OSError, ValueError):
        return None


class FileError(Exception):
    """Why read_capped could not read a file; one of the three below."""


class NotRegularError(FileError):
    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind  # what it is instead, as file_kind words it


class TooLargeError(FileError):
    def __init__(self, size: int | None) -> None:
        super().__init__(size)
        self.size = size  # its size by the stat; None when it grew past the limit while being read


class UnreadableError(FileError):
    def __init__(self, stage: str, error: OSError) -> None:
        super().__init__(stage, error)
        self.stage = stage  # "open" or "read"
        self.error = error


def open_checked(path: Path) -> int:
    """A descriptor of the regular file at ``path`` (the caller closes it), re-checked once open."""
    try:
        fd = os.open(path, OPEN_FLAGS)
    except OSError as exc:
        raise UnreadableError("open", exc) from None
    kind = file_kind(os.fstat(fd).st_mode)
    if kind is not None:  # swapped after the caller's stat
        os.close(fd)
        raise NotRegularError(kind)
    return fd


def read_capped(path: Path, status: os.stat_result, limit: int) -> bytes:
    """The whole file at ``path`` (whose stat is ``status``), at most ``limit`` bytes."""
    kind = file_kind(status.st_mode)
    if kind is not None:
        raise NotRegularError(kind)
    if status.st_size > limit:
        raise TooLargeError(status.st_size)
    fd = open_checked(path)
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
        raise UnreadableError("read", exc) from None
    finally:
        os.close(fd)
    if total > limit:
        raise TooLargeError(None)
    return b"".join(chunks)
