"""Reading a Hugging Face checkpoint's tensors by name: the key prefix in front, and embedding rows."""

from __future__ import annotations

from qkv_tui.importers.errors import ImporterError
from qkv_tui.importers.safetensors_raw import Rows, TensorFiles
from qkv_tui.importers.stack import Array


def lookup(table: Array | Rows, key: str, ids: list[int]) -> Array:
    """Rows ``ids`` of an embedding table, refusing an id the table has no row for."""
    rows = int(table.shape[0])
    for i, token_id in enumerate(ids):
        if not 0 <= token_id < rows:
            raise ImporterError(
                f"tokenizer.json gives token id {token_id} (token {i + 1} of model.text) but {key} has {rows} rows"
                f" (ids 0 … {rows - 1}); expected a tokenizer.json made for these weights"
            )
    return table[ids]


def prefix_of(tensors: TensorFiles, suffix: str, what: str) -> str:
    """The key prefix in front of ``suffix`` ("transformer.", "model.", or none)."""
    for name in tensors.names():
        if name == suffix or name.endswith("." + suffix):
            return name[: len(name) - len(suffix)]
    raise ImporterError(f"the checkpoint has no {suffix!r} tensor; expected a {what} checkpoint's key names")
