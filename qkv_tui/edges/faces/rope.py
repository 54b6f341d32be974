"""RoPE in the exports ([rope]): each head's turned Queries and Keys and the frequencies in the JSON; on a worksheet,
its rules and the cos/sin and turned Q and K as the page prints them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from qkv_tui.core.head import HeadResult
from qkv_tui.core.part_questions import scenario_answer
from qkv_tui.core.scenario import Scenario
from qkv_tui.core.variants import rope
from qkv_tui.edges.faces import At, ExportFace, Fields
from qkv_tui.kernels.attention import Turn
from qkv_tui.kernels.rope import Rotated


def head(h: HeadResult) -> Fields:
    return [("Q_rot", h.read(Rotated, lambda r: r.Q_rot)), ("K_rot", h.read(Rotated, lambda r: r.K_rot))]


def document(sc: Scenario, norm: Any, write_fields: Any) -> Fields:
    """The frequencies RoPE turns by, after scaling, with YaRN's attention factor and how many dims turn;
    null for plain RoPE (every dim turns at base^(−2i/d_k), all in "positions" and the heads' d_k) and without.
    Under [mla] the rope is its own, turning the d_rope rotary dimensions (DeepSeek's YaRN: its m² on the softmax
    scale is in each head's "scale")."""
    kept = scenario_answer(sc, "own_rope")  # a table that keeps [rope] for columns of its own: ([rope], their width)
    rope, width = (sc.rope, None) if kept is None else kept
    if rope is None or not sc.heads or (rope.partial == 1.0 and rope.scaling is None):
        return [("rope", None)]
    d_k = sc.heads[0].d_k if width is None else width  # [rope] needs one d_k for every head
    return [("rope", {"inv_freq": rope.inv_freq(d_k).tolist(), "attention_factor": rope.attention_factor,
                      "rotated_dims": rope.rotated(d_k)})]


def sheet_back_rules(sc: Scenario) -> list[str]:
    if sc.rope is None:
        return []
    return ["  RoPE: turn the gradients back by the opposite angle: a = a'·cos + b'·sin, b = −a'·sin + b'·cos."]


def sheet_printed(chain: Any, h: int, hr: HeadResult, weights: Any) -> tuple[list[object], dict[str, object]]:
    """Q and K turned as the page prints them (a K/V head's in its first reader's section)."""
    if chain.sc.rope is None:
        return [], {}
    return [Rotated(chain.values(f"Q_rot.{h}"), chain.values(f"K_rot.{chain.owners[h]}"))], {}


def sheet_trig(chain: Any) -> dict[int, Turn] | None:
    """RoPE's cos and sin by d_k, as printed in the cos/sin tables."""
    sc = chain.sc
    if sc.rope is None:
        return None
    from qkv_tui.teach.stages.rotate import _trig_tables

    trig = chain.memo("trig", lambda: _trig_tables(chain))
    return {d_k: Turn(cos, sin, sc.rope.pairs(d_k)) for d_k, (cos, sin, _) in trig.items()}


def sheet_rules(ws: Any, asks: Callable[[str], bool]) -> list[str]:
    """How the page turns Q and K, with the cos/sin table's decimals where it prints more than the page's."""
    sc, d = ws.comp.scenario, ws.decimals
    if sc.rope is None or not asks("rotate"):
        return []
    from qkv_tui.teach.stages.rotate import rope_notes

    d_k = ws.comp.heads[0].d_k
    shown = ", ".join(f"({a}, {b})" for a, b in sc.rope.pairs(d_k))
    places = max((t.places or d for t in ws.tables if t.name == "cos/sin"), default=d)
    guard = (f" (printed to {places} decimals: with fewer, the turned values could miss the page's last digit)"
             if places > d else "")
    return [f"- Rotate (RoPE, {sc.rope.layout} layout): Q and K (never V) turn in pairs of dimensions"
            f" {shown}; pair i of a token at position p turns by the angle p·θᵢ, θᵢ = {_base(sc.rope.base)}^(−2i/dₖ):"
            f" a' = a·cos − b·sin, b' = a·sin + b·cos, with cos and sin read from the table{guard}."
            " The scores then use Q' and K'.", *rope_notes(sc.rope, d_k)]


def _base(base: float) -> str:
    return str(int(base)) if base == round(base) and abs(base) < 1e15 else f"{base:g}"


def sheet_scored(sc: Scenario) -> tuple[str, str, str] | None:
    """Q' and K', the turned tables (Q_rot.h), and dQ turned back (dQt.h)."""
    return None if sc.rope is None else ("'", "{role}_rot", "d{r}t")


def sheet_back_line(cells: Any, table: Any, i: int, j: int, answer: str, ops: Any) -> str | None:
    """RoPE read backwards: a = a'·cos + b'·sin, b = −a'·sin + b'·cos (the rotation by the opposite angle)."""
    kind, _, suffix = table.key.partition(".")
    if kind not in ("dQt", "dKt"):
        return None
    sc, role, h = cells.sc, kind[1], int(suffix)
    assert sc.rope is not None
    d_k = sc.heads[h].d_k
    src = f"d{role}u.{h}"
    name = f"{table.name}[{table.rows[i]},{j}]"
    found = next(((k, pair) for k, pair in enumerate(sc.rope.pairs(d_k)) if j in pair), None)
    if found is None:  # partial rotary: passed through
        return f"{name} = {cells.txt(src, i, j)} = {answer}"
    k, (a, b) = found
    trig = f"trig.{d_k}"
    # a K row's position is its key's; the cos/sin table is the queries' rows, the same tokens in self-attention
    cos, sin = cells.txt(trig, i, 2 * k), cells.txt(trig, i, 2 * k + 1)
    va, vb = cells.txt(src, i, a), cells.txt(src, i, b)
    if j == a:
        return f"{name} = {role}'a·cos + {role}'b·sin = {va}·{cos} + {vb}·{sin} = {answer}"
    return f"{name} = −{role}'a·sin + {role}'b·cos = -{va}·{sin} + {vb}·{cos} = {answer}"


FACE = ExportFace(rope.TABLE, head=head, head_at=At(before="kv_head"), document=document,
                  document_at=At(after="b_O"), sheet_back_rules=sheet_back_rules,
                  sheet_printed=sheet_printed, sheet_trig=sheet_trig, sheet_scored=sheet_scored,
                  sheet_back_line=sheet_back_line,
                  sheet_rules=sheet_rules, sheet_rules_at=At(before="softmax"),
                  sheet_back_stages=((("dQt", "dKt"), "drotate"),))
