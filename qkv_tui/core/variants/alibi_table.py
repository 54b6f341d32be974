"""``[alibi]`` as the registry holds it: its key, its keys and its faces, with the functions that read it named in
its own module (core/variants/alibi.py), which a scenario without the table never loads (as differential_table.py
does for [differential])."""

from __future__ import annotations

from typing import Any

from qkv_tui.core.variants.common import Faces, Later, Table

ALIBI_KEYS = ("slopes",)

FACES = Faces(head="qkv_tui.core.alibi_part:alibi_part")
# its functions are its own module's, imported on the first call (Later); that module re-exports it as Table[Alibi]
_MODULE = "qkv_tui.core.variants.alibi"
TABLE: Table[Any] = Table("alibi", ALIBI_KEYS, Later(f"{_MODULE}:parse_alibi"), lambda alibi: "alibi",
                          Later(f"{_MODULE}:write_alibi"), faces=FACES)
