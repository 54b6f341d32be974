"""``[value_scale]``: every head's values multiplied by one number after the projection (MiMo-V2-Flash's
``attention_value_scale``, transformers "mimo_v2_flash"): V = (X·W_V + b_V)·factor, so the shown V, the mix and
the output all carry it, as the model's V and output do (kernels/value_scale.py runs it)."""

from __future__ import annotations

from typing import Any

from qkv_tui.core.toml_text import number
from qkv_tui.core.variants.common import Context, Faces, Lookalikes, Table, positive
from qkv_tui.core.variants.refusals import BUILDS_HEADS, refused

KEYS = ("factor",)
LOOKALIKES: Lookalikes = {
    ("[value_scale]", "attention_value_scale"): ("factor", "transformers' name for the factor"),
    ("[value_scale]", "scale"): ("factor", "the number V is multiplied by (scale is the scores' divisor)"),
}

# tables whose heads do not come from one V = X·W_V projection per head, or whose backward would miss the factor
REFUSED = (
    (BUILDS_HEADS, "[{key}] builds V from its latent; a value scale is read for [[heads]] or [attention] heads"),
    ("backward", "[backward]'s gradients do not carry the value scale yet; drop one of the two"),
)


def parse_value_scale(table: dict[str, Any], ctx: Context) -> float:
    v = ctx.v
    found = refused(ctx, REFUSED)
    if found is not None:
        raise v.fail(f"[value_scale] cannot be used with [{found[0]}]: {found[1]}")
    if "factor" not in table:
        raise v.fail("[value_scale] is missing 'factor'; expected factor = a number > 0 (V = (X·W_V)·factor)")
    return positive(v, table["factor"], "[value_scale] factor", " (V = (X·W_V)·factor)")


def write_value_scale(factor: float) -> list[str]:
    return ["[value_scale]", f"factor = {number(factor)}"]


def _summary(factor: float) -> str:
    return f"values scaled by {factor:g}"


# its one face beyond the keys: the head-pass hook that scales V (the Project stage reads the scaled V it leaves)
FACES = Faces(head="qkv_tui.core.value_scale_part:value_scale_part", compared="V scaled, as the heads mix it")
TABLE: Table[float] = Table("value_scale", KEYS, parse_value_scale, _summary, write_value_scale, LOOKALIKES, FACES)
