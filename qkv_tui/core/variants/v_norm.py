"""``[v_norm]``: every value vector RMS-normed after the projection, without a gain (Gemma 3n's ``v_norm``,
transformers "gemma3n": Gemma3nRMSNorm(head_dim, with_scale=False)): V[j] = (X·W_V + b_V)[j] / √(mean of that
row's squares + eps), each K/V head's row on its own, so the shown V, the mix and the output carry it, as the
model's do (kernels/v_norm.py runs it)."""

from __future__ import annotations

from typing import Any

from qkv_tui.core.toml_text import number
from qkv_tui.core.variants.common import Context, Faces, Lookalikes, Table, positive
from qkv_tui.core.variants.refusals import BUILDS_HEADS, STATE, refused

KEYS = ("eps",)
DEFAULT_EPS = 1e-6  # Gemma3nTextConfig's rms_norm_eps
LOOKALIKES: Lookalikes = {
    ("[v_norm]", "rms_norm_eps"): ("eps", "transformers' name for it"),
}

# tables whose values do not come from one V = X·W_V projection per head the norm could follow, or would miss it
REFUSED = (
    (BUILDS_HEADS, "[{key}] builds V from its latent; a value norm is read for [[heads]] or [attention] heads"),
    ("backward", "[backward]'s gradients do not carry the value norm yet; drop one of the two"),
    (STATE, "[{key}]'s stages read V as projected; a value norm is read with softmax attention"),
    ("value_scale", "the norm would undo the scale (a row's norm does not change when the row is multiplied);"
                    " drop one of the two"),
    ("differential", "[differential]'s kernel projects its own 2d-wide V, which the value norm would not reach"),
)


def parse_v_norm(table: dict[str, Any], ctx: Context) -> float:
    """The eps of the norm (what ``[v_norm]`` holds)."""
    v = ctx.v
    found = refused(ctx, REFUSED)
    if found is not None:
        raise v.fail(f"[v_norm] cannot be used with [{found[0]}]: {found[1]}")
    if "eps" not in table:
        return DEFAULT_EPS
    return positive(v, table["eps"], "[v_norm] eps", " (it keeps the root away from 0)")


def write_v_norm(eps: float) -> list[str]:
    return ["[v_norm]", f"eps = {number(eps)}"]


def _summary(eps: float) -> str:
    return "values RMS-normed"


# its one face beyond the keys: the head-pass hook that norms V (the Project stage reads the normed V it leaves)
FACES = Faces(head="qkv_tui.core.v_norm_part:v_norm_part", compared="V normed, as the heads mix it")
TABLE: Table[float] = Table("v_norm", KEYS, parse_v_norm, _summary, write_v_norm, LOOKALIKES, FACES)
