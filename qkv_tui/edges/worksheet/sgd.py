"""The SGD step that ends a backward worksheet: each trained weight moved once, w − lr·g, cell by cell.

The scenarios with [backward] teach how training moves attention (the Train view runs w ← w − lr·∂loss/∂w on the
``train`` inputs, core/training.py). The page's last tables do that step by hand: each new weight is worked from
the weight as the page prints it (an input, exact) and its gradient as the page prints it (rounded), then rounded
once, so a student working from the sheet lands on the printed number (the printed-page policy of
:mod:`qkv_tui.edges.worksheet.chain`). A weight gets a table only where the page prints both it and its gradient:
a variant whose backward tables stop short of a weight (a latent layer's query latent) leaves that one out.
"""

from __future__ import annotations

from collections.abc import Callable, Container

import numpy as np

from qkv_tui.core.engine import Computation
from qkv_tui.edges.faces import faces, placed
from qkv_tui.edges.worksheet.backward.parts import part_sheets
from qkv_tui.kernels.policy import round_to
from qkv_tui.teach.stages.common import Stage, StageSpec
from qkv_tui.teach.stages.printed import PrintedCells, Table, exact, kv_owners

STAGE = Stage("sgd", "SGD step", "one step of gradient descent: every trained weight moves against its gradient")

# what each [backward] train name is on the page: (the weight's table key, its gradient's table key), per head
# where the name is a head's ({h} is the head whose section prints it); the first pair found on the page is used
PER_HEAD = {
    "W_Q": (("W_Q.{h}", "dW_Q.{h}"),),
    "W_K": (("W_K.{h}", "kvdW_K.{h}"), ("W_K.{h}", "dW_K.{h}")),
    "W_V": (("W_V.{h}", "kvdW_V.{h}"), ("W_V.{h}", "dW_V.{h}")),
    "b_Q": (("b_Q.{h}", "db_Q.{h}"),),
    "b_K": (("b_K.{h}", "kvdb_K.{h}"), ("b_K.{h}", "db_K.{h}")),
    "b_V": (("b_V.{h}", "kvdb_V.{h}"), ("b_V.{h}", "db_V.{h}")),
}
SHARED = {  # one array for the whole layer; QK-norm's γ of one head is that head's own gradient
    "W_O": (("W_O", "dW_O"),),
    "b_O": (("b_O", "db_O"),),
    "gamma": (("gamma", "dgamma"),),
    "beta": (("beta", "dbeta"),),
    "gamma_q": (("gamma_q", "dgamma_q"), ("gamma_q", "dgamma_q.0")),
    "gamma_k": (("gamma_k", "dgamma_k"), ("gamma_k", "dgamma_k.0")),
    "W_U": (("W_U", "dW_U"),),  # the cross-entropy's unembedding, last as in the Train view (backward/cross_entropy.py)
}


Move = Callable[[Table, Table, int | None], Table | None]  # (weight, gradient, head) -> its new table; None: past float64


def sgd_tables(tables: list[Table], comp: Computation, d: int, move: Move | None = None) -> list[Table]:
    """The SGD step's tables, after every other table of the page; none without [backward] or where the page
    prints no gradient of a trained weight. ``move``: another rule's step of one weight (AdamW's,
    edges/worksheet/adamw.py) on the same weights, without the variants' and parts' own SGD tables."""
    sc = comp.scenario
    bw = sc.backward
    if bw is None:
        return []
    by_key = {t.key: t for t in tables}
    lr = float(bw.lr)
    out: list[Table] = []

    def step(w: Table, g: Table, head: int | None) -> Table | None:
        with np.errstate(over="ignore", invalid="ignore"):
            new = round_to(w.values - lr * g.values, d)  # the printed operands, rounded once
        if not np.isfinite(new).all():  # past float64: a step the page cannot print (the Train view says why)
            return None
        heading = f"new {w.name} = {w.name} − lr·{g.name}"
        return Table(f"sgd.{w.key}", f"new {w.name}", heading, STAGE.key, head, np.asarray(new, dtype=float),
                     w.rows, w.cols, False, True)

    def add(name: str, pairs: tuple[tuple[str, str], ...], head: int | None) -> None:
        for weight_key, grad_key in pairs:
            w, g = by_key.get(weight_key), by_key.get(grad_key)
            if w is None or g is None or w.values.shape != g.values.shape:
                continue
            table = (move or step)(w, g, head)
            if table is not None:
                out.append(table)
            return

    owners = kv_owners(sc)
    trained = set(bw.train)
    # each variant's (edges/faces/): its weights of a query head among the head's, its own tables, the layer's after
    mine = {name for f in faces() for name, _ in f.sgd_head}
    per_head = placed(PER_HEAD.items(), [(f.sgd_head_at, list(f.sgd_head)) for f in faces() if f.sgd_head])
    for h in range(len(sc.heads)):
        for name, pairs in per_head:
            if name in trained and (name[-1] == "Q" or name in mine or owners[h] == h):
                add(name, tuple((w.format(h=h), g.format(h=h)) for w, g in pairs), h)
        out += [table for f in faces() if move is None and f.sgd_own is not None and f.sgd_own[0] in trained
                if (table := f.sgd_own[1](by_key, h, lr, d)) is not None]
    for name, pairs in [*SHARED.items(), *(item for f in faces() for item in f.sgd_layer)]:
        if name in trained:
            add(name, pairs, None)
    # a part's own weights (differential attention's λ vectors: rows of one table), as its module moves them
    return out + [table for sheet in part_sheets(sc) if move is None and sheet.sgd_tables is not None
                  for table in sheet.sgd_tables(by_key, comp, lr, d)]


