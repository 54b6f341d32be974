"""``--export worksheet --format pdf|html|markdown [--key separate] [--output FILE]``: the worksheet made,
rendered in its format and written, the key in its own file when asked (docs/worksheets.md).

Everything is rendered before anything is written, so a worksheet that cannot be made writes nothing.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import BinaryIO, TextIO

from qkv_tui.base.files import kind_at
from qkv_tui.base.values import escaped
from qkv_tui.edges.worksheet.content import WorksheetContent
from qkv_tui.edges.worksheet.sheet import sheet

FORMATS = ("markdown", "html", "pdf")
# non-blocking: a FIFO swapped in after the stat fails the open (ENXIO) rather than waiting for a reader for ever
WRITE_FLAGS = getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
SUFFIX = {"markdown": ".md", "html": ".html", "pdf": ".pdf"}


class OutputError(RuntimeError):
    """A worksheet that cannot be written (its one line says where and why)."""


def key_path(output: Path) -> Path:
    """Where ``--key separate`` writes the key: beside the worksheet, ``-key`` added to its name
    (``sheet.pdf`` -> ``sheet-key.pdf``, ``sheet`` -> ``sheet-key``)."""
    return output.with_name(f"{output.stem}-key{output.suffix}")


def render(ws: WorksheetContent, fmt: str, separate: bool) -> tuple[bytes, bytes | None]:
    """The worksheet's bytes in ``fmt``, and the key's when it goes in a file of its own."""
    if fmt == "markdown":
        from qkv_tui.edges.worksheet.render import markdown as md

        if not separate:
            return md.render(ws).encode("utf-8"), None  # the page as it has always been
        questions, key = md.render_parts(sheet(ws))
        return questions.encode("utf-8"), key.encode("utf-8")
    page = sheet(ws)
    if fmt == "html":
        from qkv_tui.edges.worksheet.render import html as web

        if not separate:
            return web.render(page).encode("utf-8"), None
        return web.render(page, "questions").encode("utf-8"), web.render(page, "key").encode("utf-8")
    from qkv_tui.edges.worksheet.render import typst as typ

    if not separate:
        return typ.pdf(typ.source(page)), None
    return typ.pdf(typ.source(page, "questions")), typ.pdf(typ.source(page, "key"))


def write(ws: WorksheetContent, fmt: str, separate: bool, output: str | None, stdout: TextIO | None = None) -> None:
    """Render and write: to ``output`` (and its key beside it), or to stdout."""
    sheet_bytes, key_bytes = render(ws, fmt, separate)
    if output is None:
        stream: TextIO = stdout if stdout is not None else sys.stdout
        if fmt == "pdf":
            buffer: BinaryIO = stream.buffer
            buffer.write(sheet_bytes)
            buffer.flush()
        else:
            stream.write(sheet_bytes.decode("utf-8"))
        return
    target = Path(output)
    files = [(target, sheet_bytes), *([(key_path(target), key_bytes)] if key_bytes is not None else [])]
    for path, _ in files:  # both refused before either is written
        _refuse_not_regular(path)
    for path, data in files:
        _write(path, data)


def _refuse_not_regular(path: Path) -> None:
    """A FIFO, device or socket where the worksheet goes: a FIFO would hold the write until a reader came."""
    kind = kind_at(path)
    if kind is not None and kind != "a directory":  # a folder: the open's own "Is a directory"
        raise OutputError(f"{escaped(str(path))}: cannot write the worksheet: it is {kind}, not a regular file;"
                          " expected a new file or a regular file to replace")


def _write(path: Path, data: bytes) -> None:
    """``data`` into ``path``, new or a regular file; never an open that waits."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | WRITE_FLAGS, 0o666)
        with os.fdopen(fd, "wb") as stream:
            stream.write(data)
    except OSError as exc:
        raise OutputError(f"{escaped(str(path))}: cannot write the worksheet: {exc.strerror or exc}") from None
