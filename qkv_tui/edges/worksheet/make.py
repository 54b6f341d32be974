"""A printable worksheet: the inputs, every stage's matrix with some cells left blank, and an answer key.

Every number on the page is computed from the numbers *shown* before it (rounded to the page's
decimals), not from the exact values behind them, so a student with a calculator who works
from the page gets the printed answer within one unit of its last digit. The inputs are
printed exactly as the scenario gives them. A blank's operands always sit in earlier tables
(shown, or blanks that come earlier on the page), so every blank can be filled in page order.

Every stage of docs/scenario-format.md, "What is computed", has its tables: the norm's row statistics and X̂, the ``+ b`` of a
projection, RoPE's cos/sin table and Q', K', ALiBi's ``slope·(j − i)``, a sink's extra term in
the softmax sum; heads that share a K/V head print its K and V once.
The page order, the blanks and the answer key live here; the tables in
:mod:`qkv_tui.edges.worksheet.chain`, which walks the stages (each builds its own tables and writes
its cells' arithmetic, through :mod:`qkv_tui.edges.worksheet.working`),
the Markdown in :mod:`qkv_tui.edges.worksheet.render.markdown`, which renders the content
(:mod:`qkv_tui.edges.worksheet.content`) that this module fills. The page's blocks, which the Markdown,
HTML and PDF all lay out, are in :mod:`qkv_tui.edges.worksheet.sheet` (docs/worksheets.md).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from qkv_tui.core.engine import Computation
from qkv_tui.core.part_questions import refusal
from qkv_tui.core.scenario import Scenario
from qkv_tui.edges.worksheet import adamw, select, sgd
from qkv_tui.edges.worksheet import columns as head_columns
from qkv_tui.edges.worksheet.backward.parts import stages_of
from qkv_tui.edges.worksheet.backward.tables import SHEET
from qkv_tui.edges.worksheet.chain import Table, page
from qkv_tui.edges.worksheet.content import BLANK, Blank, Cell, WorksheetContent
from qkv_tui.edges.worksheet.render.markdown import render
from qkv_tui.edges.worksheet.working import Working
from qkv_tui.teach import stages as stages_
from qkv_tui.teach.arith import MAX_TERMS
from qkv_tui.teach.trace import Trace

DEFAULT_BLANKS = "25%"

__all__ = [
    "BLANK",
    "DEFAULT_BLANKS",
    "Blank",
    "Table",
    "Worksheet",
    "WorksheetError",
    "build",
    "parse_blanks",
    "to_worksheet",
    "too_large",
]


class Worksheet(WorksheetContent):
    """A worksheet's content, and the page it prints as."""

    def markdown(self) -> str:
        return render(self)


class WorksheetError(ValueError):
    """A worksheet that cannot be made as asked (a bad --blanks, a scenario too large to work by hand)."""


def parse_blanks(spec: str) -> tuple[int | None, float | None]:
    """``"12"`` -> 12 cells; ``"25%"`` -> a quarter of the cells that can be blank."""
    text = spec.strip()
    try:
        number = float(text[:-1]) if text.endswith("%") else int(text)
    except ValueError:
        raise WorksheetError(f"--blanks {spec!r}: expected a number of cells (12) or a share (25%)") from None
    if text.endswith("%"):
        if not math.isfinite(number) or not 0 <= number <= 100:
            raise WorksheetError(f"--blanks {spec}: a share must be between 0% and 100%")
        return None, number / 100
    count = int(number)
    if count < 0:
        raise WorksheetError(f"--blanks {spec}: expected 0 or more cells")
    return count, None


