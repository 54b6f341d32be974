"""Tensors from ``*.safetensors`` files, float32, float16 and bfloat16 alike, as float64 arrays.

The format is an 8-byte little-endian header length, a JSON header (name -> dtype, shape,
data_offsets) and the raw bytes. safetensors' NumPy API refuses bfloat16 (NumPy has no such
dtype) and most current checkpoints are bfloat16, so the header is read here and each tensor is
memory-mapped: only the tensors a layer needs are ever read from disk. bfloat16 is the top half
of a float32, so widening is a 16-bit shift.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from qkv_tui.base.values import show as _show
from qkv_tui.importers.errors import ImporterError
from qkv_tui.importers.files import open_regular

Array = npt.NDArray[np.float64]

_BF16_BITS = "<u2"
_STORED = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": _BF16_BITS}  # how each dtype read is mapped
# bytes per element of every dtype the format defines, read or not: a header's shape must match its bytes
_ITEM_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "I16": 2, "U16": 2, "F16": 2,
               "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
_HEADER_LIMIT = 100_000_000  # the format's own cap on the JSON header


@dataclass(frozen=True)
class _Entry:
    path: Path
    dtype: str
    shape: tuple[int, ...]
    start: int  # absolute byte offset in the file
    end: int


class TensorFiles:
    """Every tensor of a folder's ``*.safetensors`` files (sharded checkpoints included), by name."""

    def __init__(self, paths: list[Path]) -> None:
        self.entries: dict[str, _Entry] = {}
        for path in paths:
            for name, entry in _read_header(path).items():
                self.entries[name] = entry
        # each file mapped once, when its first tensor is read: a deep layer reads hundreds of tensors,
        # and a mapping of its own for each cost an open and an mmap apiece
        self._maps: dict[Path, npt.NDArray[np.uint8]] = {}

    def __contains__(self, name: str) -> bool:
        return name in self.entries

    def names(self) -> list[str]:
        return list(self.entries)

    def numbers(self) -> int:
        """How many numbers the tensors hold in all (what bounds a config's counts: importers/bounds.py)."""
        return sum(math.prod(entry.shape) for entry in self.entries.values())

    def get(self, name: str, shape: tuple[int | None, ...]) -> Array:
        """The tensor, as float64, refused unless its shape is ``shape`` (None: any length on that axis)."""
        return _widen(self._mapped(name, shape))

    def rows(self, name: str, shape: tuple[int | None, ...]) -> Rows:
        """A 2-D tensor (an embedding table) whose rows are widened only when asked for: a vocabulary
        of 50,000 rows is tens of millions of numbers, and a sentence needs a few dozen of them."""
        return Rows(self._mapped(name, shape))

    def _mapped(self, name: str, shape: tuple[int | None, ...]) -> npt.NDArray[np.generic]:
        """The tensor's bytes as stored (memory-mapped, nothing read yet), its shape and dtype checked."""
        entry = self.entries.get(name)
        if entry is None:
            raise ImporterError(f"the checkpoint has no tensor {name!r}; expected the model_type's usual key names")
        if len(entry.shape) != len(shape) or any(w is not None and w != s for w, s in zip(shape, entry.shape)):
            raise ImporterError(
                f"{entry.path.name}: tensor {name!r} is {_dims(entry.shape)}; the config implies {_dims(shape)}"
            )
        count = math.prod(entry.shape)
        if count == 0:  # np.memmap cannot map zero bytes
            return np.zeros(entry.shape)
        if entry.dtype not in _STORED:
            raise ImporterError(
                f"{entry.path.name}: tensor {name!r} is {_show(entry.dtype)}; expected F32, F16 or BF16 weights"
                " (quantised checkpoints are not read)"
            )
        dtype = np.dtype(_STORED[entry.dtype])
        whole = self._maps.get(entry.path)
        if whole is None:
            whole = self._maps[entry.path] = np.memmap(entry.path, dtype=np.uint8, mode="r")
        return whole[entry.start:entry.end].view(dtype).reshape(entry.shape)


