"""``[deltanet]`` as the registry holds it: its key, its keys, its weights in [backward]'s train list and its faces,
with the functions that read it named in its own modules (core/variants/deltanet.py, deltanet_io.py), which a
scenario without the table never loads (as differential_table.py does for [differential])."""

from __future__ import annotations

from typing import Any

from qkv_tui.core.variants.common import Faces, Later, Table, Trains

IO_KEYS = ("conv_q", "conv_k", "conv_v", "W_Z", "gamma_o", "eps_o", "gate_o")  # deltanet_io.py reads them
DELTANET_KEYS = ("g", "beta", "W_a", "W_b", "A_log", "dt_bias", "W_fa", "W_fb", *IO_KEYS)
WEIGHTS = ("W_a", "W_b", "A_log", "dt_bias")  # where it computes g and β, as Qwen3-Next does: [backward] trains them

# its functions are its own module's, imported on the first call (Later); that module re-exports it as Table[DeltaNet]
_MODULE = "qkv_tui.core.variants.deltanet"
TABLE: Table[Any] = Table("deltanet", DELTANET_KEYS, Later(f"{_MODULE}:parse_deltanet"), Later(f"{_MODULE}:_summary"),
                          Later(f"{_MODULE}:write_deltanet"),
                          trains=Trains(WEIGHTS, "b_O", Later(f"{_MODULE}:trains"),
                                        refuse=Later(f"{_MODULE}:refuse_backward")),
                          faces=Faces(head="qkv_tui.core.deltanet_part:deltanet_part",
                                      edit="qkv_tui.core.variants.deltanet_edit",
                                      worksheet_back="qkv_tui.edges.worksheet.backward.deltanet:SHEET",
                                      # in place of Score … Mix: after them, before Concat; backwards before dSoftmax
                                      stages=(("before:concat", "deltanet_io", "CONV_STAGE"),
                                              *(("before:concat", "deltanet", name)
                                                for name in ("NORMALISE", "GATES", "DELTA")),
                                              ("before:concat", "deltanet_io", "OUTPUT_NORM"),
                                              *(("before:dsoftmax", "deltanet", name)
                                                for name in ("BACKWARD", "GATES_BACKWARD")))))
