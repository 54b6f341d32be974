"""A GGUF file's header (metadata and tensor table), read with limits, and its tensors memory-mapped.

GGUF is llama.cpp's format: the magic ``GGUF``, a version, the tensor and metadata counts, the
metadata (key, type, value), the tensor table (name, dimensions, ggml type, offset) and, aligned,
the tensor data. The header is parsed here rather than by the gguf package's ``GGUFReader``
because that reader builds NumPy views for every string of a vocabulary (for Qwen2's 151,000
tokens and merges it took 60 times as long as this reader on this project's shared machine, 149 s
against 2.4 s under load) and trusts every count: here each count, length and offset is checked
against limits and the file's size first, so a corrupt, truncated or hostile file is one error
line, never a hang or a gigabyte allocation. The tensors' bytes stay in a memory map until a layer
asks for them; the gguf package's own code gives the block sizes and dequantizes them (gguf_file.py).
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from qkv_tui.importers.errors import ImporterError
from qkv_tui.importers.files import open_regular

Value = Any  # int | float | bool | str | list[str] | NDArray (a numeric array)

MAGIC = b"GGUF"
VERSIONS = (2, 3)  # version 1 counted in 32 bits; llama.cpp itself reads only 2 and 3
KV_LIMIT = 65_536  # metadata entries; real files have a few dozen
TENSOR_LIMIT = 65_536  # real files have at most a few thousand
STRING_ARRAY_LIMIT = 4 * 2**20  # strings in the whole header: the largest vocabularies in use have 262,144 tokens
STRING_LIMIT = 16 * 2**20  # bytes of one string (a chat template is kilobytes)
HEADER_LIMIT = 256 * 2**20  # bytes before the tensor data; real headers are a few to tens of MB
MAX_DIMS = 4  # GGML_MAX_DIMS

# the GGUF value types (the spec's numbering) that have a fixed width
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<B", 10: "<Q", 11: "<q", 12: "<d"}
_ARRAYS = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "<u1", 10: "<u8", 11: "<i8", 12: "<f8"}
_BOOL, _STRING, _ARRAY = 7, 8, 9
_LENGTH = struct.Struct("<Q")


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dims: tuple[int, ...]  # ggml's order: ne[0], the length of a row, first
    type_id: int  # a ggml type (GGMLQuantizationType)
    start: int  # absolute byte offset in the file
    size: int  # bytes

    @property
    def shape(self) -> tuple[int, ...]:
        """NumPy's order (rows last-but-one): an nn.Linear weight is (out, in), as in the checkpoint."""
        return tuple(reversed(self.dims))


