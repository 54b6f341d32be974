"""What goes on a worksheet, in page order, once for every format: the title, the rules, the sections and their
tables, the answer key.

The Markdown (:mod:`qkv_tui.edges.worksheet.render.markdown`), Typst (:mod:`qkv_tui.edges.worksheet.render.typst`) and HTML
(:mod:`qkv_tui.edges.worksheet.render.html`) renderers each lay out this one list of blocks, so no format can print a
number, a rule or a blank that the others do not. Lines keep the Markdown's own words (``- `` starts a bullet,
two spaces continue it, an empty line ends a group): the Markdown page prints them as they are, the typeset
pages read the same structure from them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from qkv_tui.core import part_questions as ask
from qkv_tui.core.variants.alibi import TABLE as ALIBI
from qkv_tui.edges.worksheet.chain import Table, exact
from qkv_tui.edges.worksheet.content import Blank, WorksheetContent
from qkv_tui.teach.stages.rotate import rope_notes

if TYPE_CHECKING:
    from qkv_tui.core.scenario import Scenario

GIVEN = " (given)"  # a table printed for the asked ones to read (edges/worksheet/select.py)
def lead(sc: Scenario) -> tuple[str, str, str]:
    """The line under the title: text, the formula (set as math; empty where the page has none), text; the
    scenario's tables say what its heads compute (core/part_questions.lead)."""
    words, formula = ask.lead(sc)
    return (words, formula, ", by hand. Fill in each numbered blank." if formula else
            " by hand. Fill in each numbered blank.")


@dataclass(frozen=True)
class Heading:
    text: str  # "Inputs", "Project (head 2)"


@dataclass(frozen=True)
class Lines:
    lines: tuple[str, ...]  # bullets, their continuations and paragraphs, as the Markdown writes them


@dataclass(frozen=True)
class Grid:
    caption: str  # the table's formula or name: "Q = X·W_Q", "W_Q"
    suffix: str  # " (head 2)" where the caption alone does not say whose it is
    table: Table


Block = Heading | Lines | Grid


@dataclass(frozen=True, eq=False)
class Sheet:
    ws: WorksheetContent
    title: str
    description: str  # the scenario's, whole
    intro: str  # the part of it that gives no answer away (see intro() and docs/worksheets.md)
    lead: tuple[str, str, str]  # the line under the title (lead())
    rules: tuple[str, ...]
    body: tuple[Block, ...]  # the inputs and every stage's section, up to the answer key

    @property
    def names(self) -> tuple[str, ...]:
        """The scenario's own words on the page (tokens, head names): printed as text, never read as math."""
        sc = self.ws.comp.scenario
        return (*sc.tokens, *sc.key_tokens, *(h.name for h in self.ws.comp.heads))

    @property
    def key(self) -> tuple[Blank, ...]:
        return self.ws.blanks

    def cell(self, table: Table, row: int, col: int) -> str | Blank:
        """A cell as printed, or the blank in its place."""
        blank = self.ws.blank_at(table.key, row, col)
        return blank if blank is not None else table.text(row, col, self.ws.decimals)


_SENTENCE_END = re.compile(r"(?<=[.!?])[\"”)]?\s+(?=[A-Z\"“(])")


def intro(description: str) -> str:
    """The description's leading sentences, up to the first that holds a digit: any number in it may be a cell
    the page leaves blank ("I's output [1.000, 1.637, 0.070]"), and which words around a number give it away
    cannot be told, so every format's sheet stops before the first number."""
    kept: list[str] = []
    for sentence in _SENTENCE_END.split(" ".join(description.split())):
        if any(ch.isdigit() for ch in sentence):
            break
        kept.append(sentence)
    return " ".join(kept)


