"""The stages of [indexer] (contracts §15): Index, every term w[t,j]·ReLU(q_I[t,j]·k_I[s]) a cell and their sum
I[t,s]; then Select, each query's top_k visible keys. Both run once for the layer, after Norm and before any head
projects: the selection is one for every head, and the heads' Scale and Softmax then show the keys it leaves out
as −∞ and weight 0 (core/indexer_part.py narrows their mask).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING

import numpy as np

from qkv_tui.core.fmt import NEG_INF, fmt
from qkv_tui.core.indexer_part import Selection
from qkv_tui.core.scenario import Matrix, Scenario
from qkv_tui.core.variants.indexer import TABLE as INDEXER
from qkv_tui.kernels.indexer import Indexed
from qkv_tui.teach.arith import dot_line, fit, quotient_line
from qkv_tui.teach.stages.common import (
    Key,
    Operation,
    PaneStyle,
    Plan,
    Ref,
    Segment,
    Stage,
    StageSpec,
    counts,
)
from qkv_tui.teach.stages.context import TraceContext
from qkv_tui.teach.stages.markdown import MarkdownPage

if TYPE_CHECKING:  # the cost view's module loads on its first use
    from qkv_tui.core.cost import Count, Phase

MAX_INDEX_HEADS = 128  # the term panes a trace can name (DeepSeek-V3.2 and GLM-5 have 64 index heads)
TERMS = tuple(f"idx_term_{j}" for j in range(1, MAX_INDEX_HEADS + 1))
SUB = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")


def selection(trace: TraceContext) -> Selection:
    """The layer's selection: every head holds the same record, so the first head's says it."""
    return trace.comp.heads[0].need(Selection)


def indexed(trace: TraceContext) -> Indexed:
    return selection(trace).indexed


def has_indexer(trace: TraceContext) -> bool:
    return bool(trace.comp.heads) and trace.comp.heads[0].part(Selection) is not None


def _x(trace: TraceContext) -> tuple[str, str]:
    return ("X", "X") if trace.comp.norm is None else ("X_norm", "X̂")


def _q_source(trace: TraceContext) -> str:
    return "c_Q" if selection(trace).table.from_latent else _x(trace)[1]


def _sub(j: int) -> str:
    return str(j + 1).translate(SUB)


def _mask_words(trace: TraceContext, row: int, col: int) -> str:
    sc = trace.comp.scenario
    q, k = sc.labels[row], sc.key_labels[col]
    if sc.mask_kind == "causal" or (sc.mask_kind == "sliding" and col > row):
        return f'the causal mask hides "{k}" from "{q}" (it comes later): the index score is −∞'
    return f'the {sc.mask_kind} mask hides "{k}" from "{q}": the index score is −∞'


class Index(StageSpec):
    stage = Stage("index", "Index",
                  "The lightning indexer scores every key for every query, before any head: I[t,s] = Σ_j w[t,j]·"
                  "ReLU(q_I[t,j]·k_I[s]). Each index head j has its own query q_I[t,j] and its own weight w[t,j]"
                  " for the query; the index key k_I[s] is one per token, shared by the index heads. ReLU drops"
                  " a negative dot, so an index head counts a key only where its query and the key agree; its weight"
                  " w (which may be negative) says how much, and which way. A key the mask hides scores −∞.")
    matrices = ("W_q_I", "W_k_I", "W_w_I", "idx_q", "idx_k", "idx_w", *TERMS, "idx_scores")
    key_columns = (*TERMS, "idx_scores")
    styles = MappingProxyType({"idx_scores": PaneStyle(row_max=True)})

    def runs(self, trace: TraceContext) -> bool:
        return has_indexer(trace)

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        ix = indexed(trace)
        n, m = ix.scores.shape
        H = ix.w.shape[1]
        return [Plan("idx_w", n, H), *(Plan(TERMS[j], n, m) for j in range(H)), Plan("idx_scores", n, m)]

    def meaning(self, trace: TraceContext, head: int | None) -> str:
        ix, t = indexed(trace), selection(trace).table
        H, d_I = ix.w.shape[1], ix.k.shape[1]
        src = _q_source(trace)
        x = _x(trace)[1]
        made = (f" Here q_I = {src}·W_q ({H} index heads of width d_I = {d_I}), k_I = {x}·W_k"
                + (", LayerNorm-ed (k_norm, as the models)" if t.k_norm else "")
                + t.turned_words
                + f", and w = {x}·W_w / √(H_I·d_I) = {x}·W_w / √{H * d_I}: both of the models' scales in w"
                  " (transformers scales q_I·k_I by d_I^(−1/2) and w by H_I^(−1/2); ReLU(c·x) = c·ReLU(x) for"
                  " c > 0, so the scores are the same).")
        return self.stage.meaning + made

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        assert col is not None
        ix = indexed(trace)
        sc = trace.comp.scenario
        q = sc.labels[row]
        H, d_I = ix.w.shape[1], ix.k.shape[1]
        x_name, x_sym = _x(trace)
        if seg.target == "idx_w":
            value = float(ix.w[row, col])
            raw = float(ix.w_raw[row, col])
            x = trace.comp.X_in
            raw_text = fmt(raw, trace.integral(x_name, None) and trace.integral("W_w_I", None), d)
            symbol = f"√{H * d_I}" if trace.hand is None else None
            quotient = quotient_line(raw, trace.integral(x_name, None) and trace.integral("W_w_I", None), ix.root,
                                     symbol, ix.root == round(ix.root), fmt(value, False, d), d)
            text = f"w[{q},{col}] = {x_sym}[{q}]·W_w[:,{col}] / √(H_I·d_I) = {quotient}"
            dot = dot_line(x[row], selection(trace).table.W_w[:, col], trace.integral(x_name, None),
                           trace.integral("W_w_I", None), raw_text, d, trace.hand)
            details = (f"{x_sym}[{q}]·W_w[:,{col}] = {dot}",
                       f"H_I·d_I = {H}·{d_I} = {H * d_I}: index head {col + 1}'s weight for the query {q}")
            return Operation(index, seg, row, col, value, (Ref(x_name, None, row), Ref("W_w_I", None, None, col)),
                             text, details)
        k = sc.key_labels[col]
        if seg.target == "idx_scores":
            return self._score(trace, index, seg, row, col, d)
        j = TERMS.index(seg.target)
        value = float(ix.terms[j, row, col])
        s = _sub(j)
        qv, kv = ix.q_turned[j, row], ix.k_turned[col]
        product = float(ix.dots[j, row, col])
        dot_text = fmt(product, trace.integral("idx_q", None) and trace.integral("idx_k", None), d)
        work = dot_line(qv, kv, trace.integral("idx_q", None), trace.integral("idx_k", None), dot_text, d, trace.hand)
        relu = max(product, 0.0)
        (w_t, r_t), result = fit(lambda a, b: a * b, [float(ix.w[row, j]), relu], value, d)
        text = (f"term{s}[{q},{k}] = w[{q},{j}]·ReLU(q_I{s}[{q}]·k_I[{k}]) = {w_t}·ReLU({dot_text})"
                f" = {w_t}·{r_t} = {result}")
        lines = [f"q_I{s}[{q}]·k_I[{k}] = {work}",
                   ("ReLU keeps it" if product > 0 else "ReLU makes it 0: this index head adds nothing for this key")]
        if not ix.allow[row, col]:
            lines.append(f"the mask hides \"{k}\" from \"{q}\": the sum I[{q},{k}] will be −∞ whatever this term is")
        return Operation(index, seg, row, col, value,
                         (Ref("idx_w", None, row, j), *(Ref("idx_q", None, row, c) for c in range(j * d_I, (j + 1) * d_I)),
                          Ref("idx_k", None, col)), text,
                         tuple(lines))

    def _score(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int, d: int) -> Operation:
        ix = indexed(trace)
        sc = trace.comp.scenario
        q, k = sc.labels[row], sc.key_labels[col]
        H = ix.w.shape[1]
        value = float(ix.scores[row, col])
        names = " + ".join(f"term{_sub(j)}[{q},{k}]" for j in range(H))
        operands = tuple(Ref(TERMS[j], None, row, col) for j in range(H))
        if not ix.allow[row, col]:
            return Operation(index, seg, row, col, value, operands, f"I[{q},{k}] = {names}, masked → {NEG_INF}",
                             (_mask_words(trace, row, col),))
        if H == 1:
            text = f"I[{q},{k}] = {names} = {fmt(value, False, d)}"
        else:
            terms = [float(ix.terms[j, row, col]) for j in range(H)]
            shown, result = fit(lambda *a: sum(a), terms, value, d, plain_sum=True)
            text = f"I[{q},{k}] = {names} = {' + '.join(shown)} = {result}"
        return Operation(index, seg, row, col, value, operands, text,
                         ("the sum over the index heads: the key's index score for this query",))

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        if not has_indexer(trace):
            raise KeyError(name)
        ix, t = indexed(trace), selection(trace).table
        if name in TERMS:
            j = TERMS.index(name)
            if j >= ix.terms.shape[0]:
                raise KeyError(name)
            term: Matrix = ix.terms[j]
            return term
        found = {"W_q_I": t.W_q, "W_k_I": t.W_k, "W_w_I": t.W_w,
                 "idx_q": np.concatenate(list(ix.q_turned), axis=1), "idx_k": ix.k_turned, "idx_w": ix.w,
                 "idx_scores": ix.scores}
        shown: Matrix = found[name]
        return shown

    def made_from(self, trace: TraceContext, name: str, head: int | None) -> list[Key] | None:
        t = selection(trace).table
        if name in ("W_q_I", "W_k_I", "W_w_I"):
            return []
        if name == "idx_q" and not t.from_latent and not t.turns:
            return [(_x(trace)[0], None), ("W_q_I", None)]
        if name == "idx_k" and not t.k_norm and not t.turns:
            return [(_x(trace)[0], None), ("W_k_I", None)]
        return None

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        target = op.segment.target
        if target == "idx_w":
            return [(_x(trace)[0], None), ("W_w_I", None), ("idx_w", None)]
        if target == "idx_scores":
            H = indexed(trace).w.shape[1]
            return [*((TERMS[j], None) for j in range(H) if H <= 2), ("idx_scores", None)]
        return [("idx_q", None), ("idx_k", None), ("idx_w", None), (target, None)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("idx_scores", None)]

    def markdown(self, page: MarkdownPage, head: int | None) -> list[str]:
        """The weights and the index vectors the lines multiply, then w, each term and I: every operand of a line
        is on the page. q_I is printed one index head at a time, as the lines name it (q_I₁, q_I₂, …)."""
        trace = page.trace
        ix = indexed(trace)
        H, d_I = ix.w.shape[1], ix.k.shape[1]
        weights = [("W_q_I", "W_q"), ("W_k_I", "W_k"), ("W_w_I", "W_w")]
        lines = [line for name, corner in weights for line in (page.table(name, None, corner), "")]
        rows = list(trace.comp.scenario.labels)
        whole = trace.integral("idx_q", None)
        cols = [str(c) for c in range(d_I)]
        for j in range(H):
            lines += [page.array(ix.q_turned[j], rows, cols, f"q_I{_sub(j)}", whole), ""]
        tables = [("idx_k", "k_I"), ("idx_w", "w"), *((TERMS[j], f"term{_sub(j)}") for j in range(H)),
                  ("idx_scores", "I")]
        return lines + [line for name, corner in tables for line in (page.table(name, None, corner), "")] + \
            page.worked(self.stage.key, None)

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        t = selection(trace).table
        x = _x(trace)[1]
        if name in TERMS:
            s = _sub(TERMS.index(name))
            return f"term{s} = w{s}·ReLU(q_I{s}·k_Iᵀ)"
        turned = " turned" if t.turns else ""
        return {"W_q_I": "W_q", "W_k_I": "W_k", "W_w_I": "W_w",
                "idx_q": f"q_I = {_q_source(trace)}·W_q{turned}",
                "idx_k": f"k_I = {'LayerNorm(' + x + '·W_k)' if t.k_norm else x + '·W_k'}{turned}",
                "idx_w": f"w = {x}·W_w / √(H_I·d_I)", "idx_scores": "I = Σ_j term_j"}.get(name, name)


class Select(StageSpec):
    stage = Stage("select", "Select",
                  "Each query keeps the top_k keys of its row of I, among the keys the mask lets it see (a tie goes"
                  " to the earlier key). Every head of the layer attends to these keys only: the others are masked"
                  " like the causal mask's, −∞ before the softmax and weight exactly 0.")
    matrices = ("idx_selected",)
    key_columns = ("idx_selected",)
    styles = MappingProxyType({"idx_selected": PaneStyle(heat=True)})

    def runs(self, trace: TraceContext) -> bool:
        return has_indexer(trace)

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        ix = indexed(trace)
        return [Plan("idx_selected", *ix.scores.shape)]

    def meaning(self, trace: TraceContext, head: int | None) -> str:
        ix = indexed(trace)
        most = int(ix.allow.sum(axis=1).max())
        if ix.covers_all:
            return (self.stage.meaning + f" Here top_k = {ix.top_k} is at least every query's visible keys (at most"
                    f" {most}), so every visible key is selected and the mask is the scenario's own: the attention"
                    " that follows equals full attention, cell for cell.")
        rows = [trace.comp.scenario.labels[i] for i in range(ix.scores.shape[0]) if ix.dropped[i].any()]
        return (self.stage.meaning + f" Here top_k = {ix.top_k} and a query sees up to {most} keys: "
                + ", ".join(rows) + (" drops" if len(rows) == 1 else " drop") + " keys, so the attention that"
                " follows is not full attention there.")

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        assert col is not None
        sel = selection(trace)
        ix = sel.indexed
        sc = trace.comp.scenario
        q, k = sc.labels[row], sc.key_labels[col]
        chosen = bool(ix.selected[row, col])
        value = 1.0 if chosen else 0.0
        score = fmt(float(ix.scores[row, col]), False, d)
        ops = (Ref("idx_scores", None, row),)
        if not ix.allow[row, col]:
            return Operation(index, seg, row, col, value, ops, f"selected[{q},{k}] = 0: the mask hides it",
                             (_mask_words(trace, row, col).replace(": the index score is −∞", ""),))
        place, visible = sel.rank(row, col)
        if visible <= ix.top_k:
            text = (f"selected[{q},{k}] = 1: {q} sees {visible} key{'s' if visible != 1 else ''}, no more than"
                    f" top_k = {ix.top_k}, so it keeps every one")
        else:
            where = "within" if chosen else "beyond"
            text = (f"selected[{q},{k}] = {int(value)}: its index score {score} ranks {place} of the {visible} keys"
                    f" {q} sees, {where} top_k = {ix.top_k}")
        return Operation(index, seg, row, col, value, ops, text, (self._row_line(trace, row, d),))

    def withheld(self, trace: TraceContext, op: Operation, decimals: int) -> str | None:
        """The question without its answer: what the row sees and keeps, not the key's rank."""
        assert op.col is not None
        ix = indexed(trace)
        sc = trace.comp.scenario
        q, k = sc.labels[op.row], sc.key_labels[op.col]
        visible = int(ix.allow[op.row].sum())
        return (f"selected[{q},{k}] = ? (1 kept, 0 not; {q} sees {visible} key{'s' if visible != 1 else ''},"
                f" keeps its top_k = {ix.top_k} by I, ties to the earlier key)")

    def _row_line(self, trace: TraceContext, row: int, d: int) -> str:
        ix = indexed(trace)
        sc = trace.comp.scenario
        visible = [int(j) for j in np.flatnonzero(ix.allow[row])]
        order = sorted(visible, key=lambda j: (-float(ix.scores[row, j]), j))
        ranked = " ≥ ".join(f"{fmt(float(ix.scores[row, j]), False, d)} ({sc.key_labels[j]})" for j in order)
        kept = [sc.key_labels[j] for j in order[:ix.top_k]]
        ties = len({float(ix.scores[row, j]) for j in visible}) < len(visible)
        tie = "; equal scores go to the earlier key" if ties else ""
        full = " (all it sees: for this query, full attention)" if len(visible) <= ix.top_k else ""
        return f"row {sc.labels[row]}: {ranked}; keeps the top {ix.top_k}: {', '.join(kept)}{full}{tie}"

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        if not has_indexer(trace):
            raise KeyError(name)
        return indexed(trace).selected.astype(np.float64)

    def made_from(self, trace: TraceContext, name: str, head: int | None) -> list[Key] | None:
        return []  # 1 or 0, written whole

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        return [("idx_scores", None), ("idx_selected", None)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("idx_selected", None)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        return f"selected = top-{indexed(trace).top_k}(I) (1 kept, 0 masked)"

    def markdown(self, page: MarkdownPage, head: int | None) -> list[str]:
        return [page.table("idx_selected", None, "selected"), "", *page.worked(self.stage.key, None)]


INDEX = Index()
SELECT = Select()


# --- the cost view (core/cost.py): the indexer's own work, before the heads attend top_k keys a row ---------


@counts(INDEX)
def _index_cost(sc: Scenario, ph: Phase) -> Count:
    """q_I = X·W_q (or c_Q·W_q) for the query rows, k_I = X·W_k for the new key rows (LayerNorm-ed: a root and
    d_I + 2 divisions a row, as Norm counts LayerNorm), w = X·W_w and its division by √(H_I·d_I), then every query
    row against EVERY key: the dots q_I·k_I of each index head and the weighted sum Σ_j w·ReLU(dot) (a contraction
    over the H_I heads, 2 FLOPs a head and cell; ReLU, a comparison, and RoPE's turn, multiplies and adds, are not
    counted, as elementwise work is not). It reads the index keys of all the keys (the cache of k_I at decode) and
    writes the new key rows' k_I (into that cache) and the scores I."""
    from qkv_tui.core.cost import B, Count, fig, term

    ix = INDEXER.of(sc)
    assert ix is not None
    d_model = int(sc.X.shape[1])
    d, H, dI = ("d_model", d_model), ("H_I", ix.num_heads), ("d_I", ix.d_index)
    q_in = ("d_cq", int(ix.W_q.shape[0])) if ix.from_latent else d
    two, b = ("2", 2), B(ph)
    x = "X" if sc.norm is None else "X̂"
    other = fig(term("div", ph.R, H))
    if ix.k_norm:
        other += fig(term("root", ph.NEW), term("div", ph.NEW, ("d_I + 2", ix.d_index + 2)))
    read = fig(term(x, ph.R, d, b), *((term("c_Q", ph.R, q_in, b),) if ix.from_latent else ()),
               term("W_q", q_in, H, dI, b), term("W_k", d, dI, b), term("W_w", d, H, b), term("k_I", ph.K, dI, b))
    return Count(INDEX.stage.key, INDEX.stage.name, ph.name,
                 matmul=fig(term("q_I", two, ph.R, q_in, H, dI), term("k_I", two, ph.NEW, d, dI),
                            term("w", two, ph.R, d, H), term("q_I·k_I", two, ph.R, ph.K, H, dI),
                            term("Σ w·ReLU", two, ph.R, ph.K, H)),
                 other=other, read=read,
                 written=fig(term("k_I", ph.NEW, dI, b), term("I", ph.R, ph.K, b)))


@counts(SELECT)
def _select_cost(sc: Scenario, ph: Phase) -> Count:
    """A top-k pass over each row's scores: no arithmetic, at least one comparison a score (each against the least
    kept; a heap may make up to log₂ top_k more, counted here as the least). It reads I and writes each row's kept
    keys as indices, 32-bit integers as DeepSeek-V3.2's kernels take them (4 bytes whatever --dtype)."""
    from qkv_tui.core.cost import B, Count, fig, term

    return Count(SELECT.stage.key, SELECT.stage.name, ph.name,
                 other=fig(term("compare", ph.R, ph.K)),
                 read=fig(term("I", ph.R, ph.K, B(ph))),
                 written=fig(term("indices", ph.R, ph.A, ("int32", 4))))
