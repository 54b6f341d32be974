"""``[rope] partial`` and ``[rope.scaling]``: partial rotary and context extension (docs/scenario-format.md).

The fields and their meaning are Hugging Face's (``rope_scaling`` / ``rope_parameters``); the frequencies
are computed by :mod:`qkv_tui.kernels.rope_scaling`.
"""

from __future__ import annotations

from typing import Any

from qkv_tui.base.values import kind as _kind
from qkv_tui.base.values import show as _show
from qkv_tui.core.toml_text import string
from qkv_tui.core.variants.common import Checker, choice, number
from qkv_tui.kernels.rope_scaling import SCALING_TYPES, RopeScaling, rotated_dims

WHERE = "[rope.scaling]"
# each type's fields, the required ones first; "type" itself is always there
REQUIRED = {
    "linear": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
    "yarn": ("factor", "original_max_position_embeddings"),
}
OPTIONAL = {"linear": (), "llama3": (),
            "yarn": ("beta_fast", "beta_slow", "attention_factor", "truncate", "mscale", "mscale_all_dim")}
EVERY_FIELD = ("type", *dict.fromkeys(k for t in SCALING_TYPES for k in (*REQUIRED[t], *OPTIONAL[t])))


def parse_partial(v: Checker, value: Any, d_k: int | None) -> float:
    """0 < partial ≤ 1, turning an even r = int(partial·d_k) ≥ 2 of each head's dimensions."""
    partial = number(v, value, "[rope] partial")
    if not 0 < partial <= 1:
        raise v.fail(f"[rope] partial = {_show(value)}; expected a share of d_k with 0 < partial ≤ 1"
                     " (the first int(partial·d_k) dimensions turn, the rest pass through)")
    if d_k is not None:
        r = rotated_dims(d_k, partial)
        if r < 2 or r % 2:
            raise v.fail(f"[rope] partial = {_show(value)} turns r = int({_show(value)}·{d_k}) = {r} of d_k = {d_k}"
                         " dimensions; expected a share whose r is even and at least 2 (dimensions turn in pairs),"
                         f" e.g. partial = {2 / d_k:g} (r = 2)")
    return partial


def parse_scaling(v: Checker, table: Any) -> RopeScaling:
    if not isinstance(table, dict):
        raise v.fail(f"[rope] scaling must be a table ([rope.scaling]), got {_kind(table)}")
    if "type" not in table:
        raise v.fail(f"{WHERE} is missing 'type'; expected type = \"linear\" (factor), \"llama3\" (factor,"
                     " low_freq_factor, high_freq_factor, original_max_position_embeddings) or \"yarn\" (factor,"
                     " original_max_position_embeddings)")
    kind = choice(v, table["type"], f"{WHERE} type", SCALING_TYPES)
    takes = ("type", *REQUIRED[kind], *OPTIONAL[kind])
    for key in table:
        if key not in takes and key in EVERY_FIELD:
            users = " or ".join(f'"{t}"' for t in SCALING_TYPES if key in (*REQUIRED[t], *OPTIONAL[t]))
            raise v.fail(f"{WHERE} {key} is not used by type = \"{kind}\" (it takes {', '.join(takes[1:])});"
                         f" remove it, or use type = {users}")
    v.known(table, takes, WHERE)
    for key in REQUIRED[kind]:
        if key not in table:
            raise v.fail(f"{WHERE} type = \"{kind}\" is missing '{key}'; expected {', '.join(REQUIRED[kind])}")

    def positive(key: str) -> float | None:
        if key not in table:
            return None
        x = number(v, table[key], f"{WHERE} {key}")
        if x <= 0:
            raise v.fail(f"{WHERE} {key} = {_show(table[key])}; expected a finite number > 0")
        return x

    factor = positive("factor")
    assert factor is not None
    low, high = positive("low_freq_factor"), positive("high_freq_factor")
    if low is not None and high is not None and high <= low:
        raise v.fail(f"{WHERE} high_freq_factor = {_show(table['high_freq_factor'])} must be larger than"
                     f" low_freq_factor = {_show(table['low_freq_factor'])} (pairs between the two wavelengths"
                     " blend from one to the other)")
    fast, slow = positive("beta_fast"), positive("beta_slow")
    truncate = table.get("truncate", True)
    if not isinstance(truncate, bool):
        raise v.fail(f"{WHERE} truncate must be true or false, got {_kind(truncate)}")
    # DeepSeek's: with both, a = m(mscale) / m(mscale_all_dim) unless attention_factor is given; under [mla]
    # mscale_all_dim's m² also multiplies the softmax scale (kernels/rope_scaling.py softmax_mscale)
    return RopeScaling(kind, factor, low, high, positive("original_max_position_embeddings"), fast, slow,
                       positive("attention_factor"), truncate, positive("mscale"), positive("mscale_all_dim"))


def write_scaling(scaling: RopeScaling) -> list[str]:
    """The fields as given (defaults stay unwritten, so the file still says "the default")."""
    lines = [f"[{WHERE.strip('[]')}]", f"type = {string(scaling.type)}"]
    for key in (*REQUIRED[scaling.type], *OPTIONAL[scaling.type]):
        value = getattr(scaling, key)
        if key == "truncate":
            if not value:
                lines.append("truncate = false")
        elif value is not None:
            lines.append(f"{key} = {float(value)!r}")
    return lines


def summary(partial: float, scaling: RopeScaling | None) -> str:
    """The ``--check`` words after ``rope <layout>``: empty for plain RoPE."""
    parts = [f" partial {partial:g}"] if partial != 1.0 else []
    if scaling is not None:
        parts.append(f" {scaling.type} ×{scaling.factor:g}")
    return "".join(parts)