def sheet(ws: WorksheetContent) -> Sheet:
    comp = ws.comp
    sc = comp.scenario
    body: list[Block] = [Heading("Inputs")]
    for table in ws.tables:
        if table.given:
            body.append(Grid(table.heading, _suffix(ws, table), table))
    if not sc.allow.all():
        mask = Table("mask", "mask", "", "scale", None, sc.allow.astype(np.float64), sc.labels, sc.key_labels, True, False)
        body.append(Grid("Mask (1 = the query may attend the key, 0 = masked)", "", mask))
    multi = len(comp.heads) > 1
    scale = []
    # --heads: the scale of the heads asked about (a table of the layer as a whole never reads a head left out)
    asked_heads = None if ws.asked is None else {t.head for t in ws.tables if t.key in ws.asked} - {None} or None
    for h, head in enumerate(comp.heads):
        if sc.linear is not None or sc.deltanet is not None:
            continue  # no scores are scaled
        if asked_heads is not None and h not in asked_heads:
            continue
        divisor = f"√{head.d_k} (dₖ = {head.d_k})" if head.scale_is_default else f"{exact(head.scale)} (set by the scenario)"
        # a default divisor that is not √dₖ: a map scoring part of dₖ ([differential]'s halves), √ of its width
        width = round(head.scale * head.scale) if head.scale_is_default else head.d_k
        if width != head.d_k:
            divisor = f"√{width} (each map scores {width} of the head's dₖ = {head.d_k} columns)"
        scale.append(f"- Scale{f' ({head.name})' if multi else ''}: divide every score by {divisor}.")
    body.append(Lines((*scale, "")))
    last_section = ""
    for table in ws.tables:
        if table.given:
            continue
        suffix = f" ({comp.heads[table.head].name})" if multi and table.head is not None else ""
        spec = ws.specs[table.stage]  # the section is named for the stage whose table it is
        section = f"{spec.stage.name}{suffix}"
        if section != last_section:
            body.append(Heading(section))
            last_section = section
            if table.head is not None and (note := spec.worksheet_note(comp, ws.kv_owners, table.head)):
                body.append(Lines(tuple(note)))
        body.append(Grid(table.heading, GIVEN if ws.asked is not None and table.key not in ws.asked else "", table))
    description = sc.description or ""
    return Sheet(ws, sc.title, description, intro(description), lead(sc), tuple(rules(ws)), tuple(body))


def _suffix(ws: WorksheetContent, table: Table) -> str:
    """`` (head 2)`` on a head's own table when there are several; K/V tables of shared heads name their readers."""
    heads = ws.comp.heads
    if table.readers or table.head is None or len(heads) == 1 or "K/V head" in table.heading:
        return ""
    return f" ({heads[table.head].name})"