def untrained(comp: Computation) -> frozenset[str]:
    """The table keys of the gradients of weights the [backward] table does not train (no SGD step reads them), of
    every head; none without [backward]. A --stages selection asks them only where it names their stage
    (edges/worksheet/select.py)."""
    bw = comp.scenario.backward
    if bw is None:
        return frozenset()
    trained = set(bw.train)
    every = [*PER_HEAD.items(), *SHARED.items(), *(item for f in faces() for item in (*f.sgd_head, *f.sgd_layer))]
    heads = range(len(comp.scenario.heads))

    def keys(pairs: tuple[tuple[str, str], ...]) -> set[str]:
        return {grad.format(h=h) for _, grad in pairs for h in heads}

    idle = set().union(*(keys(pairs) for name, pairs in every if name not in trained))
    return frozenset(idle - set().union(*(keys(pairs) for name, pairs in every if name in trained)))


def operands(table: Table, present: Container[str]) -> tuple[str, str, int | None]:
    """The weight's and the gradient's table keys a new-weight table reads (the first pair on the page, as
    sgd_tables chose), and the weight's column where one cell of a table of every head's is moved (None: the same cell)."""
    key = table.key.removeprefix("sgd.")
    for f in faces():
        if f.sgd_own is not None and (found := f.sgd_own[2](key)) is not None:
            weight, grad, col = found
            return weight, grad, col
    every = [*PER_HEAD.items(), *SHARED.items(), *(item for f in faces() for item in (*f.sgd_head, *f.sgd_layer))]
    for pairs in (pairs for _, pairs in every):
        for weight_key, grad_key in pairs:
            if "{h}" in weight_key:
                base, _, head = key.rpartition(".")
                if weight_key.format(h=head) == key and base and grad_key.format(h=head) in present:
                    return key, grad_key.format(h=head), None
            elif weight_key == key and grad_key in present:
                return key, grad_key, None
    raise KeyError(table.key)


class SgdSheet(StageSpec):
    """The SGD step's rule and answer-key lines (not a stage of the trace: the Train view is where it runs)."""

    stage = STAGE

    def worksheet_rules(self, comp: Computation) -> list[str]:
        bw = comp.scenario.backward
        if bw is None:
            return []
        return [f"- SGD step: each trained weight moves once against its gradient, new w = w − lr·g with"
                f" lr = {exact(float(bw.lr))} (the Train view's step), cell by cell from the weight as given and its"
                " gradient as printed."]

    def worksheet_line(self, cells: PrintedCells, table: Table, row: int, col: int, answer: str) -> str:
        bw = cells.sc.backward
        assert bw is not None
        own = next((text for sheet in part_sheets(cells.sc) if sheet.sgd_line is not None
                    if (text := sheet.sgd_line(cells, table, row, col, answer)) is not None), None)
        if own is not None:  # a part's own weight (edges/worksheet/backward/parts.py)
            return own
        # one cell read from a column of a table of every head's (a head's sink logit), or the same cell of each
        weight, grad, column = operands(table, cells.tables)
        w_row, w_col = (0, column) if column is not None else (row, col)
        g_row, g_col = (0, 0) if column is not None else (row, col)
        w, g = cells.tables[weight], cells.tables[grad]
        where = "" if column is not None else (f"[{col}]" if len(table.rows) == 1 else f"[{row},{col}]")
        return (f"{table.name}{where} = {w.name}{where} − lr·{g.name}{where} = {cells.txt(weight, w_row, w_col)} −"
                f" {exact(float(bw.lr))}·{cells.txt(grad, g_row, g_col)} = {answer}")


SHEET = SgdSheet()
