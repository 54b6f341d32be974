"""Soft-capped logits (Gemma 2): ``softcap`` at the top level for every head, in a ``[[heads]]`` table for that
head, or in ``[attention]``; the scaled scores become softcap·tanh(scaled / softcap) before the bias and the
mask (docs/scenario-format.md, "softcap")."""

from __future__ import annotations

from typing import Any

from qkv_tui.core.variants.common import Checker, Faces, Features, Keys, positive

KEY = "softcap"  # the same key at the top level, in [[heads]] and in [attention]


def parse_softcap(v: Checker, table: dict[str, Any], where: str, inherited: float | None = None) -> float | None:
    """A table's own ``softcap`` (finite, > 0), or the one it inherits from the top level."""
    if KEY not in table:
        return inherited
    key = f"{where} {KEY}" if where else KEY
    return positive(v, table[KEY], key, " (the cap c in c·tanh(s/c))")


def caps_of(sc: Features) -> list[float | None]:
    return [getattr(h, "softcap", None) for h in sc.heads]


def summary_parts(sc: Features) -> list[str]:
    caps = [c for c in caps_of(sc) if c is not None]
    if not caps:
        return []
    return [f"softcap {'/'.join(f'{c:g}' for c in dict.fromkeys(caps))}"]


KEYS = Keys(summary_parts, faces=Faces(head="qkv_tui.core.softcap_part:softcap_part",
                                   edit="qkv_tui.core.variants.softcap_edit"))