def rules(ws: WorksheetContent) -> list[str]:
    """The bullets under the title: how to work the page, and each variant stage it has."""
    comp = ws.comp
    sc = comp.scenario
    d = ws.decimals
    out = [
        f"- Work from the numbers printed on this page, in order: every printed number was computed from the"
        f" printed numbers before it and rounded to {d} decimals, so your answer should match within one unit"
        f" of the last decimal.",
    ]
    asks = _asks(ws)
    if sc.norm is not None and asks("norm"):
        if sc.norm.kind == "rms":
            out.append("- Norm (RMSNorm), row by row: ms = the mean of the row's squares; each cell"
                       " X̂ = x / √(ms + eps)·γ.")
        else:
            out.append("- Norm (LayerNorm), row by row: mean, then var = the mean of (x − mean)²; each cell"
                       " X̂ = (x − mean) / √(var + eps)·γ + β.")
        reads = ("Q is computed from X̂ (K and V from the context's X, as given)" if sc.is_cross
                 else "Q, K and V are computed from X̂")
        out.append(f"  eps = {float(sc.norm.eps)!r}. {reads}.")
    if (any(h.b_Q is not None or h.b_K is not None or h.b_V is not None for h in sc.heads) or sc.b_O is not None) and (
            asks("project") or asks("wo")):
        out.append("- Biases: a projection with a bias vector b adds b[j] to every cell of its column j"
                   " (Q = X·W_Q + b_Q).")
    backward = any(t.stage == "backward" for t in ws.tables)
    # left out, the backward's rules give way to the line saying so
    out += [line for spec in ws.specs.values() if backward or spec.stage.key != "backward" or not ws.left_out
            if asks(spec.stage.key) for line in spec.worksheet_rules(comp)]
    if sc.rope is not None and asks("rotate"):
        shown = ", ".join(f"({a}, {b})" for a, b in sc.rope.pairs(comp.heads[0].d_k))
        places = max((t.places or d for t in ws.tables if t.name == "cos/sin"), default=d)
        guard = (f" (printed to {places} decimals: with fewer, the turned values could miss the page's last digit)"
                 if places > d else "")
        out.append(f"- Rotate (RoPE, {sc.rope.layout} layout): Q and K (never V) turn in pairs of dimensions"
                   f" {shown}; pair i of a token at position p turns by the angle p·θᵢ, θᵢ = {_base(sc.rope.base)}^(−2i/dₖ):"
                   f" a' = a·cos − b·sin, b' = a·sin + b·cos, with cos and sin read from the table{guard}."
                   " The scores then use Q' and K'.")
        out.extend(rope_notes(sc.rope, comp.heads[0].d_k))
    if sc.linear is None and sc.deltanet is None and asks("softmax"):  # those keep a state instead (their stages' own rules)
        out.append("- Softmax, row by row: subtract the row's largest scaled score, take e to each difference, divide each"
                   " by their sum. Masked cells are −∞ and get weight 0.")
    if ALIBI.of(sc) is not None and asks("scale"):
        out.append("- ALiBi: each head adds slope·(j − i) to its scaled scores, j the key's position and i the"
                   " query's: the further back the key, the lower its score.")
    if any(h.sink is not None for h in sc.heads) and asks("softmax"):
        out.append("- Attention sink: a head with a sink adds one more term, e^(sink − m), to each row's sum, where m"
                   " is the larger of the row's largest scaled score and the sink; nothing gets that share, so the"
                   " row's weights sum to less than 1.")
    if (sc.num_kv_heads is not None or ws.kv_owners != list(range(len(sc.heads)))) and asks("project"):
        out.append("- Grouped K/V heads: query heads that share a K/V head read the same K and V, printed once in"
                   " the section of the first head that reads them.")
    if ws.left_out:
        out.append(ws.left_out)
    if ws.asked is not None:
        out.append(f"- This sheet asks about {ws.chosen} only (--stages, --heads): a table marked \"given\" is"
                   " printed whole, for the questions that read it; take its numbers as they are.")
    out.append(
        f"- Query tokens: {', '.join(sc.tokens)}"
        + (f"; key/value tokens from the context: {', '.join(sc.key_tokens)}" if sc.is_cross else "")
        + f"; mask: {sc.mask_kind}; heads: {len(comp.heads)}; blanks: {len(ws.blanks)}."
    )
    return out


def _asks(ws: WorksheetContent) -> Callable[[str], bool]:
    """Whether the sheet asks about a table of the stage (a worksheet section's key): every stage without
    --stages and --heads, else those of the tables it asks about."""
    if ws.asked is None:
        return lambda _stage: True
    stages = {t.stage for t in ws.tables if t.key in ws.asked}
    return stages.__contains__


def _base(base: float) -> str:
    return str(int(base)) if base == round(base) and abs(base) < 1e15 else f"{base:g}"


def items(lines: tuple[str, ...] | list[str]) -> list[tuple[bool, str]]:
    """Lines as (is_bullet, text): a ``- `` line starts a bullet, a two-space line continues it, any other
    non-empty line is a paragraph of its own."""
    out: list[tuple[bool, str]] = []
    for line in lines:
        if line.startswith("- "):
            out.append((True, line[2:]))
        elif line.startswith("  ") and out and out[-1][0]:
            out[-1] = (True, f"{out[-1][1]} {line.strip()}")
        elif line.strip():
            out.append((False, line.strip()))
    return out


def minus(cell: str) -> str:
    """A printed negative number with the typeset minus sign (−2, not -2), as the formulas set it."""
    return "−" + cell[1:] if cell[:1] == "-" and cell[1:2].isdigit() else cell
