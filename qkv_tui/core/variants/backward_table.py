"""``[backward]`` as the registry holds it: its key and keys, with the functions that read it named in its own module
(core/variants/backward.py), which a scenario without the table never loads (as differential_table.py does for
[differential]); and the one rule the loader asks of every file, the weights the layer gives."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from qkv_tui.core.arrays import Matrix
from qkv_tui.core.variants.common import Later, Table

BACKWARD_KEYS = ("target", "dO", "lr", "steps", "train", "loss", "W_U", "next", "optimizer", "betas", "eps",
                 "weight_decay")


def weights_of(heads: Sequence[Any], W_O: Matrix | None, b_O: Matrix | None) -> tuple[str, ...]:
    """The weight names of the layer's own that the heads and [output] give (a variant's are its Trains')."""
    have = ["W_Q", "W_K", "W_V"]
    have += [name for name in ("b_Q", "b_K", "b_V") if any(getattr(h, name) is not None for h in heads)]
    have += [name for name, w in (("W_O", W_O), ("b_O", b_O)) if w is not None]
    return tuple(have)


# its functions are its own module's, imported on the first call (Later); that module re-exports it as Table[Backward]
_MODULE = "qkv_tui.core.variants.backward"
TABLE: Table[Any] = Table("backward", BACKWARD_KEYS, Later(f"{_MODULE}:parse_backward"), Later(f"{_MODULE}:_summary"),
                          Later(f"{_MODULE}:write_backward"))