def too_large(sc: Scenario) -> str | None:
    """Why a scenario is too large to work by hand (a sum of more than MAX_TERMS terms in some cell), or None.

    A real model's head (d_model 128, twenty tokens) would fill pages with 128-term sums of 17-digit
    numbers: the app and ``--export markdown`` show it; a worksheet is for sums a student can type in.
    """
    sizes = [(sc.X.shape[1], f"X has {sc.X.shape[1]} columns (each Q, K and V cell sums that many products)")]
    if sc.context_X is not None:
        sizes.append((sc.context_X.shape[1], f"the context's X has {sc.context_X.shape[1]} columns"))
    sizes.append((sc.m, f"there are {sc.m} keys (each softmax sums that many exponentials)"))
    d_k = max(head.d_k for head in sc.heads)
    sizes.append((d_k, f"d_k = {d_k} (each score sums that many products)"))
    if sc.W_O is not None:
        sizes.append((sc.W_O.shape[0], f"concat has {sc.W_O.shape[0]} columns (each final cell sums that many products)"))
    reasons = [why for size, why in sizes if size > MAX_TERMS]
    if not reasons:
        return None
    return (f"too large for a worksheet worked by hand: {'; '.join(reasons)}; a worksheet takes at most {MAX_TERMS}"
            " terms in a sum. Use --export markdown for every step of this scenario, or a smaller scenario")


def build(comp: Computation, blanks: str = DEFAULT_BLANKS, seed: int = 0, decimals: int = 3,
          stages: str | None = None, heads: Sequence[int] | None = None) -> Worksheet:
    """The worksheet of a computation; ``blanks`` as for :func:`parse_blanks`, chosen by ``seed`` among the tables
    ``stages`` and ``heads`` ask about (edges/worksheet/select.py; ``heads`` 1-based, as --heads is typed)."""
    sc = comp.scenario
    problem = too_large(sc)
    if problem is not None:
        raise WorksheetError(problem)
    refused = refusal(comp.heads, "worksheet")  # a head's part without printed tables yet says so (core/part_questions.py)
    if refused is not None:
        raise WorksheetError(refused)
    count, share = parse_blanks(blanks)
    try:
        selection = select.choose(comp, stages, heads)
    except select.SelectionError as exc:
        raise WorksheetError(str(exc)) from None
    tables, left_out = page(comp, decimals)
    adam = adamw.applies(comp)  # the step the Train view runs: AdamW's where the file says so (edges/worksheet/adamw.py)
    worked = any(t.stage == "backward" and not t.given for t in tables)
    if worked:  # the backward was worked: its step ends it
        tables += adamw.adamw_tables(tables, comp, decimals) if adam else sgd.sgd_tables(tables, comp, decimals)
    specs = {s.stage.key: s for s in stages_.REGISTRY}  # as registered now: each writes its tables' arithmetic
    if sc.backward is not None:  # the backward tables' lines and rule (edges/worksheet/backward/tables.py)
        specs[SHEET.stage.key] = SHEET
    # its rule only where the page has its tables; AdamW's too where it names the weights the page leaves to the app
    if any(t.stage == sgd.STAGE.key for t in tables) or (adam and worked and adamw.unmoved(comp)):
        specs[sgd.SHEET.stage.key] = adamw.SHEET if adam else sgd.SHEET
    by_key = {t.key: t for t in tables}
    work = Working(sc, by_key, decimals, specs, comp)
    columns = head_columns.asked_columns(comp, tables, selection.heads)
    asked, shown, idle = select.asked_and_shown(tables, selection, Trace(comp).stage_keys if not selection.everything
                                          else (), {} if selection.everything else _reads(work, tables, columns),
                                          stages_of(sc) if sc.backward is not None else None, sgd.untrained(comp))
    if not asked and not selection.everything:
        raise WorksheetError(f"--stages and --heads leave this worksheet nothing to ask ({selection.said}): no table"
                             " of those stages and heads has a number to work out; expected more stages or heads")
    idle_names = tuple(by_key[k].name for k in idle)
    tables = [t for t in tables if t.key in shown]
    sgd_keys = {t.key for t in tables if t.stage == sgd.STAGE.key}
    main = [c for c in _candidates(tables, asked, columns) if c[0] not in sgd_keys]
    steps = [c for c in _candidates(tables, asked, columns) if c[0] in sgd_keys]
    # the SGD step's blanks are drawn apart, after the rest: the sheet before it keeps the blanks it had
    if count is not None:
        in_steps = round(count * len(steps) / (len(main) + len(steps))) if steps else 0
        wanted_main, wanted_steps = count - in_steps, in_steps
    else:
        wanted_main, wanted_steps = round((share or 0.0) * len(main)), round((share or 0.0) * len(steps))
    chosen = _choose(main, min(wanted_main, len(main)), random.Random(seed))
    chosen += _choose(steps, min(wanted_steps, len(steps)), random.Random(f"{seed} sgd"))
    by_key = {t.key: t for t in tables}
    order = {t.key: n for n, t in enumerate(tables)}
    chosen.sort(key=lambda c: (order[c[0]], c[1], c[2]))
    result = tuple(
        Blank(n + 1, key, i, j, by_key[key].text(i, j, decimals), work.line(by_key[key], i, j))
        for n, (key, i, j) in enumerate(chosen)
    )
    return Worksheet(comp, tuple(tables), result, decimals, specs, left_out,
                     None if selection.everything else frozenset(asked), selection.said, idle_names,
                     {k: v for k, v in columns.items() if k in shown})


