"""Tensors from ``*.safetensors`` files, float32, float16 and bfloat16 alike, as float64 arrays.

The format is an 8-byte little-endian header length, a JSON header (name -> dtype, shape,
data_offsets) and the raw bytes. safetensors' NumPy API refuses bfloat16 (NumPy has no such
dtype) and most current checkpoints are bfloat16, so the header is read here and each tensor is
memory-mapped: only the tensors a layer needs are ever read from disk. bfloat16 is the top half
of a float32, so widening is a 16-bit shift.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from qkv_tui.importers.errors import ImporterError

Array = npt.NDArray[np.float64]

_PLAIN = {"F64": "<f8", "F32": "<f4", "F16": "<f2"}
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

    def __contains__(self, name: str) -> bool:
        return name in self.entries

    def names(self) -> list[str]:
        return list(self.entries)

    def get(self, name: str) -> Array:
        entry = self.entries.get(name)
        if entry is None:
            raise ImporterError(f"the checkpoint has no tensor {name!r}; expected the model_type's usual key names")
        count = int(np.prod(entry.shape)) if entry.shape else 1
        if entry.dtype in _PLAIN:
            dtype = np.dtype(_PLAIN[entry.dtype])
            raw = np.memmap(entry.path, dtype=dtype, mode="r", offset=entry.start, shape=(count,))
            values = np.asarray(raw, dtype=np.float64)
        elif entry.dtype == "BF16":
            halves = np.memmap(entry.path, dtype="<u2", mode="r", offset=entry.start, shape=(count,))
            values = (np.asarray(halves, dtype=np.uint32) << 16).view(np.float32).astype(np.float64)
        else:
            raise ImporterError(
                f"{entry.path.name}: tensor {name!r} is {entry.dtype}; expected F32, F16 or BF16 weights"
                " (quantised checkpoints are not read)"
            )
        return values.reshape(entry.shape)


def _read_header(path: Path) -> dict[str, _Entry]:
    try:
        with path.open("rb") as handle:
            head = handle.read(8)
            if len(head) < 8:
                raise ImporterError(f"{path.name}: not a safetensors file (shorter than its 8-byte header length)")
            (length,) = struct.unpack("<Q", head)
            if length > _HEADER_LIMIT:
                raise ImporterError(f"{path.name}: not a safetensors file (header length {length} is implausible)")
            text = handle.read(length)
        size = path.stat().st_size
    except OSError as exc:
        raise ImporterError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        header = json.loads(text)
    except (UnicodeDecodeError, ValueError):  # ValueError: not JSON, or an integer of more than 4,300 digits
        raise ImporterError(f"{path.name}: not a safetensors file (its header is not JSON)") from None
    if not isinstance(header, dict):
        raise ImporterError(f"{path.name}: not a safetensors file (its header is not a JSON object)")
    base = 8 + length
    entries: dict[str, _Entry] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = str(info["dtype"])
            shape = tuple(int(s) for s in info["shape"])
            begin, end = (int(o) for o in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise ImporterError(f"{path.name}: tensor {name!r} has a malformed header entry") from None
        if base + end > size or begin > end:
            raise ImporterError(f"{path.name}: tensor {name!r} lies beyond the end of the file (truncated download?)")
        entries[name] = _Entry(path, dtype, shape, base + begin, base + end)
    return entries
