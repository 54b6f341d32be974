"""The SGD step that ends a backward worksheet: each trained weight moved once, w − lr·g, cell by cell.

The scenarios with [backward] teach how training moves attention (the Train view runs w ← w − lr·∂loss/∂w on the
``train`` inputs, core/training.py). The page's last tables do that step by hand: each new weight is worked from
the weight as the page prints it (an input, exact) and its gradient as the page prints it (rounded), then rounded
once, so a student working from the sheet lands on the printed number (the printed-page policy of
:mod:`qkv_tui.edges.worksheet.chain`). A weight gets a table only where the page prints both it and its gradient:
a variant whose backward tables stop short of a weight (a latent layer's query latent) leaves that one out.
"""

from __future__ import annotations

from collections.abc import Container

import numpy as np

from qkv_tui.core.engine import Computation
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
    "W_G": (("W_G.{h}", "dW_G.{h}"),),
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
    # [mla]'s latent layer: its weights are shared by every head (edges/worksheet/backward/mla.py's tables)
    "W_DKV": (("W_DKV", "mW_DKV"),),
    "W_UK": (("W_UK", "mW_UK"),),
    "W_UV": (("W_UV", "mW_UV"),),
    "W_KR": (("W_KR", "mW_KR"),),
}
MLA_Q = (("W_QA", "mW_Q"),)  # [mla]'s query weights are printed as W_QA


def sgd_tables(tables: list[Table], comp: Computation, d: int) -> list[Table]:
    """The SGD step's tables, after every other table of the page; none without [backward] or where the page
    prints no gradient of a trained weight."""
    sc = comp.scenario
    bw = sc.backward
    if bw is None:
        return []
    by_key = {t.key: t for t in tables}
    lr = float(bw.lr)
    out: list[Table] = []

    def add(name: str, pairs: tuple[tuple[str, str], ...], head: int | None) -> None:
        for weight_key, grad_key in pairs:
            w, g = by_key.get(weight_key), by_key.get(grad_key)
            if w is None or g is None or w.values.shape != g.values.shape:
                continue
            with np.errstate(over="ignore", invalid="ignore"):
                new = round_to(w.values - lr * g.values, d)  # the printed operands, rounded once
            if not np.isfinite(new).all():  # past float64: a step the page cannot print (the Train view says why)
                return
            heading = f"new {w.name} = {w.name} − lr·{g.name}"
            out.append(Table(f"sgd.{weight_key}", f"new {w.name}", heading, STAGE.key, head, np.asarray(new, dtype=float),
                             w.rows, w.cols, False, True))
            return

    owners = kv_owners(sc)
    trained = set(bw.train)
    for h in range(len(sc.heads)):
        for name, pairs in PER_HEAD.items():
            if name in trained and (name[-1] == "Q" or name == "W_G" or owners[h] == h):
                add(name, tuple((w.format(h=h), g.format(h=h)) for w, g in pairs), h)
        if "sinks" in trained:
            _sink(out, by_key, h, lr, d)
    for name, pairs in SHARED.items():
        if name in trained:
            add(name, pairs, None)
    if sc.mla is not None and "W_Q" in trained:
        add("W_Q", MLA_Q, None)
    return out


def _sink(out: list[Table], by_key: dict[str, Table], h: int, lr: float, d: int) -> None:
    """A head's sink logit: the sinks table's column h, and the head's dsink."""
    sinks, g = by_key.get("sinks"), by_key.get(f"dsink.{h}")
    if sinks is None or g is None or h >= sinks.values.shape[1] or not np.isfinite(sinks.values[0, h]):
        return
    with np.errstate(over="ignore", invalid="ignore"):
        new = round_to(np.array([[sinks.values[0, h] - lr * g.values[0, 0]]]), d)
    if not np.isfinite(new).all():
        return
    out.append(Table(f"sgd.sink.{h}", "new sink", "new sink = sink − lr·dsink", STAGE.key, h, new, ("sink",),
                     ("new",), False, True))


def operands(table: Table, present: Container[str]) -> tuple[str, str, int | None]:
    """The weight's and the gradient's table keys a new-weight table reads (the first pair on the page, as
    sgd_tables chose), and the sinks column (None: the same cell)."""
    key = table.key.removeprefix("sgd.")
    if key.startswith("sink."):
        h = int(key.partition(".")[2])
        return "sinks", f"dsink.{h}", h
    for pairs in (*PER_HEAD.values(), *SHARED.values(), MLA_Q):
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
        weight, grad, sink = operands(table, cells.tables)
        w_row, w_col = (0, sink) if sink is not None else (row, col)
        g_row, g_col = (0, 0) if sink is not None else (row, col)
        w, g = cells.tables[weight], cells.tables[grad]
        where = "" if sink is not None else (f"[{col}]" if len(table.rows) == 1 else f"[{row},{col}]")
        return (f"{table.name}{where} = {w.name}{where} − lr·{g.name}{where} = {cells.txt(weight, w_row, w_col)} −"
                f" {exact(float(bw.lr))}·{cells.txt(grad, g_row, g_col)} = {answer}")


SHEET = SgdSheet()
