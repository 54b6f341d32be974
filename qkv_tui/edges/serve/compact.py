"""The app starter's memory laid out before it forks, so that each forked app copies fewer of its pages.

A forked app shares every page of the app starter (zygote.py) until it writes to it; then the page
is copied whole, 4 KiB of the student's own. CPython 3.11 writes to an object whenever it is used
(its reference count), and to a function's code as it runs (the adaptive interpreter's counters), so a
page is copied for any object on it that an app's start uses, or for any free block on it that an app's
start fills. Two things make an app's start copy fewer pages, both measured with
benchmarks/serve_cost.py (the figures are in benchmarks/README.md):

- ``fill_free_blocks``: the blocks left free between the starter's objects (by its imports and warm-up)
  are filled with ballast that no app ever reads. An app's new objects then go to fresh memory, packed
  together, instead of one here and one there into hundreds of the starter's pages. The ballast is
  shared by every app: it costs the starter, once.
- ``pack_code``: the code the first frame runs (recorded by ``calls``, during the starter's warm-up)
  gets copies of its code objects made one after the other, in the order it first ran, so that an app
  running it copies the few pages they fill, instead of the pages, all over the starter's memory, that
  each was made on at import beside objects the app never touches. A function keeps its identity
  (only its ``__code__`` is the copy); the copies run as the originals do. The starter then draws a
  second first frame, so that the copies are specialised once, there, before any fork (zygote.preload).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import re
import sys
import tempfile
import threading
import types
from collections.abc import Iterator
from typing import Any

# What fills the free blocks; never read, never freed (a freed block would be one to fill again).
BALLAST: list[object] = []
MALLOC_BALLAST: list[int] = []  # addresses from the C library's malloc
PYMALLOC_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*$", re.MULTILINE)
MALLOC_SIZE = re.compile(r'<size from="(\d+)" to="(\d+)" total="\d+" count="(\d+)"/>')
TCACHE_SIZES = range(32, 1041, 16)  # glibc's per-thread cache: chunks of these sizes, up to 7 each
TCACHE_COUNT = 7
POOL = 16384  # bytes in one of pymalloc's pools (CPython 3.10 and later)
LARGEST_HOLE = 1 << 17  # chunks this size and above are the C library's own to give back; left alone


@contextlib.contextmanager
def calls(called: dict[int, types.CodeType]) -> Iterator[dict[int, types.CodeType]]:
    """The code objects of every Python function called in the block (any thread) added to ``called`` (by id),
    in the order first called. Profiled, the interpreter runs code unspecialised, and slower."""

    def seen(frame: types.FrameType, event: str, _arg: Any) -> None:
        if event == "call":
            called.setdefault(id(frame.f_code), frame.f_code)

    before = sys.getprofile(), threading.getprofile()  # a profiler of the starter's own goes on after
    sys.setprofile(seen)
    threading.setprofile(seen)
    try:
        yield called
    finally:
        sys.setprofile(before[0])
        threading.setprofile(before[1])


def pack_code(called: dict[int, types.CodeType]) -> dict[int, types.CodeType]:
    """Every function whose code is in ``called`` given a copy of it, the copies made one after the other;
    the copies, by their original's id. Code that a called code makes functions of (a comprehension, a
    lambda, a nested def) is copied into its copy's constants, so the functions it makes run the copy too."""
    copies: dict[int, types.CodeType] = {}

    def copy(code: types.CodeType) -> types.CodeType:
        made = copies.get(id(code))
        if made is None:
            if any(type(const) is types.CodeType and id(const) in called for const in code.co_consts):
                made = code.replace(co_consts=tuple(
                    copy(const) if type(const) is types.CodeType and id(const) in called else const
                    for const in code.co_consts))
            else:
                made = code.replace()  # its constants shared with the original: reading them writes nothing there
            copies[id(code)] = made
        return made

    for code in called.values():
        copy(code)
    # gc.get_objects() leaves out what gc.freeze() put aside (the package's import freezes it): a function made
    # before a freeze would keep its original code
    frozen = gc.get_freeze_count()
    if frozen:
        gc.unfreeze()
    try:
        for function in gc.get_objects():
            if type(function) is types.FunctionType:
                code = function.__code__
                if id(code) in called:  # called holds the code it names: an id there is this very code's
                    function.__code__ = copies[id(code)]
    finally:
        if frozen:
            gc.freeze()
    return copies


