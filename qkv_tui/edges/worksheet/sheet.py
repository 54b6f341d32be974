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
from qkv_tui.edges.faces import faces, placed
from qkv_tui.edges.worksheet.chain import Table, exact
from qkv_tui.edges.worksheet.content import Blank, WorksheetContent

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

    def columns(self, table: Table) -> tuple[int, ...]:
        """The columns of ``table`` the page prints (--heads: the asked heads' of a table of the layer)."""
        return self.ws.columns_of(table)

    def may_blank(self, table: Table, row: int, col: int) -> bool:
        """Whether some ``--seed`` could leave this cell blank: one of the cells the blanks are drawn from (make.py's
        _candidates: an asked table a student works, a cell not masked), on a sheet with blanks. A layout sized from
        these, not from the cells this seed left blank, is the same for every seed (render/typst.py)."""
        asked = self.ws.asked is None or table.key in self.ws.asked
        return bool(self.key) and table.blankable and asked and (table.allow is None or bool(table.allow[row, col]))

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
            body.append(Grid(table.heading, _suffix(ws, table) + _columns_note(ws, table), table))
    # --stages/--heads: the mask where an asked table of the forward reads it (its masked cells −∞ or 0); a backward
    # table's masked cells are printed as the 0 they are, never blank, and its lines write them so
    reads_mask = ws.asked is None or any(t.key in ws.asked and t.allow is not None and t.stage != "backward"
                                         for t in ws.tables)
    if not sc.allow.all() and reads_mask:
        mask = Table("mask", "mask", "", "scale", None, sc.allow.astype(np.float64), sc.labels, sc.key_labels, True, False)
        body.append(Grid("Mask (1 = the query may attend the key, 0 = masked)", "", mask))
    # a head's name on its sections where the sheet prints more than one head's tables (--heads 2 of two: none)
    multi = len({t.head for t in ws.tables} - {None}) > 1
    scale = []
    # --heads: the scale of the heads asked about (a table of the layer as a whole never reads a head left out)
    asked_heads = None if ws.asked is None else {t.head for t in ws.tables if t.key in ws.asked} - {None} or None
    for h, head in enumerate(comp.heads):
        if ask.scenario_has(sc, "state"):
            continue  # a running state in place of the softmax: no scores are scaled
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
        body.append(Grid(table.heading, _columns_note(ws, table)
                         + (GIVEN if ws.asked is not None and table.key not in ws.asked else ""), table))
    description = sc.description or ""
    return Sheet(ws, sc.title, description, intro(description), lead(sc), tuple(rules(ws)), tuple(body))


def _suffix(ws: WorksheetContent, table: Table) -> str:
    """`` (head 2)`` on a head's own table when there are several; K/V tables of shared heads name their readers."""
    heads = ws.comp.heads
    if (table.readers or table.head is None or len({t.head for t in ws.tables} - {None}) == 1
            or "K/V head" in table.heading):
        return ""
    return f" ({heads[table.head].name})"


def _columns_note(ws: WorksheetContent, table: Table) -> str:
    """`` (head 1's columns)`` on a table of the layer a --heads sheet prints only some heads' columns of
    (edges/worksheet/columns.py)."""
    if table.key not in ws.columns:
        return ""
    heads = sorted(t.head for t in ws.tables if t.head is not None)
    return f" ({' and '.join(dict.fromkeys(ws.comp.heads[h].name for h in heads))}'s columns)"


def rules(ws: WorksheetContent) -> list[str]:
    """The bullets under the title: how to work the page, and each variant stage it has."""
    comp = ws.comp
    sc = comp.scenario
    d = ws.decimals
    own: list[tuple[str, list[str]]] = [("work", [
        f"- Work from the numbers printed on this page, in order: every printed number was computed from the"
        f" printed numbers before it and rounded to {d} decimals, so your answer should match within one unit"
        f" of the last decimal.",
    ])]
    asks = _asks(ws)
    out: list[str] = []
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
    own.append(("norm", out))
    own.append(("biases", ["- Biases: a projection with a bias vector b adds b[j] to every cell of its column j"
                           " (Q = X·W_Q + b_Q)."]
                if (any(h.b_Q is not None or h.b_K is not None or h.b_V is not None for h in sc.heads)
                    or sc.b_O is not None) and (asks("project") or asks("wo")) else []))
    backward = any(t.stage == "backward" for t in ws.tables)
    # left out, the backward's rules give way to the line saying so
    own.append(("stages", [line for spec in ws.specs.values() if backward or spec.stage.key != "backward"
                           or not ws.left_out if asks(spec.stage.key) for line in spec.worksheet_rules(comp)]))
    own.append(("softmax", ["- Softmax, row by row: subtract the row's largest scaled score, take e to each difference,"
                            " divide each by their sum. Masked cells are −∞ and get weight 0."]
                # a state in place of the softmax: its stages' own rules
                if not ask.scenario_has(sc, "state") and asks("softmax") else []))
    own.append(("kv", ["- Grouped K/V heads: query heads that share a K/V head read the same K and V, printed once in"
                       " the section of the first head that reads them."]
                if (sc.num_kv_heads is not None or ws.kv_owners != list(range(len(sc.heads)))) and asks("project")
                else []))
    own.append(("left_out", [ws.left_out] if ws.left_out else []))
    own.append(("asked", [f"- This sheet asks about {ws.chosen} only (--stages, --heads): a table marked \"given\" is"
                          " printed whole, for the questions that read it; take its numbers as they are."
                          + (f" It leaves out {', '.join(ws.idle)}: [backward] does not train "
                             f"{'that weight' if len(ws.idle) == 1 else 'those weights'} (name the stage to ask them)."
                             if ws.idle else "")]
                if ws.asked is not None else []))
    # each variant's rule (edges/faces/) at its place
    extra = [(f.sheet_rules_at, [("", f.sheet_rules(ws, asks))]) for f in faces() if f.sheet_rules is not None]
    out = [line for _, lines in placed(own, extra) for line in lines]
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
