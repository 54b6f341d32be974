"""Stage Loss (with a [backward] target, or loss = "cross_entropy"): how far the final output is from the
target, or how unlikely the next tokens are, and dO, the gradient every backward stage starts from
(docs/backward.md)."""

from __future__ import annotations

import math
from functools import lru_cache, partial
from typing import TYPE_CHECKING

import numpy as np

from qkv_tui.core.scenario import Matrix
from qkv_tui.teach.arith import MAX_TERMS, SoftmaxRow, elide, fit, softmax_row
from qkv_tui.teach.stages.common import Key, Operation, Plan, Ref, Segment, Stage, paren
from qkv_tui.teach.stages.concat import joined_name
from qkv_tui.teach.stages.context import TraceContext
from qkv_tui.teach.stages.grads import BackwardSpec, dot_cell, formula_cell, grads
from qkv_tui.teach.stages.markdown import MarkdownPage

if TYPE_CHECKING:  # the kernel loads with the gradients that compute it (core/gradients.py), not with every trace
    from qkv_tui.kernels.cross_entropy import CrossEntropy

CE_NAMES = ("W_U", "ce_logits", "ce_probs", "ce_dlogits", "dW_U")


def final_name(trace: TraceContext) -> str:
    """The pane the final output is in: W_O's, or the heads' outputs side by side (or the one head's)."""
    comp = trace.comp
    if comp.W_O is not None:
        return "final"
    if len(comp.heads) > 1:
        return "concat"
    return joined_name(comp.heads[0])  # the head's output, or what a part made of it (the gate's gated)


