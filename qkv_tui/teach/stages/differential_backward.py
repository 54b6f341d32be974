"""[differential] read backwards (contracts §11 and §14): from the gradient at a head's output to what its projections
gave, every cell's arithmetic read from the head's DiffBack (kernels/differential_backward.py) as core/gradients.py
kept it, and its DiffForward.

The order is the forward's, reversed: the (1 − λ_init) factor, the sub-norm, Mix (dV and the gradient at the map),
Subtract (dλ and the second map's share), λ's vectors, each map's softmax and scale, Score (both halves side by
side). These stand in for dMix … dScore, which step aside for a head whose part has stages of its own
(teach/stages/replaced.py); a step on Q and K before the scores is read back by its own part's stage after these
(RoPE's, each half on its own: teach/stages/rotate_blocks.py), and dProject then reads dQ, dK and dV.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING

import numpy as np

from qkv_tui.core import part_questions as ask
from qkv_tui.core.fmt import fmt
from qkv_tui.core.scenario import Matrix
from qkv_tui.kernels.differential import DiffForward, DiffMap
from qkv_tui.kernels.differential_backward import DiffBack, MapBack
from qkv_tui.kernels.norm_backward import row_means
from qkv_tui.teach.arith import quotient_line
from qkv_tui.teach.stages.common import Key, Operation, PaneStyle, Plan, Ref, Segment, Stage
from qkv_tui.teach.stages.context import TraceContext
from qkv_tui.teach.stages.differential import HEAD_ROW, SUB, diff_of, has_diff, over_of
from qkv_tui.teach.stages.grads import BackwardSpec, dot_cell, formula_cell, grads, has_backward, kept
from qkv_tui.teach.stages.norm import back_cell, back_stat_cell

if TYPE_CHECKING:
    from qkv_tui.teach.stages.markdown import MarkdownPage


def back_of(trace: TraceContext, head: int | None) -> DiffBack:
    assert head is not None
    own = grads(trace).heads[head].own
    assert isinstance(own, DiffBack)
    return own


def _map(f: DiffForward, half: int) -> DiffMap:
    return f.map_1 if half == 1 else f.map_2


def _mb(b: DiffBack, half: int) -> MapBack:
    return b.map_1 if half == 1 else b.map_2


def marks(f: DiffForward) -> str:
    """What the lines add to Q and K as scored, where the parts before the scores changed them (RoPE's ', its
    record's ``scored_mark``); nothing where they were scored as projected."""
    return "".join(str(getattr(r, "scored_mark", "")) for r in f.moved)


def _fixed(M: Matrix) -> Matrix:
    out = np.array(M, dtype=np.float64)
    out.setflags(write=False)
    return out


# each gradient's name in the worked lines and pane titles: what the page's tables write in their corner
CORNERS = {"dO_h": "dO", "dmixed_m": "m", "dgamma_sub": "dγ", "dlam": "dλ", "dP2": "dp₂",
           "ddots": "d(λ_q·λ_k)", "dlambda_q1": "dλ_q1", "dlambda_k1": "dλ_k1", "dlambda_q2": "dλ_q2",
           "dlambda_k2": "dλ_k2", "D_1": "D₁", "D_2": "D₂", "dS_1": "dS₁", "dS_2": "dS₂", "dscaled_1": "dscaled₁",
           "dscaled_2": "dscaled₂", "dscores_1": "dscores₁", "dscores_2": "dscores₂"}
DDOTS_COLS = ("d(λ_q1·λ_k1)", "d(λ_q2·λ_k2)")  # the ddots table's two cells, as its lines name them


class _DiffBack(BackwardSpec):
    per_head = True

    def markdown(self, page: MarkdownPage, head: int | None) -> list[str]:
        """Its tables named as its lines name them (dλ, not dlam; [dQ₁ ¦ dQ₂] by its title), then its worked lines."""
        out: list[str] = []
        for plan in self.segments(page.trace, head):
            name = plan.target
            corner = CORNERS.get(name, name)
            if name in ("dQ_s", "dK_s"):  # both halves side by side, as the title writes them ("|" would end a cell)
                corner = self.title(page.trace, name, head).replace(" | ", " ¦ ")
            out += [page.table(name, head, corner), ""]
        return out + page.worked(self.stage.key, head)

    def runs(self, trace: TraceContext) -> bool:
        return has_backward(trace) and has_diff(trace)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        if head is None or not self.runs(trace):
            raise KeyError(name)
        return self.table(trace, name, head)

    def table(self, trace: TraceContext, name: str, head: int) -> Matrix:
        raise KeyError(name)


class DFactor(_DiffBack):
    stage = Stage("ddiff_factor", "d(1 − λ_init)",
                  "Back through the differential head, its last step first. The output was (1 − λ_init)·normed, a"
                  " fixed factor, so the gradient at the sub-norm's output is the head's own dO times that factor:"
                  " d_normed = (1 − λ_init)·dO. λ_init is not learned; the λ vectors are, further back.")
    matrices = ("dO_h", "d_normed")

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        return [Plan("d_normed", trace.comp.scenario.n, 2 * diff_of(trace, head).d)]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        f, b, hg = diff_of(trace, h), back_of(trace, h), grads(trace).heads[h]
        q = trace.comp.scenario.labels[row]
        return formula_cell(trace, index, seg, row, col, d, float(b.d_normed[row, col]), lambda a, y: a * y,
                            [f.factor, float(hg.dO[row, col])], lambda t: f"{t[0]}·{t[1]}",
                            f"d_normed[{q},{col}] = (1 − λ_init)·dO[{q},{col}]", (Ref("dO_h", h, row, col),))

    def table(self, trace: TraceContext, name: str, head: int) -> Matrix:
        return grads(trace).heads[head].dO if name == "dO_h" else back_of(trace, head).d_normed

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        return [("dO_h", op.head), ("d_normed", op.head)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("d_normed", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        return "dO (this head's out)" if name == "dO_h" else "d_normed = (1 − λ_init)·dO"


def _xhat(trace: TraceContext, f: DiffForward) -> Matrix:
    """The sub-norm's x̂ = mixed / root, as the backward kept it."""
    return kept(trace, f.mixed / f.norm.root[:, None])


class DSubNorm(_DiffBack):
    stage = Stage("ddiff_subnorm", "dSub-norm",
                  "Back through the sub-norm, as through any RMSNorm: every x̂ of a row was divided by the row's root,"
                  " which every cell of mixed fed, so a cell's gradient is its own share γ·d_normed less what the root"
                  " passes back: dmixed = (γ·d_normed − x̂·m) / root, with m = mean(γ·d_normed·x̂) worked once per row."
                  " Where the table gives gains, dγ = Σ rows of d_normed·x̂ (this head's share: the heads share γ).")
    matrices = ("dmixed_m", "dmixed", "dgamma_sub")

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        n, w = trace.comp.scenario.n, 2 * diff_of(trace, head).d
        plans = [Plan("dmixed_m", n, 1), Plan("dmixed", n, w)]
        return plans + ([Plan("dgamma_sub", 1, w)] if back_of(trace, head).dgamma is not None else [])

    def _gamma(self, trace: TraceContext, f: DiffForward) -> Matrix:
        assert f.head is not None
        return np.ones(2 * f.d) if f.head.gamma is None else np.asarray(f.head.gamma, dtype=np.float64)

    def _m(self, trace: TraceContext, head: int) -> Matrix:
        f, b = diff_of(trace, head), back_of(trace, head)
        return kept(trace, row_means(self._gamma(trace, f), b.d_normed, _xhat(trace, f))[0])

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        f, b = diff_of(trace, h), back_of(trace, h)
        gamma, xhat, w = self._gamma(trace, f), _xhat(trace, f), 2 * f.d
        q = trace.comp.scenario.labels[row]
        if seg.target == "dmixed_m":
            terms = [v for c in range(w) for v in (float(gamma[c]), float(b.d_normed[row, c]), float(xhat[row, c]))]
            return back_stat_cell(trace, index, seg, row, d, float(self._m(trace, h)[row]), terms, w,
                                  f"m[{q}] = mean(γ·d_normed[{q}]·x̂[{q}])", (Ref("d_normed", h, row),))
        if seg.target == "dmixed":
            ops = [float(gamma[col]), float(b.d_normed[row, col]), float(xhat[row, col]), float(self._m(trace, h)[row]),
                   float(f.norm.root[row])]
            return back_cell(trace, index, seg, row, col, d, float(b.dmixed[row, col]), ops, False,
                             f"dmixed[{q},{col}] = (γ[{col}]·d_normed[{q},{col}] − x̂[{q},{col}]·m[{q}]) / root[{q}]",
                             (Ref("d_normed", h, row, col), Ref("dmixed_m", h, row)))
        assert b.dgamma is not None
        return dot_cell(trace, index, seg, row, col, d, float(b.dgamma[col]), b.d_normed[:, col], xhat[:, col], False,
                        False, f"dγ[{col}] = d_normed[:,{col}]·x̂[:,{col}]", (Ref("d_normed", h, None, col),))

    def table(self, trace: TraceContext, name: str, head: int) -> Matrix:
        b = back_of(trace, head)
        if name == "dmixed_m":
            return _fixed(self._m(trace, head)[:, None])
        if name == "dmixed":
            return b.dmixed
        if b.dgamma is None:
            raise KeyError(name)
        return _fixed(b.dgamma[None, :])

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        h, target = op.head, op.segment.target
        if target == "dmixed_m":
            return [("d_normed", h), ("normed", h), ("dmixed_m", h)]
        if target == "dmixed":
            return [("d_normed", h), ("dmixed_m", h), ("dmixed", h)]
        return [("d_normed", h), ("normed", h), ("dgamma_sub", h)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("dmixed", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        return {"dmixed_m": "m = mean(γ·d_normed·x̂)", "dmixed": "dmixed (through the sub-norm)",
                "dgamma_sub": "dγ = Σ d_normed·x̂ (this head's share)"}[name]


class DMix(_DiffBack):
    stage = Stage("ddiff_mix", "dMix",
                  "Back through Mix: mixed = weights·V, so V[j] met every query's weight on it, dV = weightsᵀ·dmixed"
                  " (a negative weight sends its value's gradient the other way), and the gradient at the map is"
                  " dweights = dmixed·Vᵀ, the full matrix: where the mask hid a key its weight was 0 in both maps,"
                  " and the gradient goes no further there.")
    matrices = ("dV", "dweights")
    key_columns = ("dweights",)

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        sc, w = trace.comp.scenario, 2 * diff_of(trace, head).d
        return [Plan("dV", sc.m, w), Plan("dweights", sc.n, sc.m)]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        f, b, sc = diff_of(trace, h), back_of(trace, h), trace.comp.scenario
        if seg.target == "dV":
            k = sc.key_labels[row]
            return dot_cell(trace, index, seg, row, col, d, float(b.dV[row, col]), f.weights[:, row], b.dmixed[:, col],
                            False, False, f"dV[{k},{col}] = weights[:,{k}]·dmixed[:,{col}]",
                            (Ref("weights", h, None, row), Ref("dmixed", h, None, col)))
        q, k = sc.labels[row], sc.key_labels[col]
        return dot_cell(trace, index, seg, row, col, d, float(b.dweights[row, col]), b.dmixed[row], f.V[col], False,
                        trace.integral("V", h), f"dweights[{q},{k}] = dmixed[{q}]·V[{k}]",
                        (Ref("dmixed", h, row), Ref("V", h, col)))

    def table(self, trace: TraceContext, name: str, head: int) -> Matrix:
        b = back_of(trace, head)
        return b.dV if name == "dV" else b.dweights

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        h = op.head
        if op.segment.target == "dV":
            return [("weights", h), ("dmixed", h), ("dV", h)]
        return [("dmixed", h), ("V", h), ("dweights", h)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("dV", head), ("dweights", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        return "dV = weightsᵀ·dmixed" if name == "dV" else "dweights = dmixed·Vᵀ"


class DSubtract(_DiffBack):
    stage = Stage("ddiff_subtract", "dSubtract",
                  "Back through Subtract: weights = p₁ − λ·p₂. The first map's gradient is dweights itself; the second"
                  " map's is dp₂ = −λ·dweights; and λ met every cell of p₂, so dλ = −Σ dweights ⊙ p₂, one number for"
                  " the head: how the loss would move if a little more of the second map were taken away.")
    matrices = ("dlam", "dP2")
    key_columns = ("dP2",)

    def row_label(self, trace: TraceContext, name: str, row: int) -> str | None:
        return HEAD_ROW if name in ("dlam",) else None  # one row per head, not a token's

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        sc = trace.comp.scenario
        return [Plan("dlam", 1, 1), Plan("dP2", sc.n, sc.m)]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        f, b, sc = diff_of(trace, h), back_of(trace, h), trace.comp.scenario
        if seg.target == "dlam":
            return dot_cell(trace, index, seg, row, col, d, b.dlambda, -b.dweights.reshape(-1), f.map_2.weights.reshape(-1),
                            False, False, "dλ = Σ (−dweights) ⊙ p₂",
                            (Ref("dweights", h), Ref("weights_2", h)))
        q, k = sc.labels[row], sc.key_labels[col]
        return formula_cell(trace, index, seg, row, col, d, float(b.map_2.dP[row, col]), lambda lam, g: -lam * g,
                            [f.lam.value, float(b.dweights[row, col])], lambda t: f"−{t[0]}·{t[1]}",
                            f"dp₂[{q},{k}] = −λ·dweights[{q},{k}]",
                            (Ref("lambda", h, 0, 4), Ref("dweights", h, row, col)))

    def table(self, trace: TraceContext, name: str, head: int) -> Matrix:
        b = back_of(trace, head)
        return _fixed(np.array([[b.dlambda]])) if name == "dlam" else b.map_2.dP

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        h = op.head
        if op.segment.target == "dlam":
            return [("dweights", h), ("weights_2", h), ("dlam", h)]
        return [("lambda", h), ("dweights", h), ("dP2", h)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("dlam", head), ("dP2", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        return "dλ = −Σ dweights⊙p₂" if name == "dlam" else "dp₂ = −λ·dweights"


LAMBDA_GRADS = ("dlambda_q1", "dlambda_k1", "dlambda_q2", "dlambda_k2")


class DLambda(_DiffBack):
    stage = Stage("ddiff_lambda", "dλ",
                  "Back into the λ vectors: λ = e^(λ_q1·λ_k1) − e^(λ_q2·λ_k2) + λ_init, and an exponential's slope is"
                  " itself, so the gradient at λ_q1·λ_k1 is dλ·e^(λ_q1·λ_k1) and at λ_q2·λ_k2 it is −dλ·e^(λ_q2·λ_k2)."
                  " A dot product's gradient in one vector is the other vector: dλ_q1 = dλ·λ₁·λ_k1, dλ_k1 = dλ·λ₁·λ_q1,"
                  " dλ_q2 = −dλ·λ₂·λ_k2, dλ_k2 = −dλ·λ₂·λ_q2. These are the head's rows of [differential]'s vectors.")
    matrices = ("ddots", *LAMBDA_GRADS)

    def row_label(self, trace: TraceContext, name: str, row: int) -> str | None:
        return HEAD_ROW if name in ("ddots", *LAMBDA_GRADS) else None  # one row per head, not a token's

    def col_label(self, trace: TraceContext, name: str, col: int) -> str | None:
        return DDOTS_COLS[col] if name == "ddots" else None

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        d = diff_of(trace, head).d
        return [Plan("ddots", 1, 2), *(Plan(name, 1, d) for name in LAMBDA_GRADS)]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        f, b = diff_of(trace, h), back_of(trace, h)
        assert f.head is not None
        lam = f.lam
        if seg.target == "ddots":
            if col == 0:
                return formula_cell(trace, index, seg, row, col, d, b.ddot_1, lambda g, e: g * e,
                                    [b.dlambda, lam.lambda_1], lambda t: f"{t[0]}·{t[1]}",
                                    "d(λ_q1·λ_k1) = dλ·e^(λ_q1·λ_k1)", (Ref("dlam", h, 0, 0), Ref("lambda", h, 0, 1)))
            return formula_cell(trace, index, seg, row, col, d, b.ddot_2, lambda g, e: -g * e,
                                [b.dlambda, lam.lambda_2], lambda t: f"−{t[0]}·{t[1]}",
                                "d(λ_q2·λ_k2) = −dλ·e^(λ_q2·λ_k2)", (Ref("dlam", h, 0, 0), Ref("lambda", h, 0, 3)))
        # dλ_q1 = ddot₁·λ_k1 and so on: the other vector of the pair, times its dot product's gradient
        pair = {"dlambda_q1": (0, "k1"), "dlambda_k1": (0, "q1"), "dlambda_q2": (1, "k2"), "dlambda_k2": (1, "q2")}
        which, other = pair[seg.target]
        g = b.ddot_1 if which == 0 else b.ddot_2
        vector = getattr(f.head, f"lambda_{other}")
        said = f"dλ_{seg.target[-2:]}[{col}] = d(λ_q{which + 1}·λ_k{which + 1})·λ_{other}[{col}]"
        return formula_cell(trace, index, seg, row, col, d, float(getattr(b, seg.target)[col]), lambda a, v: a * v,
                            [g, float(vector[col])], lambda t: f"{t[0]}·{t[1]}", said, (Ref("ddots", h, 0, which),))

    def table(self, trace: TraceContext, name: str, head: int) -> Matrix:
        b = back_of(trace, head)
        if name == "ddots":
            return _fixed(np.array([[b.ddot_1, b.ddot_2]]))
        return _fixed(np.asarray(getattr(b, name))[None, :])

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        h = op.head
        if op.segment.target == "ddots":
            return [("lambda", h), ("dlam", h), ("ddots", h)]
        return [("ddots", h), (op.segment.target, h)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [(name, head) for name in LAMBDA_GRADS]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        if name == "ddots":
            return "d(λ_q1·λ_k1), d(λ_q2·λ_k2)"
        return f"dλ_{name[-2:]}"


class DMapSoftmax(_DiffBack):
    def __init__(self, half: int) -> None:
        self.half, s = half, SUB[half]
        self.stage = Stage(f"ddiff_softmax_{half}", f"dSoftmax{s}",
                           f"Back through map {half}'s softmax, as through any: dS{s} = p{s} ⊙ (dp{s} − D{s}), with"
                           f" D{s}[t] = Σⱼ p{s}[t,j]·dp{s}[t,j] worked once per row."
                           + (" Here dp₁ is dweights itself: the first map enters the difference as it is." if half == 1
                              else " Here dp₂ = −λ·dweights, from dSubtract: the second map entered it times −λ.")
                           + " A masked cell's weight is exactly 0, so its dS is exactly 0.")
        self.matrices = (f"D_{half}", f"dS_{half}")
        self.key_columns = (f"dS_{half}",)
        self.styles = MappingProxyType({f"dS_{half}": PaneStyle(masked=True)})

    def _dp(self) -> str:
        return "dweights" if self.half == 1 else "dP2"

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        sc = trace.comp.scenario
        return [Plan(f"D_{self.half}", sc.n, 1), Plan(f"dS_{self.half}", sc.n, sc.m)]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h, a, s = seg.head, self.half, SUB[self.half]
        assert h is not None and col is not None
        f, mb, sc = diff_of(trace, h), _mb(back_of(trace, h), self.half), trace.comp.scenario
        P = _map(f, a).weights
        q = sc.labels[row]
        if seg.target == f"D_{a}":
            return dot_cell(trace, index, seg, row, col, d, float(mb.D[row]), P[row], mb.dP[row], False, False,
                            f"D{s}[{q}] = p{s}[{q}]·dp{s}[{q}]", (Ref(f"weights_{a}", h, row), Ref(self._dp(), h, row)))
        k = sc.key_labels[col]
        refs = (Ref(f"weights_{a}", h, row, col), Ref(self._dp(), h, row, col), Ref(f"D_{a}", h, row))
        op = formula_cell(trace, index, seg, row, col, d, float(mb.dS[row, col]), lambda p, x, y: p * (x - y),
                          [float(P[row, col]), float(mb.dP[row, col]), float(mb.D[row])],
                          lambda t: f"{t[0]}·({t[1]} − {t[2]})", f"dS{s}[{q},{k}] = p{s}[{q},{k}]·(dp{s}[{q},{k}] − D{s}[{q}])",
                          refs)
        if not sc.allow[row, col]:
            op = Operation(op.index, seg, row, col, 0.0, refs, f"{op.arithmetic} (masked)",
                           (f"the mask hides {k} from {q}: its weight is exactly 0, so its gradient is exactly 0",))
        return op

    def table(self, trace: TraceContext, name: str, head: int) -> Matrix:
        mb = _mb(back_of(trace, head), self.half)
        return _fixed(mb.D[:, None]) if name.startswith("D_") else mb.dS

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        h, a = op.head, self.half
        if op.segment.target.startswith("D_"):
            return [(f"weights_{a}", h), (self._dp(), h), (f"D_{a}", h)]
        return [(f"weights_{a}", h), (self._dp(), h), (f"dS_{a}", h)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [(f"dS_{self.half}", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        s = SUB[self.half]
        return f"D{s} = rowsum(p{s}⊙dp{s})" if name.startswith("D_") else f"dS{s} = p{s}⊙(dp{s} − D{s})"


class DMapScale(_DiffBack):
    def __init__(self, half: int) -> None:
        self.half, s = half, SUB[half]
        self.stage = Stage(f"ddiff_scale_{half}", f"dScale{s}",
                           f"Back through map {half}'s Scale: its scores were divided by √d (the half width), so their"
                           f" gradient is divided by it too, dscores{s} = dS{s} / √d (under a soft-cap, its slope"
                           " 1 − tanh²(scaled / c) first). Both maps share the divisor and any fixed bias.")
        self.matrices = (f"dscaled_{half}", f"dscores_{half}")
        self.key_columns = self.matrices
        self.styles = MappingProxyType({name: PaneStyle(masked=True) for name in self.matrices})

    def meaning(self, trace: TraceContext, head: int | None) -> str:
        by, s = over_of(trace, head), SUB[self.half]
        if by == "√d":
            return self.stage.meaning
        return (f"Back through map {self.half}'s Scale: its scores were divided by {by} (the scale the scenario sets,"
                f" in place of √d), so their gradient is divided by it too, dscores{s} = dS{s} / {by} (under a"
                " soft-cap, its slope 1 − tanh²(scaled / c) first). Both maps share the divisor and any fixed bias.")

    def _capped(self, trace: TraceContext, head: int) -> bool:
        """Whether a part steps the head's scaled scores (the soft-cap): the gradient passes its step first."""
        return ask.stepper(trace.comp.heads[head]) is not None

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        assert head is not None
        sc = trace.comp.scenario
        through_step = [Plan(f"dscaled_{self.half}", sc.n, sc.m)] if self._capped(trace, head) else []
        return [*through_step, Plan(f"dscores_{self.half}", sc.n, sc.m)]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h, a, s = seg.head, self.half, SUB[self.half]
        assert h is not None and col is not None
        f, mb, sc = diff_of(trace, h), _mb(back_of(trace, h), self.half), trace.comp.scenario
        q, k = sc.labels[row], sc.key_labels[col]
        masked = "" if sc.allow[row, col] else " (masked)"
        if seg.target == f"dscaled_{a}":
            step = ask.stepper(trace.comp.heads[h])  # the part that stepped the scores writes the line back through it
            refs = (Ref(f"dS_{a}", h, row, col), Ref(f"scaled_{a}", h, row, col))
            op = formula_cell(trace, index, seg, row, col, d, float(mb.dscaled[row, col]), step.back_value,
                              [float(mb.dS[row, col]), float(_map(f, a).scaled[row, col]), *step.back_operands],
                              step.back_written,
                              f"dscaled{s}[{q},{k}] = dS{s}[{q},{k}]·{step.back_symbolic.format(scaled=f'scaled{s}')}",
                              refs)
            return Operation(op.index, seg, row, col, op.value, refs, op.arithmetic + masked)
        source = f"dscaled_{a}" if self._capped(trace, h) else f"dS_{a}"
        shown_source = f"dscaled{s}" if self._capped(trace, h) else f"dS{s}"
        default = trace.comp.heads[h].scale_is_default and trace.hand is None
        value = float(mb.dscores[row, col])
        work = quotient_line(float(mb.dscaled[row, col]), False, f.divisor, f"√{f.d}" if default else None,
                             f.divisor == round(f.divisor), fmt(value, False, d), d)
        return Operation(index, seg, row, col, value, (Ref(source, h, row, col),),
                         f"dscores{s}[{q},{k}] = {shown_source}[{q},{k}] / {over_of(trace, h)} = {work}{masked}")

    def table(self, trace: TraceContext, name: str, head: int) -> Matrix:
        mb = _mb(back_of(trace, head), self.half)
        if name.startswith("dscaled_"):
            if not self._capped(trace, head):
                raise KeyError(name)
            return mb.dscaled
        return mb.dscores

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        h, a = op.head, self.half
        if op.segment.target.startswith("dscaled_"):
            return [(f"dS_{a}", h), (f"scaled_{a}", h), (f"dscaled_{a}", h)]
        source = f"dscaled_{a}" if self._capped(trace, h or 0) else f"dS_{a}"
        return [(source, h), (f"dscores_{a}", h)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [(f"dscores_{self.half}", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        s = SUB[self.half]
        if name.startswith("dscaled_"):
            return f"dscaled{s} = dS{s}·(1 − tanh²)"
        return f"dscores{s} = {'dscaled' if self._capped(trace, head or 0) else 'dS'}{s} / {over_of(trace, head)}"


class DScore(_DiffBack):
    stage = Stage("ddiff_score", "dScore",
                  "Back through both maps' Score at once. scores₁[t,j] was Q₁[t]·K₁[j], so dQ₁ = dscores₁·K₁ and"
                  " dK₁ = dscores₁ᵀ·Q₁; the second map likewise gives dQ₂ and dK₂. Side by side they are the gradient"
                  " at the head's whole 2d-wide Q and K: [dQ₁ | dQ₂] and [dK₁ | dK₂], as the projection split them.")
    matrices = ("dQ_s", "dK_s")

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        sc, w = trace.comp.scenario, 2 * diff_of(trace, head).d
        return [Plan("dQ_s", sc.n, w), Plan("dK_s", sc.m, w)]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        f, b, sc = diff_of(trace, h), back_of(trace, h), trace.comp.scenario
        a = 1 if col < f.d else 2
        c, s = col - (a - 1) * f.d, SUB[a]
        mb = _mb(b, a)
        Q_used, K_used = f.used(a)
        turned = marks(f)
        if seg.target == "dQ_s":
            t = sc.labels[row]
            return dot_cell(trace, index, seg, row, col, d, float(mb.dQ_used[row, c]), mb.dscores[row], K_used[:, c],
                            False, trace.integral("K", h) and not f.moved,
                            f"dQ{s}{turned}[{t},{c}] = dscores{s}[{t}]·K{s}{turned}[:,{c}]",
                            (Ref(f"dscores_{a}", h, row), Ref("K", h, None, col)))
        k = sc.key_labels[row]
        return dot_cell(trace, index, seg, row, col, d, float(mb.dK_used[row, c]), mb.dscores[:, row], Q_used[:, c],
                        False, trace.integral("Q", h) and not f.moved,
                        f"dK{s}{turned}[{k},{c}] = dscores{s}[:,{k}]·Q{s}{turned}[:,{c}]",
                        (Ref(f"dscores_{a}", h, None, row), Ref("Q", h, None, col)))

    def table(self, trace: TraceContext, name: str, head: int) -> Matrix:
        ab = back_of(trace, head).attend
        return ab.dQ_used if name == "dQ_s" else ab.dK_used

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        h = op.head
        a = 1 if (op.col or 0) < diff_of(trace, h).d else 2
        if op.segment.target == "dQ_s":
            return [(f"dscores_{a}", h), ("K", h), ("dQ_s", h)]
        return [(f"dscores_{a}", h), ("Q", h), ("dK_s", h)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("dQ_s", head), ("dK_s", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        turned = "" if head is None else marks(diff_of(trace, head))
        return f"[dQ₁ | dQ₂]{turned}" if name == "dQ_s" else f"[dK₁ | dK₂]{turned}"


FACTOR, SUBNORM, MIX, SUBTRACT, LAMBDA = DFactor(), DSubNorm(), DMix(), DSubtract(), DLambda()
SOFTMAX_1, SCALE_1, SOFTMAX_2, SCALE_2 = DMapSoftmax(1), DMapScale(1), DMapSoftmax(2), DMapScale(2)
SCORE = DScore()
