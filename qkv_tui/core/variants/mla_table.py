"""``[mla]`` as the registry holds it: its key, its keys, its faces and its place in [backward]'s train list, with
the functions that read it named in its own module (core/variants/mla.py), which a scenario without the table
never loads (the loader imports it where a file has [mla])."""

from __future__ import annotations

from typing import Any

from qkv_tui.core.variants.common import Context, Faces, Later, Table, Trains

MLA_KEYS = ("num_heads", "d_nope", "d_rope", "d_v", "W_DKV", "W_UK", "W_UV", "W_KR", "W_Q", "W_DQ", "W_UQ",
            "kv_norm", "gamma_kv", "q_norm", "gamma_q", "eps")
# what [backward] train may name beside the other weights (W_Q and gamma_q are already among them)
MLA_TRAINABLE = ("W_DKV", "W_UK", "W_UV", "W_KR", "W_DQ", "W_UQ", "gamma_kv")

# Its stages: the latent path after Project, the absorbed W_O after Mix, and backwards the latent path after dRotate
FACES = Faces(stages=(*(("project", module, "SPEC") for module in ("mla_compress", "mla_expand", "mla_rotate")),
                      ("mix", "mla_absorb", "SPEC"),
                      *(("drotate", module, name) for module, name in (
                          ("mla_rotate", "BACKWARD"), ("mla_rotate", "KEY_BACKWARD"), ("mla_expand", "BACKWARD"),
                          ("mla_compress", "BACKWARD")))),
              edit="qkv_tui.core.variants.mla_edit")
_MODULE = "qkv_tui.core.variants.mla"


def _trains(ctx: Context) -> tuple[str, ...]:
    """Its weights in [backward]'s train list where the file has [mla] (its module's ``trains``); none without."""
    return () if ctx.earlier.get("mla") is None else tuple(Later(f"{_MODULE}:trains")(ctx))


# its functions are its own module's, imported on the first call (Later); that module re-exports it as Table[Mla]
TABLE: Table[Any] = Table("mla", MLA_KEYS, Later(f"{_MODULE}:parse_mla"), Later(f"{_MODULE}:_summary"),
                          Later(f"{_MODULE}:write_mla"), faces=FACES,
                          trains=Trains(MLA_TRAINABLE, "", _trains, instead=("W_Q", "W_K", "W_V")))
