"""``[shared_kv]`` as the registry holds it: its key, its keys, its lookalikes and its faces, with the functions that
read it named in its own module (core/variants/shared_kv.py), which a scenario without the table never loads (as
differential_table.py does for [differential])."""

from __future__ import annotations

from typing import Any

from qkv_tui.core.variants.common import Checker, Faces, Later, Lookalikes, Table

KEYS = ("source_layer", "K", "V")
LOOKALIKES: Lookalikes = {
    ("[shared_kv]", "kv_shared_layer_index"): ("source_layer", "the layer whose K and V this one reuses"),
    ("[shared_kv]", "key_states"): ("K", "the source layer's keys, one m × d_k matrix per K/V head"),
    ("[shared_kv]", "value_states"): ("V", "the source layer's values, one m × d_v matrix per K/V head"),
}

# its faces: the head-pass hook that puts the table's K and V in the head's place, the Reuse stage after Project
# (what the layer reads in place of computing K and V), and no JSON field beyond the top-level kv_source_layer
FACES = Faces(head="qkv_tui.core.shared_kv_part:shared_kv_part",
              stages=(("project", "shared_kv", "REUSE"),))
# its functions are its own module's, imported on the first call (Later); that module re-exports it as Table[SharedKV]
_MODULE = "qkv_tui.core.variants.shared_kv"
TABLE: Table[Any] = Table("shared_kv", KEYS, Later(f"{_MODULE}:parse_shared_kv"), Later(f"{_MODULE}:_summary"),
                          Later(f"{_MODULE}:write_shared_kv"), LOOKALIKES, FACES)


def without_kv(v: Checker, doc: dict[str, Any], d_in: int) -> dict[str, Any]:
    """The file as the loader reads its heads (core/variants/shared_kv.py without_kv): as written where it has no
    [shared_kv] table, so most files never load that module."""
    if not isinstance(doc.get("shared_kv"), dict):
        return doc
    read: dict[str, Any] = Later(f"{_MODULE}:without_kv")(v, doc, d_in)
    return read
