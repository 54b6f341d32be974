"""The cross-entropy Loss on the backward worksheet ([backward] loss = "cross_entropy"): the page's first backward
tables, from the output to dO and dW_U, and their answer-key lines.

logits = output·W_U, p = softmax of each row over the vocabulary, −ln p of each token's next word (the loss is their
mean, torch's cross_entropy), dlogits = (p − onehot)/n, dO = dlogits·W_Uᵀ and dW_U = outputᵀ·dlogits: the numbers
are kernels/cross_entropy.py's, run by core/gradients.py on the printed page under its policy (each table from the
printed ones, rounded once; −ln p from p as printed), so each line re-computes from the page. W_U and ``next`` (each
token's next word) are printed as given. edges/worksheet/backward/tables.py puts these tables where a squared loss
puts target and dO, and the gradients after them read dO as they always do.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from qkv_tui.core.fmt import fmt
from qkv_tui.core.gradients import Gradients
from qkv_tui.core.scenario import Scenario
from qkv_tui.edges.worksheet.backward.lines import OperandKeys, weight_line
from qkv_tui.edges.worksheet.backward.names import cell_name
from qkv_tui.teach.stages.printed import PrintedCells, Table, idx

# the kinds of table key whose lines this module writes (dO's only where the loss is the cross-entropy)
KINDS = frozenset({"ce_logits", "ce_p", "ce_loss", "ce_dlogits", "dO", "dW_U"})
STAGE = "loss"  # the app's backward stage that computes them all (teach/stages/loss.py), for --stages


def applies(sc: Scenario) -> bool:
    return sc.backward is not None and sc.backward.cross_entropy


def ce_tables(t: Callable[..., None], given: Callable[[Table], None], sc: Scenario, G: Gradients,
              ops: OperandKeys) -> None:
    """The Loss stage's tables: W_U and next as given, then logits, p, −ln p, dlogits, dO and dW_U."""
    bw, ce = sc.backward, G.cross_entropy
    assert bw is not None and bw.W_U is not None and bw.next is not None and ce is not None
    rows = sc.labels
    d_out, vocab = bw.W_U.shape
    words = idx(vocab)
    given(Table("W_U", "W_U", "W_U (the unembedding)", "backward", None,
                np.asarray(bw.W_U, dtype=np.float64), idx(d_out), words, True, False))
    given(Table("next", "next", "next (each token's next word)", "backward", None,
                np.asarray(bw.next, dtype=np.float64)[:, None], rows, ("next",), True, False))
    out = ops.out_name
    t("ce_logits", "logits", f"logits = {out}·W_U", ce.logits, rows, words)
    t("ce_p", "p", "p = softmax(logits), row by row", ce.probs, rows, words)
    t("ce_loss", "loss", "loss = −ln p[next]", ce.nll[:, None], rows, ("loss",))
    t("ce_dlogits", "dlogits", "dlogits = (p − onehot) / n (onehot: 1 at the next word)", ce.dlogits, rows, words)
    t("dO", "dO", "dO = dlogits·W_Uᵀ", ce.dO, rows, idx(d_out))
    t("dW_U", "dW_U", f"dW_U = {out}ᵀ·dlogits", ce.dW_U, idx(d_out), words)


def dW_U_placed(tables: list[Table]) -> list[Table]:
    """The backward's tables with dW_U moved one table down, after the first below dO (dV, or dConcat): only the
    step reads it, and there it lets a one-page sheet's rows of tables pack (--stages backward: two 4-column tables
    do not share a row with a third, and dlogits, dO, dV do). Unchanged without dW_U."""
    keys = [t.key for t in tables]
    if "dW_U" not in keys or "dO" not in keys:
        return tables
    rest = [t for t in tables if t.key != "dW_U"]
    at = [t.key for t in rest].index("dO") + 2
    return [*rest[:at], tables[keys.index("dW_U")], *rest[at:]]


def line(cells: PrintedCells, table: Table, i: int, j: int, answer: str) -> str | None:
    """The answer key's line of a cell of one of the Loss's tables; None for any other table."""
    sc = cells.sc
    kind = table.key.partition(".")[0]
    if not applies(sc) or kind not in KINDS:
        return None
    ops = OperandKeys(sc, cells.owners)
    tables, tx = cells.tables, cells.txt
    out = ops.out(tables)
    tok = sc.labels
    name = cell_name(table, i, j, (*sc.labels, *sc.key_labels))
    if kind == "ce_logits":
        return f"{name} = Σ {tables[out].name}[{tok[i]},·]·W_U[·,{j}] = {cells.dot(out, i, 'W_U', j)} = {answer}"
    if kind == "ce_p":
        return _p_line(cells, name, i, j, answer)
    if kind == "ce_loss":
        return _loss_line(cells, name, i, answer)
    if kind == "ce_dlogits":
        hot = int(tables["next"].values[i, 0] == j)
        return f"{name} = (p − onehot) / n = ({tx('ce_p', i, j)} − {hot}) / {sc.n} = {answer}"
    if kind == "dO":
        body = " + ".join(f"{tx('ce_dlogits', i, c)}·{tx('W_U', j, c)}" for c in range(tables["W_U"].values.shape[1]))
        return f"{name} = Σ dlogits[{tok[i]},·]·W_U[{j},·] = {body} = {answer}"
    return weight_line(cells, name, out, "ce_dlogits", i, j, answer)  # dW_U


def _p_line(cells: PrintedCells, name: str, i: int, j: int, answer: str) -> str:
    """``p[I,1] = e^(z − max) / Σ = e^(0.232 − 0.232) / (e^(…) + …) = 1.0000 / 3.5432 = 0.282``, as the forward's
    weights are written (teach/stages/softmax.py); e and Σ one decimal past the page's, so the quotient checks."""
    z = cells.tables["ce_logits"].values[i]
    top = int(np.argmax(z))
    top_text = cells.txt("ce_logits", i, top)

    def power(c: int) -> str:
        return f"e^({cells.txt('ce_logits', i, c)} − {top_text})"

    exps = [math.exp(float(v) - float(z[top])) for v in z]
    extra = cells.d + 1
    terms = " + ".join(power(c) for c in range(len(z)))
    return (f"{name} = e^(z − max) / Σ e^(z − max) = {power(j)} / ({terms}) = {fmt(exps[j], False, extra)}"
            f" / {fmt(sum(exps), False, extra)} = {answer}")


def _loss_line(cells: PrintedCells, name: str, i: int, answer: str) -> str:
    """−ln of the next word's p as printed; where p is printed as 0, ln Σ − (z − max) from the logits (the kernel's
    form without p)."""
    tok = cells.sc.labels[i]
    nxt = int(cells.tables["next"].values[i, 0])
    if float(cells.tables["ce_p"].values[i, nxt]) > 0:
        return f"{name} = −ln p[{tok},{nxt}] = ln(1 / {cells.txt('ce_p', i, nxt)}) = {answer}"
    z = cells.tables["ce_logits"].values[i]
    top = int(np.argmax(z))
    tx = cells.txt
    terms = " + ".join(f"e^({tx('ce_logits', i, c)} − {tx('ce_logits', i, top)})" for c in range(len(z)))
    return (f"{name} = ln Σ e^(z − max) − (z[next] − max) = ln({terms}) − ({tx('ce_logits', i, nxt)} −"
            f" {tx('ce_logits', i, top)}) = {answer}")
