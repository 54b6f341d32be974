"""``[linear]`` as the registry holds it: its key, its keys and its faces, with the functions that read it named in
its own module (core/variants/linear.py), which a scenario without the table never loads."""

from __future__ import annotations

from typing import Any

from qkv_tui.core.variants.common import Faces, Later, Table

LINEAR_KEYS = ("feature", "normalize")

_MODULE = "qkv_tui.core.variants.linear"
# its functions are its own module's, imported on the first call (Later); that module re-exports it as Table[Linear]
TABLE: Table[Any] = Table("linear", LINEAR_KEYS, Later(f"{_MODULE}:parse_linear"), Later(f"{_MODULE}:_summary"),
                          Later(f"{_MODULE}:write_linear"),
                          faces=Faces(head="qkv_tui.core.linear_part:linear_part",
                                      # in place of Score … Mix: after them, before Concat; backwards before dSoftmax
                                      stages=(*(("before:concat", "linear", name)
                                                for name in ("FEATURE", "QUADRATIC", "RECURRENT")),
                                              ("before:dsoftmax", "linear", "BACKWARD"))))
