"""The QK-norm stage (after Project, before Rotate): each query and key vector RMS-normalised, one cell at a time."""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING

import numpy as np

from qkv_tui.core.engine import Computation, HeadResult
from qkv_tui.core.scenario import Matrix
from qkv_tui.kernels.norm import normalise
from qkv_tui.kernels.qk_norm import QKNormed
from qkv_tui.teach.stages.common import (
    K_SLOT,
    Q_SLOT,
    Key,
    Operation,
    Plan,
    Ref,
    Segment,
    Stage,
    StageSpec,
    counts,
    kv_shared,
)
from qkv_tui.teach.stages.context import TraceContext
from qkv_tui.teach.stages.grads import BackwardSpec, dot_cell, grads, handed_back, has_backward, kept
from qkv_tui.teach.stages.markdown import MarkdownPage
from qkv_tui.teach.stages.norm import RowStats, back_cell, back_stat_cell, cell_lines, eps_text
from qkv_tui.teach.stages.printed import PrintedCells, PrintedChain, Table, idx

if TYPE_CHECKING:  # the cost view's module loads on its first use
    from qkv_tui.core.cost import Count, Phase
    from qkv_tui.core.scenario import Scenario


QK_NORM_MEANING = (
    "RMSNorm on every query and key vector, after the projection and before RoPE: each cell is divided by its"
    " vector's root mean square √(mean(x²) + eps) and multiplied by a learned gain γ. Before its gains every Q"
    " and K row has length √dₖ, so a score is bounded by the gains alone, |q̂·k̂| ≤ dₖ·max|γ_q|·max|γ_k|,"
    " however large W_Q and W_K become: the logits stay bounded and training stays stable. That is how Gemma 3"
    " could drop Gemma 2's soft-capping of the logits, and how Gemma 4 drops the 1/√dₖ as well. Qwen3 and"
    " Gemma 3 normalise each head's vector on its own; OLMo 2 normalises a token's whole projection, every"
    " head's columns together, before cutting it into heads."
)
HAT = {"Q": "Q̂", "K": "K̂"}
PER_HEAD_LENGTH = ("Before its gains every Q and K row has length √dₖ, so a score is bounded by the gains alone,"
                   " |q̂·k̂| ≤ dₖ·max|γ_q|·max|γ_k|,")
WHOLE_ROW_LENGTH = ("Before its gains a token's whole Q row (and K row), every head's columns, has length √(its width),"
                    " so one head's part is at most that long, not √dₖ, and a score is still bounded by the gains alone,")


