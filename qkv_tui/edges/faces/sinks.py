"""The attention sink in the exports (``sink``/``sinks``): each head's logit in the JSON and the TOML; on a worksheet,
its rules, its share and gradient tables, and its SGD step."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from qkv_tui.core.head import HeadResult
from qkv_tui.core.scenario import Scenario
from qkv_tui.core.variants import sinks
from qkv_tui.edges.export_toml import number, vector
from qkv_tui.edges.faces import At, ExportFace, Fields
from qkv_tui.kernels.sinks import Sunk


def head(h: HeadResult) -> Fields:
    return [("sink", h.read(Sunk, lambda s: s.sink))]


def toml_attention(sc: Scenario) -> list[str]:
    if sc.heads[0].sink is None:
        return []
    return [f"sinks = {vector(h.sink for h in sc.heads if h.sink is not None)}"]


def toml_head(sc: Scenario, i: int) -> list[str]:
    sink = sc.heads[i].sink
    return [] if sink is None else [f"sink = {number(sink)}"]


def sgd_table(by_key: dict[str, Any], h: int, lr: float, d: int) -> Any:
    """Head h's new sink logit: the sinks table's column h, less lr times the head's dsink."""
    from qkv_tui.edges.worksheet.sgd import STAGE
    from qkv_tui.kernels.policy import round_to
    from qkv_tui.teach.stages.printed import Table

    logits, g = by_key.get("sinks"), by_key.get(f"dsink.{h}")
    if logits is None or g is None or h >= logits.values.shape[1] or not np.isfinite(logits.values[0, h]):
        return None
    with np.errstate(over="ignore", invalid="ignore"):
        new = round_to(np.array([[logits.values[0, h] - lr * g.values[0, 0]]]), d)
    if not np.isfinite(new).all():
        return None
    return Table(f"sgd.sink.{h}", "new sink", "new sink = sink − lr·dsink", STAGE.key, h, new, ("sink",), ("new",),
                 False, True)


def sgd_operands(key: str) -> tuple[str, str, int] | None:
    """The sinks table, the head's dsink and its column, for a new-sink table's key."""
    if not key.startswith("sink."):
        return None
    h = int(key.partition(".")[2])
    return "sinks", f"dsink.{h}", h


def sheet_back_rules(sc: Scenario) -> list[str]:
    if not any(h.sink is not None for h in sc.heads):
        return []
    return ["  Sink: its share of a row is p_sink = 1 − Σ weights, and dsink = −Σ p_sink·D."]


def sheet_back_softmax(t: Any, chain: Any, h: int, hr: HeadResult, hg: Any) -> None:
    """The sink's share of each row, from the printed weights, and its gradient."""
    if hr.part(Sunk) is None:
        return
    a, sc = hg.attend, chain.sc
    assert a.dsink is not None
    t(f"psink.{h}", "p_sink", "p_sink = 1 − Σ weights (each row's sink share)",
      chain.rounded(1.0 - hr.weights.sum(axis=1))[:, None], sc.labels, ("p",), h)
    t(f"dsink.{h}", "dsink", "dsink = −Σ p_sink·D", np.array([[a.dsink]]), ("sink",), ("d",), h)


def sheet_printed(chain: Any, h: int, hr: HeadResult, weights: Any) -> tuple[list[object], dict[str, object]]:
    """The sink's share of each row is what the printed weights leave: each row's sum is then 1."""
    sunk = hr.part(Sunk)
    if sunk is None:
        return [], {}
    return [dataclasses.replace(sunk, sink_exp=1.0 - weights.sum(axis=1))], {"row_sum": np.ones(chain.sc.n)}


def sheet_rules(ws: Any, asks: Callable[[str], bool]) -> list[str]:
    if not any(h.sink is not None for h in ws.comp.scenario.heads) or not asks("softmax"):
        return []
    return ["- Attention sink: a head with a sink adds one more term, e^(sink − m), to each row's sum, where m"
            " is the larger of the row's largest scaled score and the sink; nothing gets that share, so the"
            " row's weights sum to less than 1."]


def sheet_back_line(cells: Any, table: Any, i: int, j: int, answer: str, ops: Any) -> str | None:
    """The sink's share of a row from the printed weights, and its gradient from the shares and D."""
    kind, _, suffix = table.key.partition(".")
    if kind not in ("psink", "dsink"):
        return None
    from qkv_tui.edges.worksheet.backward.names import cell_name

    sc, h, tx = cells.sc, int(suffix), cells.txt
    if kind == "psink":
        name = cell_name(table, i, j, (*sc.labels, *sc.key_labels))
        body = " − ".join([tx(f"weights.{h}", i, b) for b in range(sc.m) if sc.allow[i, b]])
        return f"{name} = 1 − Σ weights[{sc.labels[i]}] = 1 − {body} = {answer}"
    body = " + ".join(f"{tx(f'psink.{h}', a, 0)}·{tx(f'D.{h}', a, 0)}" for a in range(sc.n)) or "0"
    return f"dsink = −Σ p_sink·D = −({body}) = {answer}"


FACE = ExportFace(sinks.KEYS, head=head, head_at=At(before="kv_head"), toml_attention=toml_attention,
                  toml_head=toml_head, toml_head_at=At(before="kv_head"), sgd_own=("sinks", sgd_table, sgd_operands),
                  sheet_back_rules=sheet_back_rules,
                  sheet_back_softmax=sheet_back_softmax, sheet_back_line=sheet_back_line,
                  sheet_printed=sheet_printed,
                  sheet_rules=sheet_rules,
                  sheet_back_stages=((("psink", "dsink"), "dsoftmax"),))