class Header:
    """A parsed header and the file mapped beside it: ``raw(name)`` is a tensor's bytes, read only when used."""

    def __init__(self, path: Path, shown: str) -> None:
        self.path, self.shown = path, shown
        fd = open_regular(path, "a GGUF file")  # a FIFO or a device is refused before it is opened
        try:
            size = os.fstat(fd).st_size
            if size < 24:
                raise self.fail(f"is {size} bytes long; a GGUF file starts with a 24-byte header (an empty or cut-short file?)")
            try:
                self.map = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError) as exc:
                raise self.fail(f"cannot be memory-mapped: {getattr(exc, 'strerror', None) or exc}") from None
        finally:
            os.close(fd)
        self.size = size
        self.metadata: dict[str, Value] = {}
        self.tensors: dict[str, TensorInfo] = {}
        self._parse()

    def fail(self, what: str) -> ImporterError:
        return ImporterError(f"{self.shown} {what}")

    def raw(self, info: TensorInfo) -> npt.NDArray[np.uint8]:
        """The tensor's bytes as a read-only view of the map (nothing is read from disk until used)."""
        return np.frombuffer(self.map, dtype=np.uint8, count=info.size, offset=info.start)

    # --- parsing ---------------------------------------------------------------------------

    def _parse(self) -> None:
        m = self.map
        if m[:4] != MAGIC:
            raise self.fail(f"is not a GGUF file: it starts with {bytes(m[:4])!r}, and a GGUF file with b'GGUF'")
        (version,) = struct.unpack_from("<I", m, 4)
        if version not in VERSIONS:
            swapped = struct.unpack_from(">I", m, 4)[0]
            if swapped in VERSIONS:
                raise self.fail("is a big-endian GGUF file; expected the little-endian files llama.cpp writes by default")
            raise self.fail(f"is GGUF version {version}; expected version 2 or 3")
        tensor_count, kv_count = struct.unpack_from("<QQ", m, 8)
        if kv_count > KV_LIMIT:
            raise self.fail(f"claims {kv_count:,} metadata entries; expected at most {KV_LIMIT:,} (a corrupt header?)")
        if tensor_count > TENSOR_LIMIT:
            raise self.fail(f"claims {tensor_count:,} tensors; expected at most {TENSOR_LIMIT:,} (a corrupt header?)")
        self.pos, self.strings = 24, 0
        for _ in range(kv_count):
            key = self._string("a metadata key")
            if key in self.metadata:
                raise self.fail(f"holds the metadata key {key!r} twice")
            (kind,) = self._unpack("<I", f"the type of {key!r}")
            self.metadata[key] = self._value(kind, key)
        table = [self._tensor_entry() for _ in range(tensor_count)]
        alignment = self.metadata.get("general.alignment", 32)
        if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment < 1 or alignment & (alignment - 1):
            raise self.fail(f"has general.alignment = {alignment!r}; expected a power of two")
        data = (self.pos + alignment - 1) // alignment * alignment
        self._sizes(table, data)

    def _tensor_entry(self) -> tuple[str, tuple[int, ...], int, int]:
        name = self._string("a tensor name")
        (n_dims,) = self._unpack("<I", f"tensor {name!r}")
        if not 1 <= n_dims <= MAX_DIMS:
            raise self.fail(f"gives tensor {name!r} {n_dims} dimensions; expected 1 to {MAX_DIMS}")
        dims = self._unpack(f"<{n_dims}Q", f"tensor {name!r}")
        type_id, offset = self._unpack("<IQ", f"tensor {name!r}")
        return name, dims, type_id, offset

    def _sizes(self, table: list[tuple[str, tuple[int, ...], int, int]], data: int) -> None:
        from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType  # the package's own block sizes

        for name, dims, type_id, offset in table:
            if name in self.tensors:
                raise self.fail(f"holds tensor {name!r} twice")
            try:
                qtype = GGMLQuantizationType(type_id)
                block, block_bytes = GGML_QUANT_SIZES[qtype]
            except (ValueError, KeyError):
                raise self.fail(f"stores tensor {name!r} as ggml type {type_id}, which the gguf package does not know"
                                " (written by a newer llama.cpp?)") from None
            if dims[0] % block:
                raise self.fail(f"gives tensor {name!r} rows of {dims[0]} values, not a whole number of"
                                f" {qtype.name} blocks of {block}")
            count = 1
            for d in dims:
                count *= d
            size = count // block * block_bytes
            start = data + offset
            if start + size > self.size:
                raise self.fail(f"is cut short: tensor {name!r} lies beyond the end of the file (an interrupted download?)")
            self.tensors[name] = TensorInfo(name, tuple(int(d) for d in dims), int(type_id), start, size)

    def _need(self, count: int, what: str) -> None:
        if self.pos + count > self.size:
            raise self.fail(f"is cut short: the header ends inside {what} (an interrupted download?)")
        if self.pos + count > HEADER_LIMIT:
            raise self.fail(f"has a header larger than {HEADER_LIMIT // 2**20} MiB; expected a few MiB of metadata"
                            " (a corrupt file?)")

    def _unpack(self, fmt: str, what: str) -> tuple[Any, ...]:
        width = struct.calcsize(fmt)
        self._need(width, what)
        values = struct.unpack_from(fmt, self.map, self.pos)
        self.pos += width
        return values

    def _string(self, what: str) -> str:
        (length,) = self._unpack("<Q", what)
        if length > STRING_LIMIT:
            raise self.fail(f"gives {what} a length of {length:,} bytes; expected at most {STRING_LIMIT:,} (a corrupt header?)")
        self._need(length, what)
        raw = self.map[self.pos:self.pos + length]
        self.pos += length
        return raw.decode("utf-8", errors="replace")

    def _value(self, kind: int, key: str) -> Value:
        if kind in _SCALARS:
            (value,) = self._unpack(_SCALARS[kind], f"the value of {key!r}")
            return bool(value) if kind == _BOOL else value
        if kind == _STRING:
            return self._string(f"the value of {key!r}")
        if kind != _ARRAY:
            raise self.fail(f"gives {key!r} the value type {kind}; expected a GGUF type 0 to 12")
        item, count = self._unpack("<IQ", f"the array {key!r}")
        if item in _SCALARS:
            dtype = np.dtype(_ARRAYS[item])
            if count > HEADER_LIMIT:
                raise self.fail(f"gives the array {key!r} {count:,} entries; expected a header of at most"
                                f" {HEADER_LIMIT // 2**20} MiB (a corrupt header?)")
            self._need(count * dtype.itemsize, f"the array {key!r}")
            values = np.frombuffer(self.map, dtype=dtype, count=count, offset=self.pos).copy()
            self.pos += count * dtype.itemsize
            return values.astype(bool) if item == _BOOL else values
        if item != _STRING:
            raise self.fail(f"gives {key!r} an array of type {item}; expected numbers or strings (nested arrays are not read)")
        self.strings += count
        if self.strings > STRING_ARRAY_LIMIT:  # bounds the time spent reading strings, whatever the file's size
            raise self.fail(f"gives the array {key!r} {count:,} strings; expected at most {STRING_ARRAY_LIMIT:,}"
                            " in the whole header (a corrupt header?)")
        return self._strings(count, f"the array {key!r}")

    def _strings(self, count: int, what: str) -> list[str]:
        """``count`` strings in a row: a vocabulary's 150,000 tokens, so the loop does only what it must."""
        m, pos, end = self.map, self.pos, min(self.size, HEADER_LIMIT)
        unpack = _LENGTH.unpack_from
        out: list[str] = []
        append = out.append
        for _ in range(count):
            if pos + 8 > end:
                break
            (length,) = unpack(m, pos)
            pos += 8
            if length > STRING_LIMIT or pos + length > end:
                pos -= 8
                break
            append(m[pos:pos + length].decode("utf-8", errors="replace"))
            pos += length
        self.pos = pos
        if len(out) < count:  # the checks of _string name what went wrong
            self._string(what)
            raise AssertionError("unreachable: _string refuses what stopped the loop")
        return out
