"""ALiBi in the exports ([alibi]): each head's bias in the JSON, and the worksheet's rules for it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from qkv_tui.core.head import HeadResult
from qkv_tui.core.scenario import Scenario
from qkv_tui.core.variants import alibi
from qkv_tui.edges.faces import At, ExportFace, Fields
from qkv_tui.kernels.alibi import Biased


def head(h: HeadResult) -> Fields:
    return [("bias", h.read(Biased, lambda b: b.bias))]


def sheet_back_rules(sc: Scenario) -> list[str]:
    if alibi.TABLE.of(sc) is None:
        return []
    return ["  ALiBi: the bias is added, so dS passes through it unchanged."]


def sheet_rules(ws: Any, asks: Callable[[str], bool]) -> list[str]:
    if alibi.TABLE.of(ws.comp.scenario) is None or not asks("scale"):
        return []
    return ["- ALiBi: each head adds slope·(j − i) to its scaled scores, j the key's position and i the"
            " query's: the further back the key, the lower its score."]


FACE = ExportFace(alibi.TABLE, head=head, head_at=At(before="kv_head"), sheet_back_rules=sheet_back_rules,
                  sheet_rules=sheet_rules)