class Rows:
    """An embedding table left in the file: ``shape`` at once, ``rows[ids]`` widened to float64 on demand."""

    def __init__(self, stored: npt.NDArray[np.generic]) -> None:
        self.stored = stored  # (vocab, d), as the file holds it
        self.shape: tuple[int, ...] = tuple(int(s) for s in stored.shape)

    def __getitem__(self, ids: list[int]) -> Array:
        return _widen(self.stored[ids])  # (len(ids), d)


def _widen(stored: npt.NDArray[np.generic]) -> Array:
    """Stored numbers as float64, exactly: bfloat16 (held as its 16 bits) becomes the top half of a float32."""
    if stored.dtype == np.dtype(_BF16_BITS):
        pairs = np.zeros((*stored.shape, 2), dtype=_BF16_BITS)  # (..., 2): little-endian float32, low half zero
        pairs[..., 1] = stored
        values: Array = pairs.view("<f4")[..., 0].astype(np.float64)
        return values
    return np.asarray(stored, dtype=np.float64)


def _dims(shape: tuple[int | None, ...]) -> str:
    if not shape:
        return "a single number (0-D)"
    if len(shape) == 1:
        return f"a vector of {'any length' if shape[0] is None else shape[0]} (1-D)"
    return "×".join("N" if s is None else str(s) for s in shape) + f" ({len(shape)}-D)"


def _read_header(path: Path) -> dict[str, _Entry]:
    fd = open_regular(path, "a safetensors file")
    try:
        size = os.fstat(fd).st_size
        with os.fdopen(fd, "rb", closefd=False) as handle:
            head = handle.read(8)
            if len(head) < 8:
                raise ImporterError(f"{path.name}: not a safetensors file (shorter than its 8-byte header length)")
            (length,) = struct.unpack("<Q", head)
            if length > _HEADER_LIMIT or 8 + length > size:
                raise ImporterError(f"{path.name}: not a safetensors file (header length {length:,} is implausible"
                                    f" for a file of {size:,} bytes)")
            text = handle.read(length)
    except OSError as exc:
        raise ImporterError(f"{path.name}: cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    try:
        header = json.loads(text)
    except (UnicodeDecodeError, ValueError):  # ValueError: not JSON, or an integer of more than 4,300 digits
        raise ImporterError(f"{path.name}: not a safetensors file (its header is not JSON)") from None
    except RecursionError:  # brackets nested past the interpreter's stack; a real header is two levels deep
        raise ImporterError(f"{path.name}: not a safetensors file (its JSON header nests deeper than the parser"
                            " follows; expected a table of tensors)") from None
    if not isinstance(header, dict):
        raise ImporterError(f"{path.name}: not a safetensors file (its header is not a JSON object)")
    base = 8 + length
    entries: dict[str, _Entry] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        shown = repr(name if len(name) <= 60 else name[:57] + "...")
        try:
            dtype = info["dtype"]
            shape = tuple(info["shape"])
            begin, end = info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise ImporterError(f"{path.name}: tensor {shown} has a malformed header entry") from None
        if not isinstance(dtype, str) or not all(_count(s) for s in (*shape, begin, end)):
            raise ImporterError(f"{path.name}: tensor {shown} has a malformed header entry"
                                " (expected a dtype string, and whole numbers >= 0 for its shape and offsets)")
        if base + end > size or begin > end:
            raise ImporterError(f"{path.name}: tensor {shown} lies beyond the end of the file (truncated download?)")
        item = _ITEM_BYTES.get(dtype)
        if item is not None and math.prod(shape) * item != end - begin:
            raise ImporterError(
                f"{path.name}: tensor {shown} is {dtype} of shape {_dims(shape)}, which takes"
                f" {math.prod(shape) * item:,} bytes, but its data_offsets hold {end - begin:,}; expected the two to agree"
            )
        entries[name] = _Entry(path, dtype, shape, base + begin, base + end)
    return entries


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