def _candidates(tables: list[Table], asked: set[str], columns: dict[str, tuple[int, ...]]) -> list[Cell]:
    """Every cell that may be blank: of an asked table that can be worked by hand, printed (--heads: columns.py), and
    not masked."""
    return [
        (t.key, i, j)
        for t in tables if t.blankable and t.key in asked
        for i in range(t.values.shape[0]) for j in columns.get(t.key, range(t.values.shape[1]))
        if t.allow is None or t.allow[i, j]
    ]


class _Reads(dict[str, Table]):
    """The page's tables, noting which an answer-key line looks up."""

    read: set[str]

    def __getitem__(self, key: str) -> Table:
        self.read.add(key)
        return super().__getitem__(key)


def _reads(work: Working, tables: list[Table], columns: dict[str, tuple[int, ...]]) -> dict[str, set[str]]:
    """For each table a student works, the tables its answer-key lines read (every printed cell's, the masked ones
    aside)."""
    record = _Reads(work.tables)
    work.tables = record
    out: dict[str, set[str]] = {}
    try:
        for t in tables:
            if t.given or not t.blankable:
                continue
            record.read = set()
            for i in range(t.values.shape[0]):
                for j in columns.get(t.key, range(t.values.shape[1])):
                    if t.allow is None or t.allow[i, j]:
                        work.line(t, i, j)
            out[t.key] = record.read - {t.key}
    finally:
        work.tables = dict(record)
    return out


def to_worksheet(comp: Computation, blanks: str = DEFAULT_BLANKS, seed: int = 0, decimals: int = 3) -> str:
    return build(comp, blanks, seed, decimals).markdown()


def _choose(candidates: list[Cell], k: int, rng: random.Random) -> list[Cell]:
    """k cells spread over the tables in proportion to their size (each table gets one while k allows)."""
    groups: dict[str, list[Cell]] = {}
    for cell in candidates:
        groups.setdefault(cell[0], []).append(cell)
    if k < len(groups):  # fewer blanks than tables: a random k of the tables get one each
        quota = dict.fromkeys(groups, 0)
        for key in rng.sample(sorted(groups), k):
            quota[key] = 1
    else:  # one each, the rest in proportion to the tables' sizes (largest remainders round up)
        quota = dict.fromkeys(groups, 1)
        left = k - len(groups)
        total = sum(len(g) - 1 for g in groups.values())
        exact = {key: left * (len(g) - 1) / total if total else 0.0 for key, g in groups.items()}
        for key in groups:
            quota[key] += int(exact[key])
        rest = k - sum(quota.values())
        for key in sorted(groups, key=lambda g: (-(exact[g] - int(exact[g])), g))[:rest]:
            quota[key] += 1
    chosen: list[Cell] = []
    for key, cells in groups.items():
        chosen += rng.sample(cells, min(quota[key], len(cells)))
    return chosen