class QKNormStage(StageSpec):
    stage = Stage("qk_norm", "QK-norm", QK_NORM_MEANING)
    per_head = True
    matrices = ("Q_norm", "K_norm")

    def row_label(self, trace: TraceContext, name: str, row: int) -> str | None:
        return trace.comp.scenario.key_labels[row] if name == "K_norm" else None
    transposed = MappingProxyType({"K_normT": "K_norm"})

    def runs(self, trace: TraceContext) -> bool:
        return trace.comp.scenario.qk_norm is not None

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        assert head is not None
        sc, hr = trace.comp.scenario, trace.comp.heads[head]
        plans = [Plan("Q_norm", sc.n, hr.d_k)]
        if trace.kv_owner[head] == head:  # a shared K/V head's keys are normalised once, by its first reader
            plans.append(Plan("K_norm", sc.m, hr.d_k))
        return plans

    def meaning(self, trace: TraceContext, head: int | None) -> str:
        qk = trace.comp.scenario.qk_norm
        assert qk is not None
        if qk.over == "head":
            return self.stage.meaning + " Here the mean square is taken over each head's dₖ columns on their own."
        # over every head, a head's part of the row is not √dₖ long (qk_norm_all's Q̂[I] = [1.789, 0], √2 = 1.414)
        return (self.stage.meaning.replace(PER_HEAD_LENGTH, WHOLE_ROW_LENGTH)
                + " Here the mean square of a token is taken over every head's columns together (the whole projection).")

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        role = seg.target[0]  # "Q" or "K"
        value, text, details = qk_norm_lines(trace, h, role, row, col, d)
        return Operation(index, seg, row, col, value, (Ref(role, h, row),), text, details)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        if head is None:
            raise KeyError(name)
        normed = trace.comp.heads[head].part(QKNormed)
        if normed is None or name not in ("Q_norm", "K_norm"):
            raise KeyError(name)
        return normed.Q_norm if name == "Q_norm" else normed.K_norm

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        target = op.segment.target
        return [(target[0], op.head), (target, op.head)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("Q_norm", head), ("K_norm", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        hr = trace.comp.heads[head] if head is not None else None
        if name == "K_normT":
            return f"K̂ᵀ{kv_shared(trace, hr)}"
        role = name[0]
        qk = trace.comp.scenario.qk_norm
        over = " over all heads" if qk is not None and qk.over == "all" else ""
        return f"{HAT[role]} = rmsnorm({role}){over}" + (kv_shared(trace, hr) if role == "K" else "")

    def lights(self, seg: Segment) -> frozenset[int]:
        return frozenset({Q_SLOT if seg.target == "Q_norm" else K_SLOT})

    def markdown(self, page: MarkdownPage, head: int | None) -> list[str]:
        assert head is not None
        qk = page.trace.comp.scenario.qk_norm
        assert qk is not None
        over = "each head's dₖ columns" if qk.over == "head" else "every head's columns of the token together"
        out = [f"RMSNorm over {over}, eps = {eps_text(qk.eps)}: Q̂ = Q / √(ms + eps)·γ_q, K̂ = K / √(ms + eps)·γ_k.", "",
               page.table("Q_norm", head, "Q̂"), ""]
        if page.trace.kv_owner[head] == head:
            out += [page.table("K_norm", head, "K̂"), ""]
        return out + page.worked(self.stage.key, head)

    def worksheet_tables(self, chain: PrintedChain, head: int | None) -> list[Table]:
        assert head is not None
        h, sc = head, chain.sc
        qk = sc.qk_norm
        assert qk is not None
        d_k = sc.heads[h].d_k
        out: list[Table] = []
        if "gamma_q" not in {t.key for t in chain.tables}:  # the gains once, before the first head's tables
            for role, gamma in (("q", qk.gamma_q), ("k", qk.gamma_k)):
                cols = idx(len(gamma)) if qk.over == "head" else _wide_cols(len(gamma), d_k)
                out.append(Table(f"gamma_{role}", f"γ_{role}", f"γ_{role} (the {'query' if role == 'q' else 'key'} gains)",
                                 "qk_norm", h, gamma[None, :], (f"γ_{role}",), cols, True, False))
        roles = [("Q", h, sc.labels)]
        if chain.owners[h] == h:
            roles.append(("K", h, sc.key_labels))
        for role, g, labels in roles:
            M = chain.values(f"{role}.{g}")  # (rows, d_k) as printed
            gamma_q, gamma_k = qk.gammas(h, sc.kv_head(h), d_k)
            gamma = gamma_q if role == "Q" else gamma_k
            rows = None
            if qk.over == "all":  # the statistics of the whole projection, from every head's printed values
                rows = normalise(chain.page, "rms", _printed_all(chain, role), np.ones(1), None, qk.eps)
            normed = normalise(chain.page, "rms", M, gamma[None, :], None, qk.eps, rows)
            # over every head, a row's statistics need every head's Q, printed in the later heads' sections: printed
            # here for the student rather than left blank
            over = (" over every head's columns (printed: it needs every head's Q and K, from each head's Project section)"
                    if qk.over == "all" else "")
            out.append(Table(f"{role.lower()}ms.{g}", f"ms_{role}", f"ms_{role} = the mean of each {role} row's squares{over}",
                             "qk_norm", h, normed.spread[:, None], labels, ("ms",), False, qk.over == "head"))
            out.append(Table(f"{role}_norm.{g}", HAT[role], f"{HAT[role]} = RMSNorm({role}), row by row", "qk_norm", h,
                             normed.X_norm, labels, idx(d_k), False, True))
        return out

    def worksheet_rules(self, comp: Computation) -> list[str]:
        qk = comp.scenario.qk_norm
        if qk is None:
            return []
        over = (" over each head's own columns" if qk.over == "head" else
                " over every head's columns of the token together (all heads' Q, or all K/V heads' K)")
        return [f"- QK-norm (RMSNorm of each Q and K row{over}): ms = the mean of the row's squares; each cell"
                " Q̂ = q / √(ms + eps)·γ_q, K̂ = k / √(ms + eps)·γ_k.",
                f"  eps = {float(qk.eps)!r}. Rotate and Score then use Q̂ and K̂."]

    def worksheet_line(self, cells: PrintedCells, table: Table, row: int, col: int, answer: str) -> str:
        sc = cells.sc
        qk = sc.qk_norm
        assert qk is not None and table.head is not None
        role = "Q" if table.key.startswith(("Q", "q")) else "K"
        g = table.key.split(".")[1]
        token = (sc.labels if role == "Q" else sc.key_labels)[row]
        if table.name.startswith("ms"):
            keys = [f"{role}.{g}"] if qk.over == "head" else _all_keys(cells, role)
            values = [cells.txt(key, row, c) for key in keys for c in range(cells.tables[key].values.shape[1])]
            terms = " + ".join(f"{x}·{x}" for x in values)
            return f"ms_{role}[{token}] = ({role}[{token},0]² + …) / {len(values)} = ({terms}) / {len(values)} = {answer}"
        h, d_k = int(g), cells.tables[f"{role}.{g}"].values.shape[1]
        wide = h * d_k + col if role == "Q" else sc.kv_head(h) * d_k + col
        at = col if qk.over == "head" else wide
        x, ms, gamma = cells.txt(f"{role}.{g}", row, col), cells.txt(table.key.replace(f"{role}_norm", f"{role.lower()}ms"),
                                                                     row, 0), cells.txt(f"gamma_{role.lower()}", 0, at)
        return (f"{HAT[role]}[{token},{col}] = {role}[{token},{col}] / √(ms_{role}[{token}] + eps)·γ_{role.lower()}[{at}]"
                f" = {x} / √({ms} + {qk.eps!r})·{gamma} = {answer}")


SPEC = QKNormStage()


@counts(SPEC)
def _cost(sc: Scenario, ph: Phase) -> Count:
    """One root per vector normalised (each head's, or each token's whole row with over = "all") and a division
    per cell plus the mean's."""
    from qkv_tui.core.cost import B, Count, fig, shapes, term

    qn = sc.qk_norm
    assert qn is not None
    s = shapes(sc)
    if qn.over == "head":
        dk = s.heads[0][0]
        q_vec, k_vec = (ph.R, ("h", s.h)), (ph.NEW, ("h_kv", len(s.kv)))
        other = fig(term("root Q", *q_vec), term("div Q", *q_vec, ("d_k + 1", dk + 1)),
                    term("root K", *k_vec), term("div K", *k_vec, ("d_k + 1", dk + 1)))
    else:
        other = fig(term("root Q", ph.R), term("div Q", ph.R, ("Σd_k + 1", s.sum_dk + 1)),
                    term("root K", ph.NEW), term("div K", ph.NEW, ("Σ_kv d_k + 1", s.kv_dk + 1)))
    q, k = (ph.R, ("Σd_k", s.sum_dk), B(ph)), (ph.NEW, ("Σ_kv d_k", s.kv_dk), B(ph))
    gains = (term("γ_q", ("len γ_q", int(qn.gamma_q.size)), B(ph)), term("γ_k", ("len γ_k", int(qn.gamma_k.size)), B(ph)))
    return Count(SPEC.stage.key, SPEC.stage.name, ph.name, other=other,
                 read=fig(term("Q", *q), term("K", *k), *gains), written=fig(term("Q̂", *q), term("K̂", *k)))


def qk_norm_lines(trace: TraceContext, h: int, role: str, row: int, col: int, d: int) -> tuple[float, str, tuple[str, ...]]:
    """``Q̂[I,0] = Q[I,0] / √(ms + eps)·γ_q[0] = 2 / √(2.000 + 1e-06)·1 = 1.414`` and the vector's statistics."""
    comp = trace.comp
    sc, hr = comp.scenario, comp.heads[h]
    qk = sc.qk_norm
    normed = hr.need(QKNormed).Q_normed if role == "Q" else hr.need(QKNormed).K_normed
    assert qk is not None and normed is not None
    token = (sc.labels if role == "Q" else sc.key_labels)[row]
    gamma_q, gamma_k = qk.gammas(h, hr.kv_head, hr.d_k)
    gamma = float((gamma_q if role == "Q" else gamma_k)[col])
    if qk.over == "head":
        source, at, gamma_at, of = (hr.Q if role == "Q" else hr.K)[row], col, col, f"{role}[{token}]"
    else:
        wide = _wide(trace, role)
        offset = (h if role == "Q" else hr.kv_head) * hr.d_k
        source, at, gamma_at, of = wide[row], offset + col, offset + col, f"{role}[{token}], every head"
    symbolic = f"{HAT[role]}[{token},{col}] = {role}[{token},{col}] / √(ms + eps)·γ_{role.lower()}[{gamma_at}]"
    stats = RowStats(0.0, float(normed.spread[row]), float(normed.root[row]), qk.eps)
    value = float(normed.X_norm[row, col])
    text, details = cell_lines(symbolic, source, at, value, gamma, None, stats, False, of, d, trace.hand)
    return value, text, details


def _wide(trace: TraceContext, role: str) -> Matrix:
    """Every head's Q (or every K/V head's K) side by side: the row QK-norm over all heads takes statistics of."""
    def make() -> Matrix:
        heads: list[HeadResult] = list(trace.comp.heads)
        if role == "Q":
            return np.concatenate([hr.Q for hr in heads], axis=1)  # (n, H·d_k)
        owners = sorted({hr.kv_head: hr for hr in reversed(heads)}.items())
        return np.concatenate([hr.K for _, hr in owners], axis=1)  # (m, H_kv·d_k)

    return trace.memo(f"qk_norm wide {role}", make)


def _wide_cols(count: int, d_k: int) -> tuple[str, ...]:
    return tuple(f"h{i // d_k + 1}:{i % d_k}" for i in range(count))


def _printed_all(chain: PrintedChain, role: str) -> Matrix:
    """Every head's printed Q (or each K/V head's K) side by side, as the page prints them (rounded)."""
    from qkv_tui.teach.stages.raw_projections import raw_projections

    Q_raw, K_raw, _ = raw_projections(chain)
    sc = chain.sc
    if role == "Q":
        return np.concatenate([chain.rounded(q) for q in Q_raw], axis=1)
    first = sorted({sc.kv_head(g): g for g in sorted(K_raw, reverse=True)}.items())
    return np.concatenate([chain.rounded(K_raw[g]) for _, g in first], axis=1)


def _all_keys(cells: PrintedCells, role: str) -> list[str]:
    """The page's tables of every head's Q (or each K/V head's K), in the wide matrix's order."""
    sc = cells.sc
    if role == "Q":
        return [f"Q.{h}" for h in range(len(sc.heads))]
    first: dict[int, int] = {}
    for h in range(len(sc.heads)):
        first.setdefault(sc.kv_head(h), cells.owners[h])
    return [f"K.{g}" for _, g in sorted(first.items())]



class QKNormBack(BackwardSpec):
    """QK-norm read backwards (RMSNorm of each Query and Key, before RoPE): from dQ̂, dK̂ to dQ, dK and the gains."""

    stage = Stage("dqk_norm", "dQK-norm",
                  "Back through QK-norm. Each q̂ = q / root·γ_q, and every q of the row fed its root, so a cell's"
                  " gradient is its own share γ·dQ̂ less what the root passes back: dQ = (γ·dQ̂ − x̂·m) / root with"
                  " m = mean(γ·dQ̂·x̂) per row, x̂ = q / root (the same for K). The gains met every row:"
                  " dγ_q = Σ rows of dQ̂·x̂.")
    per_head = True
    matrices = ("dQ_m", "dQ_n", "dK_m", "dK_n", "dgamma_q", "dgamma_k")

    def meaning(self, trace: TraceContext, head: int | None) -> str:
        qk = trace.comp.scenario.qk_norm
        text = self.stage.meaning
        if qk is not None and qk.over == "all":
            text += (" Here the root is taken over every head's columns together, so m is a mean over the whole"
                     " projection's row, and a head's gradient reaches the other heads' columns through it.")
        return text

    def runs(self, trace: TraceContext) -> bool:
        return has_backward(trace) and trace.comp.scenario.qk_norm is not None

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        assert head is not None
        sc, hr = trace.comp.scenario, trace.comp.heads[head]
        return [Plan("dQ_m", sc.n, 1), Plan("dQ_n", sc.n, hr.d_k), Plan("dK_m", sc.m, 1), Plan("dK_n", sc.m, hr.d_k),
                Plan("dgamma_q", 1, hr.d_k), Plan("dgamma_k", 1, hr.d_k)]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        comp = trace.comp
        sc, hr, hg = comp.scenario, comp.heads[h], grads(trace).heads[h]
        qk = sc.qk_norm
        assert qk is not None
        query = seg.target in ("dQ_m", "dQ_n", "dgamma_q")
        role = "Q" if query else "K"
        gamma = qk.gammas(h, sc.kv_head(h), hr.d_k)[0 if query else 1]
        raw = hr.Q if query else hr.K
        normed = hr.need(QKNormed).Q_normed if query else hr.need(QKNormed).K_normed
        assert normed is not None
        dy = hg.dQ_turned if query else hg.dK_turned
        xhat = kept(trace, raw / normed.root[:, None])  # (rows, d_k)
        label = (sc.labels if query else sc.key_labels)[row]
        wide = qk.over == "all"
        m = kept(trace, _m(trace, h, query))
        if seg.target.startswith("dgamma"):
            value = float((hg.dgamma_q if query else hg.dgamma_k)[col])  # type: ignore[index]
            return dot_cell(trace, index, seg, row, col, d, value, dy[:, col], xhat[:, col], False, False,
                            f"dγ_{role.lower()}[{col}] = d{role}̂[:,{col}]·x̂[:,{col}]", (Ref(f"d{role}_n", h, None, col),))
        if seg.target.endswith("_m"):
            said = f"m[{label}] = mean(γ·d{role}̂[{label}]·x̂[{label}])"
            refs = (Ref(f"d{role}_n", h, row),)
            if wide:
                return Operation(index, seg, row, 0, float(m[row]), refs,
                                 f"{said} over every head's columns = {trace.formatted(seg.target, h, float(m[row]), d)}")
            terms = [v for c in range(hr.d_k) for v in (float(gamma[c]), float(dy[row, c]), float(xhat[row, c]))]
            return back_stat_cell(trace, index, seg, row, d, float(m[row]), terms, hr.d_k, said, refs)
        value = float((hg.dQ if query else hg.dK)[row, col])
        said = f"d{role}[{label},{col}] = (γ[{col}]·d{role}̂[{label},{col}] − x̂[{label},{col}]·m[{label}]) / root[{label}]"
        refs = (Ref(f"d{role}_m", h, row),)
        if wide and not query:  # the K/V heads' columns meet in one root: a head's share is not one row's formula
            return Operation(index, seg, row, col, value, refs,
                             f"d{role}[{label},{col}] = through the norm over every head's columns"
                             f" = {trace.formatted(seg.target, h, value, d)}")
        return back_cell(trace, index, seg, row, col, d, value,
                         [float(gamma[col]), float(dy[row, col]), float(xhat[row, col]), float(m[row]),
                          float(normed.root[row])], False, said, refs)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        if head is None or not has_backward(trace) or trace.comp.scenario.qk_norm is None:
            raise KeyError(name)
        hg = grads(trace).heads[head]
        if name in ("dQ_m", "dK_m"):
            return kept(trace, _m(trace, head, name == "dQ_m"))[:, None]
        if name == "dQ_n":
            return hg.dQ
        if name == "dK_n":
            return hg.dK
        value = hg.dgamma_q if name == "dgamma_q" else hg.dgamma_k
        assert value is not None
        return value[None, :]

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        h = op.head
        role = "Q" if op.segment.target in ("dQ_m", "dQ_n", "dgamma_q") else "K"
        source = handed_back(trace, h, role, after=QKNormed)  # the rotation's gradient, or Score's
        return [(source, h), (role, h), (op.segment.target, h)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        return {"dQ_m": "m = mean(γ·dQ̂·x̂)", "dK_m": "m = mean(γ·dK̂·x̂)", "dQ_n": "dQ (through QK-norm)",
                "dK_n": "dK (through QK-norm)", "dgamma_q": "dγ_q = Σ dQ̂·x̂", "dgamma_k": "dγ_k = Σ dK̂·x̂"}[name]


def _m(trace: TraceContext, h: int, query: bool) -> Matrix:
    """Each row's m = mean(γ·dy·x̂), over the head's d_k or, with over = "all", over every head's columns: (rows,)."""
    from qkv_tui.kernels.norm_backward import row_means  # the backward kernels load with a backward pass

    comp = trace.comp
    sc, g = comp.scenario, grads(trace)
    qk = sc.qk_norm
    assert qk is not None
    if qk.over == "head":
        hr, hg = comp.heads[h], g.heads[h]
        gamma = qk.gammas(h, sc.kv_head(h), hr.d_k)[0 if query else 1]
        normed = hr.need(QKNormed).Q_normed if query else hr.need(QKNormed).K_normed
        assert normed is not None
        raw, dy = (hr.Q, hg.dQ_turned) if query else (hr.K, hg.dK_turned)
        return row_means(gamma, dy, kept(trace, raw / normed.root[:, None]))[0]
    # over every head's columns: the wide row's mean, this head's block alone for K (its own contribution)
    heads = range(len(comp.heads)) if query else [h]
    total = np.zeros(sc.n if query else sc.m)
    width = len(comp.heads) * comp.heads[0].d_k if query else len(qk.gamma_k)
    for i in heads:
        hr, hg = comp.heads[i], g.heads[i]
        gamma = qk.gammas(i, sc.kv_head(i), hr.d_k)[0 if query else 1]
        normed = hr.need(QKNormed).Q_normed if query else hr.need(QKNormed).K_normed
        assert normed is not None
        raw, dy = (hr.Q, hg.dQ_turned) if query else (hr.K, hg.dK_turned)
        total += row_means(gamma, dy, kept(trace, raw / normed.root[:, None]))[0] * hr.d_k  # its block's sum
    result: Matrix = total / width
    return result


BACKWARD = QKNormBack()