class Loss(BackwardSpec):
    stage = Stage("loss", "Loss",
                  "The backward pass starts here. The loss ½·Σ (output − target)² says how far the output is from the"
                  " target; its gradient dO = output − target says, cell by cell, which way each output number should"
                  " move to lower it, and how strongly. Every gradient after this one is dO carried back, one"
                  " operation at a time, through what the forward pass did.")
    matrices = ("target", "dO", "loss", *CE_NAMES)

    def runs(self, trace: TraceContext) -> bool:
        bw = trace.comp.scenario.backward
        return bw is not None and (bw.target is not None or bw.cross_entropy)

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        n, d_out = trace.comp.output.shape
        ce = _ce(trace)
        if ce is not None:
            vocab = ce.logits.shape[1]
            return [Plan("ce_logits", n, vocab), Plan("ce_probs", n, vocab), Plan("loss", n, 1),
                    Plan("ce_dlogits", n, vocab), Plan("dO", n, d_out), Plan("dW_U", d_out, vocab)]
        return [Plan("dO", n, d_out), Plan("loss", n, 1)]

    def meaning(self, trace: TraceContext, head: int | None = None) -> str:
        return CE_MEANING if _ce(trace) is not None else self.stage.meaning

    def made_from(self, trace: TraceContext, name: str, head: int | None) -> list[Key] | None:
        return [] if name == "W_U" else None  # as the file gives it: whole numbers where they all are

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        if _ce(trace) is not None:
            return _ce_operation(trace, index, seg, row, col, d)
        comp = trace.comp
        bw = comp.scenario.backward
        assert bw is not None and bw.target is not None and col is not None
        q = comp.scenario.labels[row]
        g = grads(trace)
        final = final_name(trace)
        if seg.target == "dO":
            value = float(g.dO[row, col])
            return formula_cell(
                trace, index, seg, row, col, d, value, lambda a, b: a - b,
                [float(comp.output[row, col]), float(bw.target[row, col])], lambda t: f"{t[0]} − {t[1]}",
                f"dO[{q},{col}] = {final}[{q},{col}] − target[{q},{col}]",
                (Ref(final, _head_of(trace, final), row, col), Ref("target", None, row, col)), plain_sum=True)
        rows = _loss_rows(g.dO)
        value = float(rows[row, 0])
        details: tuple[str, ...] = ()
        if row == comp.scenario.n - 1 and g.loss is not None:
            details = (_total_line(trace, rows, g.loss, d),)
        said = f"loss[{q}] = ½·Σ dO[{q}]²"
        if g.dO.shape[1] > MAX_TERMS:
            return Operation(index, seg, row, col, value, (Ref("dO", None, row),),
                             f"{said} = {trace.formatted('loss', None, value, d)}", details)
        return formula_cell(
            trace, index, seg, row, col, d, value, lambda *xs: 0.5 * sum(x * x for x in xs), list(g.dO[row]),
            lambda t: "0.5·(" + " + ".join(f"{x}·{x}" for x in t) + ")", said, (Ref("dO", None, row),), details)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        bw = trace.comp.scenario.backward
        if bw is None:
            raise KeyError(name)
        ce = _ce(trace)
        if ce is not None and name in (*CE_NAMES, "loss"):
            return _ce_matrix(trace, ce, name)
        if name == "target":
            if bw.target is None:
                raise KeyError(name)
            return bw.target
        g = grads(trace)
        if name == "dO":
            return g.dO
        return _loss_rows(g.dO)

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        final = final_name(trace)
        if _ce(trace) is not None:
            return [(name, _head_of(trace, name)) for name in _ce_panes(final)[op.segment.target]]
        if op.segment.target == "dO":
            return [(final, _head_of(trace, final)), ("target", None), ("dO", None)]
        return [("dO", None), ("loss", None)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        if _ce(trace) is not None:
            return [("ce_probs", None), ("dO", None)]
        return [("dO", None)] if trace.comp.scenario.backward is not None else []

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        if _ce(trace) is not None:
            return CE_TITLES[name]
        return {"target": "target", "dO": "dO = output − target", "loss": "loss = ½·Σ dO² per row"}[name]

    def markdown(self, page: MarkdownPage, head: int | None) -> list[str]:
        if page.trace.comp.scenario.backward is not None and page.trace.comp.scenario.backward.cross_entropy:
            return [page.table("W_U", None), "", *super().markdown(page, head)]
        return [page.table("target", None), "", *super().markdown(page, head)]


def _loss_rows(dO: Matrix) -> Matrix:
    """Each row's share of the loss, ½·Σ dO² over the row: (n, 1)."""
    rows: Matrix = 0.5 * (dO * dO).sum(axis=1, keepdims=True)
    return rows


def _head_of(trace: TraceContext, name: str) -> int | None:
    """The head of a pane the loss reads: the one head's output (or its part's), else None (shared)."""
    return 0 if name in ("output", joined_name(trace.comp.heads[0])) else None


def _total_line(trace: TraceContext, rows: Matrix, loss: float, d: int) -> str:
    if len(rows) > MAX_TERMS:
        return f"loss = Σ rows = {trace.formatted('loss', None, loss, d)}"
    texts, result = fit(lambda *xs: sum(xs), [float(x) for x in rows[:, 0]], loss, d, plain_sum=True)
    return f"loss = {' + '.join(texts)} = {result}"


# --- cross-entropy through W_U: every cell from the output to dO and dW_U ---------------------------------

CE_MEANING = ("The backward pass starts here, as a language model's training does: the output is multiplied by the"
              " unembedding W_U into one logit per word of the vocabulary, a softmax over each row turns the logits"
              " into probabilities p, and the loss is the mean over the tokens of −ln p of each token's next word"
              " (torch's cross_entropy). Its gradient at the logits is dlogits = (p − onehot)/n: push the next word's"
              " logit up, every other one down, each by its probability. dO = dlogits·W_Uᵀ carries it back to the"
              " output, and every gradient after this one is dO carried back, one operation at a time.")
CE_TITLES = {"W_U": "W_U (d_out × vocab)", "ce_logits": "logits = output·W_U", "ce_probs": "p = softmax(logits)",
             "loss": "−ln p[next] per token", "ce_dlogits": "dlogits = (p − onehot)/n",
             "dO": "dO = dlogits·W_Uᵀ", "dW_U": "dW_U = outputᵀ·dlogits"}


def _ce_panes(final: str) -> dict[str, tuple[str, ...]]:
    return {"ce_logits": (final, "W_U", "ce_logits"), "ce_probs": ("ce_logits", "ce_probs"),
            "loss": ("ce_probs", "loss"), "ce_dlogits": ("ce_probs", "ce_dlogits"),
            "dO": ("ce_dlogits", "W_U", "dO"), "dW_U": (final, "ce_dlogits", "dW_U")}


def _ce(trace: TraceContext) -> CrossEntropy | None:
    bw = trace.comp.scenario.backward
    if bw is None or not bw.cross_entropy:
        return None
    return grads(trace).cross_entropy


def _ce_matrix(trace: TraceContext, ce: CrossEntropy, name: str) -> Matrix:
    bw = trace.comp.scenario.backward
    assert bw is not None and bw.W_U is not None
    values: Matrix = {"W_U": bw.W_U, "ce_logits": ce.logits, "ce_probs": ce.probs, "loss": ce.nll[:, None],
                      "ce_dlogits": ce.dlogits, "dO": ce.dO, "dW_U": ce.dW_U}[name]
    return values


def _row(trace: TraceContext, row: int, d: int) -> SoftmaxRow:
    """One row of the vocabulary's softmax as shown, worked out once for the row's cells."""
    rows = trace.memo("vocabulary rows", lambda: lru_cache(maxsize=64)(partial(_worked, trace)))
    worked: SoftmaxRow = rows(row, d)
    return worked


def _worked(trace: TraceContext, row: int, d: int) -> SoftmaxRow:
    ce = _ce(trace)
    assert ce is not None
    return softmax_row(ce.logits[row], ce.probs[row], d)


def _ce_operation(trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
    comp = trace.comp
    bw = comp.scenario.backward
    ce = _ce(trace)
    assert bw is not None and bw.W_U is not None and bw.next is not None and ce is not None and col is not None
    final = final_name(trace)
    fh = _head_of(trace, final)
    n = comp.scenario.n
    name = seg.target
    value = float(_ce_matrix(trace, ce, name)[row, col])
    if name == "dW_U":  # rows are the output's columns
        return dot_cell(trace, index, seg, row, col, d, value, comp.output[:, row], ce.dlogits[:, col],
                        trace.integral(final, fh), False, f"dW_U[{row},{col}] = {final}[:,{row}]·dlogits[:,{col}]",
                        (Ref(final, fh, None, row), Ref("ce_dlogits", None, None, col)))
    q = comp.scenario.labels[row]
    nxt = bw.next[row]
    if name == "ce_logits":
        return dot_cell(trace, index, seg, row, col, d, value, comp.output[row], bw.W_U[:, col],
                        trace.integral(final, fh), trace.integral("W_U", None),
                        f"logits[{q},{col}] = {final}[{q},:]·W_U[:,{col}]",
                        (Ref(final, fh, row), Ref("W_U", None, None, col)))
    if name == "dO":
        return dot_cell(trace, index, seg, row, col, d, value, ce.dlogits[row], bw.W_U[col], False,
                        trace.integral("W_U", None), f"dO[{q},{col}] = dlogits[{q},:]·W_U[{col},:]",
                        (Ref("ce_dlogits", None, row), Ref("W_U", None, col)))
    if name == "ce_probs":
        r = _row(trace, row, d)
        text = (f"p[{q},{col}] = e^(z − max) / Σ = e^({r.scaled[col]} − {paren(r.top)}) / {r.total}"
                f" = e^{r.shifted[col]} / {r.total} = {r.exps[col]} / {r.total} = {r.weights[col]}")
        exps = [f"e^{s} = {e}" for s, e in zip(r.shifted, r.exps, strict=True)]
        if len(r.scaled) <= MAX_TERMS:
            top = f"row max = max({', '.join(r.scaled)}) = {r.top}"
        else:
            top = f"row max = {r.top}, at {int(np.argmax(ce.logits[row]))}"
        details = (top, f"e^(z − max): {elide(exps, ' | ')}  →  Σ = {r.total}")
        return Operation(index, seg, row, col, value, (Ref("ce_logits", None, row),), text, details)
    if name == "loss":
        p_t = float(ce.probs[row, nxt])
        said = f"loss[{q}] = −ln p[{q},{nxt}]"
        extra: tuple[str, ...] = ()
        if row == n - 1:
            extra = (_mean_line(trace, ce, d),)
        if p_t <= 0 or not math.isfinite(value):  # p below float64's smallest: the form without p
            zmax = float(ce.softmax.row_max[row])
            z = float(ce.logits[row, nxt])
            texts, result = fit(lambda s, t, m: math.log(s) - (t - m), [float(ce.softmax.row_sum[row]), z, zmax],
                                value, d)
            return Operation(index, seg, row, col, value, (Ref("ce_probs", None, row, nxt),),
                             f"{said} = ln Σ − (z − max) = ln({texts[0]}) − ({texts[1]} − {paren(texts[2])}) = {result}",
                             extra)
        texts, result = fit(lambda p: -math.log(p), [p_t], value, d)
        return Operation(index, seg, row, col, value, (Ref("ce_probs", None, row, nxt),),
                         f"{said} = −ln({texts[0]}) = {result}", (f"the next token of {q} is id {nxt}", *extra))
    assert name == "ce_dlogits"
    hot = 1 if col == nxt else 0
    return formula_cell(
        trace, index, seg, row, col, d, value, lambda p: (p - hot) / n, [float(ce.probs[row, col])],
        lambda t: f"({t[0]} − {hot}) / {n}", f"dlogits[{q},{col}] = (p[{q},{col}] − {hot}) / n",
        (Ref("ce_probs", None, row, col),),
        (f"{col} is {q}'s next token: its logit is pushed up" if hot else
         f"{col} is not {q}'s next token: its logit is pushed down",))


def _mean_line(trace: TraceContext, ce: CrossEntropy, d: int) -> str:
    n = len(ce.nll)
    if n > MAX_TERMS:
        return f"loss = mean of the rows = {trace.formatted('loss', None, ce.loss, d)}"
    texts, result = fit(lambda *xs: sum(xs) / n, [float(x) for x in ce.nll], ce.loss, d)
    return f"loss = ({' + '.join(texts)}) / {n} = {result}"




SPEC = Loss()
