"""The soft-cap in the exports (``softcap``): each head's capped scores in the JSON, the cap in the TOML; on a
worksheet, its rule and its step read backwards."""

from __future__ import annotations

from typing import Any

from qkv_tui.core.head import HeadResult
from qkv_tui.core.scenario import Scenario
from qkv_tui.core.variants import softcap
from qkv_tui.edges.export_toml import number
from qkv_tui.edges.faces import At, ExportFace, Fields
from qkv_tui.kernels.softcap import Capped


def head(h: HeadResult) -> Fields:
    return [("capped", h.read(Capped, lambda c: c.capped))]


def _one_cap(sc: Scenario) -> bool:
    """One cap for every [[heads]] table: written once, at the top level."""
    return len({h.softcap for h in sc.heads}) == 1 and sc.num_heads_split is None


def toml_top(sc: Scenario) -> list[str]:
    cap = sc.heads[0].softcap
    return [f"softcap = {number(cap)}"] if _one_cap(sc) and cap is not None else []


def toml_attention(sc: Scenario) -> list[str]:
    cap = sc.heads[0].softcap  # [attention] gives every head the same cap
    return [] if cap is None else [f"softcap = {number(cap)}"]


def toml_head(sc: Scenario, i: int) -> list[str]:
    cap = sc.heads[i].softcap
    return [f"softcap = {number(cap)}"] if not _one_cap(sc) and cap is not None else []


def sheet_back_rules(sc: Scenario) -> list[str]:
    if not any(h.softcap is not None for h in sc.heads):
        return []
    return ["  Soft-cap: dscaled = dS ⊙ (1 − tanh²(scaled / c)), from the printed scaled scores."]


def sheet_back_softmax(t: Any, chain: Any, h: int, hr: HeadResult, hg: Any) -> None:
    """dS through the soft-cap's step, from the printed scaled scores."""
    if hr.part(Capped) is None:
        return
    sc = chain.sc
    t(f"dcap.{h}", "dscaled", "dscaled = dS ⊙ (1 − tanh²(scaled / c)) (through the soft-cap)", hg.attend.dscaled,
      sc.labels, sc.key_labels, h, sc.allow)


def sheet_back_line(cells: Any, table: Any, i: int, j: int, answer: str, ops: Any) -> str | None:
    """dscaled through the soft-cap, from the printed scaled scores and the cap as given."""
    kind, _, suffix = table.key.partition(".")
    if kind != "dcap":
        return None
    from qkv_tui.edges.worksheet.backward.names import cell_name
    from qkv_tui.teach.stages.printed import exact

    sc, h = cells.sc, int(suffix)
    name = cell_name(table, i, j, (*sc.labels, *sc.key_labels))
    c = exact(float(sc.heads[h].softcap or 0.0))
    s = cells.txt(f"scaled.{h}", i, j)
    return (f"{name} = dS·(1 − tanh²(scaled / c)) = {cells.txt(f'dS.{h}', i, j)}·(1 − tanh({s} / {c})·tanh({s} / {c}))"
            f" = {answer}")


FACE = ExportFace(softcap.KEYS, head=head, head_at=At(after="b_V"), toml_top=toml_top, toml_attention=toml_attention,
                  toml_head=toml_head, toml_head_at=At(after="kv_head"), sheet_back_rules=sheet_back_rules,
                  sheet_back_softmax=sheet_back_softmax, sheet_back_line=sheet_back_line,
                  sheet_back_stages=((("dcap",), "dscale"),))
