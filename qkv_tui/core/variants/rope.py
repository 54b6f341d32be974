"""``[rope]``: rotary position embeddings on Q and K (docs/scenario-format.md)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from qkv_tui.base.values import kind as _kind
from qkv_tui.base.values import show as _show
from qkv_tui.core.toml_text import string
from qkv_tui.core.variants.common import MAX_INDEX, Context, Table, choice, number
from qkv_tui.kernels import rope as rope_kernel

ROPE_KEYS = ("base", "layout", "positions")
ROPE_LAYOUTS = ("interleaved", "half")
DEFAULT_BASE = 10000.0


@dataclass(frozen=True)
class Rope:
    """Rotary position embeddings on Q and K."""

    base: float  # θ_i = base^(−2i/d_k)
    layout: str  # "interleaved": pair i = (2i, 2i+1); "half": pair i = (i, i + d_k/2)
    positions: tuple[int, ...]  # one per token

    def pairs(self, d_k: int) -> list[tuple[int, int]]:
        """The dimensions rotated together, pair i first: what makes the two layouts differ."""
        return rope_kernel.pairs(self.layout, d_k)

    def theta(self, i: int, d_k: int) -> float:
        """Frequency of pair i: angles grow by this much per position."""
        return rope_kernel.theta(self.base, i, d_k)


def parse_rope(table: dict[str, Any], ctx: Context) -> Rope:
    v, tokens, head_dks = ctx.v, ctx.tokens, ctx.heads
    if ctx.is_cross:
        raise v.fail("[rope] needs self-attention (keys and queries share positions); remove [context] or [rope]")
    for name, d_k in head_dks:
        if d_k % 2:
            raise v.fail(f"[rope] needs an even d_k (dimensions rotate in pairs), but {name} has d_k = {d_k}")
    widths: dict[int, list[str]] = {}
    for name, d_k in head_dks:
        widths.setdefault(d_k, []).append(name)
    if len(widths) > 1:
        def heads_with(names: list[str]) -> str:
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            return f"{shown} {'has' if len(names) == 1 else 'have'}"

        said = "; ".join(f"{heads_with(names)} d_k = {d_k}" for d_k, names in widths.items())
        raise v.fail(f"[rope] needs every head to have the same d_k (the format keeps one set of frequencies"
                     f" θ_i = base^(−2i/d_k) for every head, as RoPE models do), but {said}; expected one d_k for every head")
    if "layout" not in table:
        raise v.fail(
            "[rope] is missing 'layout'; expected layout = \"interleaved\" (pairs (0,1), (2,3), …: RoFormer, Meta's LLaMA)"
            " or \"half\" (pairs (0, d_k/2), …: Hugging Face rotate_half)"
        )
    layout = choice(v, table["layout"], "[rope] layout", ROPE_LAYOUTS)
    base = DEFAULT_BASE
    if "base" in table:
        base = number(v, table["base"], "[rope] base")
        if base <= 0:
            raise v.fail(f"[rope] base = {_show(table['base'])}; expected a finite number > 0 (θ_i = base^(−2i/d_k))")
    n = len(tokens)
    positions = tuple(range(n))
    if "positions" in table:
        raw = table["positions"]
        if not isinstance(raw, list):
            raise v.fail(f"[rope] positions must be a list of {n} whole numbers >= 0 (one per token), got {_kind(raw)}")
        if len(raw) != n:
            raise v.fail(f"[rope] positions has {len(raw)} number{'s' if len(raw) != 1 else ''}; expected {n}, one per token")
        out = []
        for i, p in enumerate(raw):
            where = f"[rope] positions item {i + 1} ({json.dumps(tokens[i], ensure_ascii=False)})"
            if isinstance(p, bool) or not isinstance(p, int) or p < 0:
                raise v.fail(f"{where} is {_kind(p)}; expected a whole number >= 0 (the token's position)")
            if p > MAX_INDEX:
                raise v.fail(f"{where} is {_show(p)}, too large; expected a position below 2^53")
            out.append(p)
        positions = tuple(out)
    return Rope(base, layout, positions)


def write_rope(rope: Rope) -> list[str]:
    """Positions as whole numbers (not through the float writer: 2^53 itself must stay an integer)."""
    return ["[rope]", f"layout = {string(rope.layout)}", f"base = {float(rope.base)!r}",
            f"positions = [{', '.join(map(str, rope.positions))}]"]


TABLE: Table[Rope] = Table("rope", ROPE_KEYS, parse_rope, lambda rope: f"rope {rope.layout}", write_rope)