def fill_free_blocks() -> int:
    """Ballast in the free blocks of Python's small-object pools and of the C library's heap; how many
    blocks it took. Where the allocators cannot be read (another build of Python, another C library),
    nothing is done there."""
    # the C library's pass makes and drops Python objects of its own (its report, parsed): a last look at
    # the pools fills what that left
    return _fill_pymalloc() + _fill_malloc() + _fill_pymalloc(touch_up=True)


def _pymalloc_free_blocks() -> dict[int, int]:
    """Free blocks by size class in the pools pymalloc uses now (sys._debugmallocstats, which writes to fd 2)."""
    report = getattr(sys, "_debugmallocstats", None)
    if report is None:
        return {}
    with tempfile.TemporaryFile() as caught:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(caught.fileno(), 2)
            report()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        caught.seek(0)
        text = caught.read().decode(errors="replace")
    table = text.split("class   size   num pools   blocks in use  avail blocks", 1)[-1].split("\n\n", 1)[0]
    # one row at a time: a list of every row's strings, freed at once, would leave free blocks of its own
    return {int(row[1]): int(row[5]) for row in PYMALLOC_ROW.finditer(table)}


def _fill_pymalloc(touch_up: bool = False) -> int:
    taken = 0
    for fill in range(8):
        free = _pymalloc_free_blocks()
        # after the first pass, a class is left with its last fresh pool (where an app's new objects go,
        # together); it is filled again only where more than a pool's worth is free, which what the ballast's
        # own list and the passes themselves allocate and free between passes can leave
        if fill or touch_up:
            free = {size_class: count for size_class, count in free.items() if count > POOL // (16 * (size_class + 1))}
        if not free:
            break
        for size_class, count in free.items():
            block = 16 * (size_class + 1)
            for number in range(count):
                if block == 16:
                    BALLAST.append(object())  # 16 bytes
                elif block == 32:
                    BALLAST.append((1 << 20) + number)  # an int of one digit: 28 bytes
                else:
                    BALLAST.append(bytes(block - 33))  # a bytes object is 33 bytes and its length
            taken += count
    return taken


def _libc() -> Any:
    try:
        libc = ctypes.CDLL(None)
        malloc_info, memstream = libc.malloc_info, libc.open_memstream  # glibc's
    except (OSError, AttributeError):
        return None
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
    memstream.restype = ctypes.c_void_p
    memstream.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_size_t)]
    libc.fclose.argtypes = [ctypes.c_void_p]
    return libc


def _malloc_free_chunks(libc: Any) -> list[tuple[int, int]]:
    """(chunk size, count) of the free chunks in the main heap's bins, from glibc's malloc_info."""
    text = ctypes.c_char_p()
    length = ctypes.c_size_t()
    stream = libc.open_memstream(ctypes.byref(text), ctypes.byref(length))
    if not stream:
        return []
    libc.malloc_info(0, stream)
    libc.fclose(stream)
    report = ctypes.string_at(text, length.value).decode(errors="replace")
    libc.free(text)
    main = report.split('<heap nr="0">', 1)[-1].split("</sizes>", 1)[0]
    # a chunk's size as malloc_info gives it has its "previous chunk in use" bit set (+1)
    return [(int(size[1]) & ~15, int(size[3])) for size in MALLOC_SIZE.finditer(main)]


def _fill_malloc() -> int:
    libc = _libc()
    if libc is None:
        return 0
    taken = 0
    for chunk in TCACHE_SIZES:  # the per-thread cache's chunks are free too, but malloc_info does not list them
        for _ in range(TCACHE_COUNT):
            MALLOC_BALLAST.append(libc.malloc(chunk - 8))
            taken += 1
    for _ in range(4):  # a larger chunk given for a smaller size leaves the rest free: another pass takes it
        chunks = [(size, count) for size, count in _malloc_free_chunks(libc) if 32 <= size < LARGEST_HOLE]
        if not chunks:
            break
        for size, count in chunks:
            for _ in range(count):
                MALLOC_BALLAST.append(libc.malloc(size - 8))  # a chunk holds 8 bytes of its own
                taken += 1
    return taken
