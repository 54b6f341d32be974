"""A printable worksheet: the inputs, every stage's matrix with some cells left blank, and an answer key.

Every number on the page is computed from the numbers *shown* before it (rounded to the page's
decimals), not from the exact values behind them, so a student with a calculator who works
from the page gets the printed answer within one unit of its last digit. The inputs are
printed exactly as the scenario gives them. A blank's operands always sit in earlier tables
(shown, or blanks that come earlier on the page), so every blank can be filled in page order.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from qkv_tui.core.engine import Computation
from qkv_tui.core.fmt import NEG_INF, fmt, is_integral
from qkv_tui.core.scenario import Matrix, Scenario

DEFAULT_BLANKS = "25%"
BLANK = "______"
Cell = tuple[str, int, int]  # (table key, row, col)


@dataclass(frozen=True, eq=False)
class Table:
    """One matrix on the page, as printed."""

    key: str  # unique on the page: "X", "W_Q.0", "scores.1", "final"
    name: str  # the matrix's name in arithmetic: "Q", "W_Q", "scores"
    heading: str  # "Q = X·W_Q"
    stage: str  # the trace's stage key, for the section it sits in
    head: int | None
    values: Matrix  # as printed: computed from the printed operands, then rounded
    rows: tuple[str, ...]
    cols: tuple[str, ...]
    given: bool  # an input of the scenario: printed as given, never blank
    blankable: bool  # False for inputs and for concat (a copy, nothing to compute)
    allow: np.ndarray | None = None  # scaled/weights: False where the mask forbids (−∞ / 0, never blank)

    def text(self, row: int, col: int, decimals: int) -> str:
        """A cell as printed."""
        value = float(self.values[row, col])
        if self.given:
            return _exact(value)
        if self.name == "scaled" and self.allow is not None and not self.allow[row, col]:
            return NEG_INF
        integral = self.name != "weights" and is_integral(self.values)
        return fmt(value, integral, decimals)


@dataclass(frozen=True)
class Blank:
    number: int  # 1-based, in page order
    table: str
    row: int
    col: int
    answer: str  # as it would have been printed
    working: str  # the arithmetic from the printed operands


@dataclass(frozen=True, eq=False)
class Worksheet:
    comp: Computation
    tables: tuple[Table, ...]
    blanks: tuple[Blank, ...]
    decimals: int

    def table(self, key: str) -> Table:
        return next(t for t in self.tables if t.key == key)

    def blank_at(self, key: str, row: int, col: int) -> Blank | None:
        return self._blank_index.get((key, row, col))

    @cached_property
    def _blank_index(self) -> dict[Cell, Blank]:
        return {(b.table, b.row, b.col): b for b in self.blanks}

    def markdown(self) -> str:
        return _render(self)


class WorksheetError(ValueError):
    """A worksheet that cannot be made as asked (a bad --blanks, a scenario feature it does not cover)."""


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


def unsupported(sc: Scenario) -> str | None:
    """A scenario feature the worksheet does not print yet, named; None when every stage is covered."""
    for feature, label in (("norm", "[norm]"), ("rope", "[rope]"), ("alibi", "[alibi]")):
        if getattr(sc, feature, None) is not None:
            return label
    for head in sc.heads:
        for extra, label in (("b_Q", "b_Q"), ("b_K", "b_K"), ("b_V", "b_V"), ("sink", "sink")):
            if getattr(head, extra, None) is not None:
                return label
    if getattr(sc, "b_O", None) is not None:
        return "b_O"
    return None


def build(comp: Computation, blanks: str = DEFAULT_BLANKS, seed: int = 0, decimals: int = 3) -> Worksheet:
    """The worksheet of a computation; ``blanks`` as for :func:`parse_blanks`, chosen by ``seed``."""
    sc = comp.scenario
    feature = unsupported(sc)
    if feature is not None:
        raise WorksheetError(f"worksheets do not cover {feature} yet; use --export markdown for this scenario")
    count, share = parse_blanks(blanks)
    tables = _tables(comp, decimals)
    candidates = [
        (t.key, i, j)
        for t in tables if t.blankable
        for i in range(t.values.shape[0]) for j in range(t.values.shape[1])
        if t.allow is None or t.allow[i, j]
    ]
    wanted = count if count is not None else round((share or 0.0) * len(candidates))
    chosen = _choose(candidates, min(wanted, len(candidates)), random.Random(seed))
    by_key = {t.key: t for t in tables}
    order = {t.key: n for n, t in enumerate(tables)}
    chosen.sort(key=lambda c: (order[c[0]], c[1], c[2]))
    work = _Working(comp, by_key, decimals)
    result = tuple(
        Blank(n + 1, key, i, j, by_key[key].text(i, j, decimals), work.line(by_key[key], i, j))
        for n, (key, i, j) in enumerate(chosen)
    )
    return Worksheet(comp, tuple(tables), result, decimals)


def to_worksheet(comp: Computation, blanks: str = DEFAULT_BLANKS, seed: int = 0) -> str:
    return build(comp, blanks, seed).markdown()


# --- the printed chain ---------------------------------------------------------------------


def _exact(x: float) -> str:
    """An input as the scenario gives it: ``1``, ``0.25``, ``-1.5`` (shortest exact form, no rounding)."""
    if x == round(x) and abs(x) < 1e15:
        return str(int(x))
    return np.format_float_positional(x, trim="-")


def _tables(comp: Computation, d: int) -> list[Table]:
    sc = comp.scenario
    r: Callable[[Matrix], Matrix] = lambda a: np.round(a, d)
    tokens, keys = sc.tokens, sc.key_tokens

    def idx(count: int) -> tuple[str, ...]:
        return tuple(str(i) for i in range(count))

    out: list[Table] = [Table("X", "X", "X (embeddings)", "embed", None, sc.X, tokens, idx(sc.X.shape[1]), True, False)]
    if sc.context_X is not None:
        out.append(Table("context_X", "X_ctx", "X_ctx (the context's embeddings)", "embed", None, sc.context_X,
                         keys, idx(sc.context_X.shape[1]), True, False))
    xs = "X_ctx" if sc.is_cross else "X"
    outputs = []
    for h, head in enumerate(comp.heads):
        for role in ("Q", "K", "V"):
            W = getattr(head, f"W_{role}")
            out.append(Table(f"W_{role}.{h}", f"W_{role}", f"W_{role}", "project", h, W, idx(W.shape[0]), idx(W.shape[1]),
                             True, False))
        Q = r(sc.X @ head.W_Q)  # (n, d_k): the inputs are exact, so only the product is rounded
        K = r(sc.X_kv @ head.W_K)  # (m, d_k)
        V = r(sc.X_kv @ head.W_V)  # (m, d_v)
        scores = r(Q @ K.T)  # (n, m) from the printed Q and K
        scaled = r(scores / head.scale)  # (n, m) from the printed scores
        masked = np.where(sc.allow, scaled, -np.inf)
        shifted = masked - masked.max(axis=1)[:, None]
        exps = np.exp(shifted)  # (n, m); 0 where masked
        weights = r(exps / exps.sum(axis=1)[:, None])  # (n, m) from the printed scaled row
        output = r(weights @ V)  # (n, d_v) from the printed weights and V
        outputs.append(output)
        out += [
            Table(f"Q.{h}", "Q", "Q = X·W_Q", "project", h, Q, tokens, idx(head.d_k), False, True),
            Table(f"K.{h}", "K", f"K = {xs}·W_K", "project", h, K, keys, idx(head.d_k), False, True),
            Table(f"V.{h}", "V", f"V = {xs}·W_V", "project", h, V, keys, idx(head.d_v), False, True),
            Table(f"scores.{h}", "scores", "scores = Q·Kᵀ", "score", h, scores, tokens, keys, False, True),
            Table(f"scaled.{h}", "scaled", f"scaled = scores / {_divisor(comp, h, d)}", "scale", h, scaled, tokens, keys,
                  False, True, sc.allow),
            Table(f"weights.{h}", "weights", "weights = softmax(scaled), row by row", "softmax", h, weights, tokens, keys,
                  False, True, sc.allow),
            Table(f"output.{h}", "output", "output = weights·V", "mix", h, output, tokens, idx(head.d_v), False, True),
        ]
    concat = np.concatenate(outputs, axis=1)  # (n, sum d_v): the printed outputs side by side
    if len(comp.heads) > 1:
        out.append(Table("concat", "concat", "concat = [" + " | ".join(h.name for h in comp.heads) + "]", "concat", None,
                         concat, tokens, idx(concat.shape[1]), False, False))
    if comp.W_O is not None:
        out.append(Table("W_O", "W_O", "W_O", "wo", None, comp.W_O, idx(comp.W_O.shape[0]), idx(comp.W_O.shape[1]),
                         True, False))
        source = "concat" if len(comp.heads) > 1 else "output"
        out.append(Table("final", "final", f"final = {source}·W_O", "wo", None, r(concat @ comp.W_O), tokens,
                         idx(comp.W_O.shape[1]), False, True))
    return out


def _divisor(comp: Computation, h: int, d: int) -> str:
    head = comp.heads[h]
    return f"√{head.d_k}" if head.scale_is_default else _exact(head.scale)


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


class _Working:
    """The arithmetic of one cell, written with the printed operands."""

    def __init__(self, comp: Computation, tables: dict[str, Table], decimals: int) -> None:
        self.comp = comp
        self.tables = tables
        self.d = decimals

    def txt(self, key: str, row: int, col: int) -> str:
        text = self.tables[key].text(row, col, self.d)
        return f"({text})" if text.startswith("-") else text

    def dot(self, left: str, row: int, right: str, col: int) -> str:
        width = self.tables[left].values.shape[1]
        return " + ".join(f"{self.txt(left, row, c)}·{self.txt(right, c, col)}" for c in range(width))

    def line(self, table: Table, i: int, j: int) -> str:
        sc = self.comp.scenario
        h = table.head
        s = f".{h}" if h is not None else ""
        answer = table.text(i, j, self.d)
        q = (sc.key_tokens if table.name in ("K", "V") else sc.tokens)[i]
        if table.name in ("Q", "K", "V"):
            label = (sc.tokens if table.name == "Q" else sc.key_tokens)[i]
            source = "context_X" if sc.is_cross and table.name != "Q" else "X"
            xs = "X_ctx" if source == "context_X" else "X"
            return (f"{table.name}[{label},{j}] = {xs}[{label}]·W_{table.name}[:,{j}]"
                    f" = {self.dot(source, i, f'W_{table.name}{s}', j)} = {answer}")
        if table.name == "scores":
            k = sc.key_tokens[j]
            width = self.tables[f"Q{s}"].values.shape[1]
            terms = " + ".join(f"{self.txt(f'Q{s}', i, c)}·{self.txt(f'K{s}', j, c)}" for c in range(width))
            return f"scores[{q},{k}] = Q[{q}]·K[{k}] = {terms} = {answer}"
        if table.name == "scaled":
            assert h is not None
            score = self.txt(f"scores{s}", i, j)
            return f"scaled[{q},{sc.key_tokens[j]}] = {score} / {_divisor(self.comp, h, self.d)} = {answer}"
        if table.name == "weights":
            return self.softmax(s, i, j, answer)
        if table.name == "output":
            return f"output[{q},{j}] = weights[{q}]·V[:,{j}] = {self.dot(f'weights{s}', i, f'V{s}', j)} = {answer}"
        if table.name == "final":
            # with one head, the output itself is what W_O multiplies (no concat table on the page)
            source, label = ("concat", "concat") if "concat" in self.tables else ("output.0", "output")
            return f"final[{q},{j}] = {label}[{q}]·W_O[:,{j}] = {self.dot(source, i, 'W_O', j)} = {answer}"
        raise KeyError(table.name)

    def softmax(self, s: str, i: int, j: int, answer: str) -> str:
        sc = self.comp.scenario
        scaled = self.tables[f"scaled{s}"]
        allowed = [c for c in range(sc.m) if sc.allow[i, c]]
        row = [float(scaled.values[i, c]) for c in allowed]
        top = max(row)
        top_text = self.txt(f"scaled{s}", i, allowed[row.index(top)])
        exps = [math.exp(v - top) for v in row]
        total = sum(exps)
        # one decimal more than the page for e and Σ, so their quotient stays within a unit of the answer
        extra = self.d + 1

        def power(c: int) -> str:
            return f"e^({self.txt(f'scaled{s}', i, c)} − {top_text})"

        terms = " + ".join(power(c) for c in allowed)
        mine = math.exp(float(scaled.values[i, j]) - top)
        return (f"weights[{sc.tokens[i]},{sc.key_tokens[j]}] = {power(j)} / ({terms})"
                f" = {fmt(mine, False, extra)} / {fmt(total, False, extra)} = {answer}")


# --- the page ------------------------------------------------------------------------------


def _md(label: str) -> str:
    return label.replace("|", "\\|")


def _table_md(ws: Worksheet, table: Table) -> str:
    head = "| " + " | ".join([_md(table.name), *(_md(c) for c in table.cols)]) + " |"
    rule = "|" + "---|" * (len(table.cols) + 1)
    body = []
    for i, label in enumerate(table.rows):
        cells = []
        for j in range(len(table.cols)):
            blank = ws.blank_at(table.key, i, j)
            cells.append(f"({blank.number}) {BLANK}" if blank is not None else table.text(i, j, ws.decimals))
        body.append("| " + " | ".join([f"**{_md(label)}**", *cells]) + " |")
    return "\n".join([head, rule, *body])


def _render(ws: Worksheet) -> str:
    comp = ws.comp
    sc = comp.scenario
    d = ws.decimals
    out = [f"# Worksheet: {sc.title}", ""]
    if sc.description:
        out += [sc.description, ""]
    out += [
        "Scaled dot-product attention, **softmax(QKᵀ/√dₖ)V**, by hand. Fill in each numbered blank.",
        "",
        f"- Work from the numbers printed on this page, in order: every printed number was computed from the"
        f" printed numbers before it and rounded to {d} decimals, so your answer should match within one unit"
        f" of the last decimal.",
        "- Softmax, row by row: subtract the row's largest scaled score, take e to each difference, divide each"
        " by their sum. Masked cells are −∞ and get weight 0.",
        f"- Query tokens: {', '.join(sc.tokens)}"
        + (f"; key/value tokens from the context: {', '.join(sc.key_tokens)}" if sc.is_cross else "")
        + f"; mask: {sc.mask_kind}; heads: {len(comp.heads)}; blanks: {len(ws.blanks)}.",
        "",
        "## Inputs",
        "",
    ]
    multi = len(comp.heads) > 1
    for table in ws.tables:
        if table.given:
            suffix = f" ({comp.heads[table.head].name})" if multi and table.head is not None else ""
            out += [f"{table.heading}{suffix}:", "", _table_md(ws, table), ""]
    if not sc.allow.all():
        mask = Table("mask", "mask", "", "scale", None, sc.allow.astype(np.float64), sc.tokens, sc.key_tokens, True, False)
        out += ["Mask (1 = the query may attend the key, 0 = masked):", "", _table_md(ws, mask), ""]
    for head in comp.heads:
        divisor = f"√{head.d_k} (dₖ = {head.d_k})" if head.scale_is_default else f"{_exact(head.scale)} (set by the scenario)"
        out.append(f"- Scale{f' ({head.name})' if multi else ''}: divide every score by {divisor}.")
    out.append("")
    stage_names = {"project": "Project", "score": "Score", "scale": "Scale", "softmax": "Softmax", "mix": "Mix",
                   "concat": "Concat", "wo": "W_O"}
    last_section = ""
    for table in ws.tables:
        if table.given:
            continue
        suffix = f" ({comp.heads[table.head].name})" if multi and table.head is not None else ""
        section = f"## {stage_names[table.stage]}{suffix}"
        if section != last_section:
            out += [section, ""]
            last_section = section
        out += [f"{table.heading}:", "", _table_md(ws, table), ""]
    out += ["## Answer key", ""]
    if not ws.blanks:
        out += ["(No blanks on this page.)", ""]
    out += [f"- ({b.number}) {b.working}" for b in ws.blanks]
    out.append("")
    return "\n".join(out)
