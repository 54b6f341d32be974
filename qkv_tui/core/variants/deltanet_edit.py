"""[deltanet]'s inputs as a learner edits them: g, β and the weights that compute them.

Their names carry a ``dn_`` prefix (``dn_g``, ``dn_beta``, ``dn_W_a`` …) because ``beta`` is also
[norm]'s beta; the edit prompt takes the file's own names where they are unambiguous
(core/cell_edit.py, parse_address).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from qkv_tui.core.arrays import Matrix
from qkv_tui.core.variants.deltanet import DeltaNet

# edit target -> the [deltanet] key it writes; in the order the arrow keys visit them
KEYS = {"dn_g": "g", "dn_beta": "beta", "dn_W_a": "W_a", "dn_A_log": "A_log", "dn_dt_bias": "dt_bias",
        "dn_W_b": "W_b"}
VECTORS = ("dn_A_log", "dn_dt_bias")  # one number per head: cell (0, h) is head h's
BY_TOKEN = ("dn_g", "dn_beta")  # a row per token: its rows are named by the tokens
# what a learner may type for them besides the dn_ names (not beta: [norm]'s beta is one row)
ALIASES = {key: target for target, key in KEYS.items() if key != "beta"}


def alias(name: str, indexed: bool) -> str:
    """The edit target a name typed in the prompt means: the file's own name where it is unambiguous; ``beta``
    with a row and a column (two indices) is [deltanet]'s, with one [norm]'s."""
    return "dn_beta" if name == "beta" and indexed else ALIASES.get(name, name)


def editable(dn: DeltaNet) -> dict[str, Matrix]:
    """The inputs the scenario gives, as 2-D arrays (a vector is one row), in the order the arrow keys visit them."""
    out: dict[str, Matrix] = {}
    for target, key in KEYS.items():
        value = getattr(dn, key)
        if value is not None:
            out[target] = value[None, :] if target in VECTORS else value
    return out


def with_entry(dn: DeltaNet, target: str, row: int, col: int, value: float) -> DeltaNet:
    """The table with one input number changed (shapes stay); g above 0 is refused, as the loader refuses it."""
    if target == "dn_g" and value > 0:
        raise ValueError(f"g = {value:g}; expected g <= 0 (a log decay: e^g <= 1 shrinks the state, e^g > 1 would"
                         " grow it without bound)")
    key = KEYS[target]
    array = np.array(getattr(dn, key), dtype=np.float64)
    if target in VECTORS:
        array[col] = value
    else:
        array[row, col] = value
    array.setflags(write=False)
    changed: dict[str, Any] = {key: array}
    return replace(dn, **changed)


def write_cell(table: Any, target: str, row: int, col: int, value: int | float) -> None:
    """Set one edited number in the file's [deltanet] table (tomlkit), where the file has it."""
    if target in VECTORS:
        table[KEYS[target]][col] = value
    else:
        table[KEYS[target]][row][col] = value


def read_by(dn: DeltaNet, beta: bool, row: int, head: int) -> tuple[str, int, int]:
    """(target, row, column) of the input an operation of g (or β) reads: the token's own number where the
    file gives it, else the weights' first row of that head's column (with a gate per key channel, which is not
    editable here, g's cell opens on the token's X)."""
    if dn.channels is not None and not beta:  # a gate per key channel is not editable here: the token's X it reads
        return "X", row, 0
    given = dn.beta if beta else dn.g
    if given is not None:
        return ("dn_beta" if beta else "dn_g"), row, head
    return ("dn_W_b" if beta else "dn_W_a"), 0, head
