"""``[ssd]`` as the registry holds it: its key, its keys, its lookalikes and its faces, with the functions that read
it named in its own module (core/variants/ssd.py), which a scenario without the table never loads."""

from __future__ import annotations

from typing import Any

from qkv_tui.core.variants.common import Faces, Later, Table

SSD_KEYS = ("num_heads", "num_groups", "A", "dt", "W_dt", "dt_bias", "dt_min", "dt_max", "B", "C", "x", "D", "z", "gamma",
            "eps")
WHERE = "[ssd]"

LOOKALIKES = {
    (WHERE, "A_log"): ("A", "write the decay rates themselves, A = −e^(A_log), each < 0"),
    (WHERE, "n_groups"): ("num_groups", "transformers' n_groups is num_groups here"),
    (WHERE, "dt_proj"): ("W_dt", "the dt columns of in_proj, as X·W"),
    (WHERE, "gate"): ("z", "the gate stream the output is multiplied by SiLU of"),
    (WHERE, "norm_weight"): ("gamma", "the gated RMSNorm's gains"),
    (WHERE, "time_step_min"): ("dt_min", "the layer's time_step_limit clamps dt to [dt_min, dt_max]"),
    (WHERE, "time_step_limit"): ("dt_min", "write its two ends as dt_min and dt_max"),
}

# The part's faces beyond its keys: its head-pass hook, its stages (after Mix, where the one-map stages would have
# shown theirs), its JSON field. Registering the part is its line in FEATURES (core/variants/__init__.py).
FACES = Faces(
    head="qkv_tui.core.ssd_part:ssd_part",
    stages=tuple(("mix", "ssd", name) for name in ("STEPS", "RECURRENCE", "MASK", "MAP", "ATTENTION", "AGREE", "GATE",
                                                    "NORM")),
    json="qkv_tui.edges.export_ssd:ssd_parts",
)
# its functions are its own module's, imported on the first call (Later); that module re-exports it as Table[Ssd]
_MODULE = "qkv_tui.core.variants.ssd"
TABLE: Table[Any] = Table("ssd", SSD_KEYS, Later(f"{_MODULE}:parse_ssd"), Later(f"{_MODULE}:_summary"),
                          Later(f"{_MODULE}:write_ssd"), LOOKALIKES, FACES)
