"""The gated delta rule's stages (Qwen3-Next, Qwen3.5; Yang et al. 2024), in place of Score … Mix under ``[deltanet]``:

- Normalise: q = Q / √(ΣQ² + 1e-6) / √d_k and k = K / √(ΣK² + 1e-6), cell by cell;
- Gates (where g and β come from the weights): g = −e^{A_log}·softplus(X̂·W_a + dt_bias), β = σ(X̂·W_b);
- Delta: token after token, every cell a step: the decay S·e^g, the recall kv = Sᵀk, the correction
  δ = (v − kv)·β, the rank-one write S + kδᵀ and the read o = Sᵀq. Its last line is the decaying causal
  mask the state amounts to.

The Delta stage is one segment of n rows (one per token) whose columns are the five steps' cells side by
side, so the trace walks token by token; its panes show each block as a matrix of its own (:meth:`Delta.filled`).
"""

from __future__ import annotations

import math
from types import MappingProxyType

import numpy as np

from qkv_tui.core.engine import Computation, HeadResult
from qkv_tui.core.fmt import fmt, vector
from qkv_tui.core.scenario import Matrix
from qkv_tui.kernels.deltanet import L2_EPS, decay_mask
from qkv_tui.kernels.deltanet_parts import Convolved
from qkv_tui.teach.arith import dot_line, fit
from qkv_tui.teach.stages.common import (
    K_SLOT,
    Q_SLOT,
    QK_DOT,
    V_DOT,
    V_SLOT,
    FormulaPart,
    Key,
    Operation,
    PaneStyle,
    Plan,
    Ref,
    Segment,
    Stage,
    StageSpec,
)
from qkv_tui.teach.stages.context import TraceContext
from qkv_tui.teach.stages.markdown import MarkdownPage
from qkv_tui.teach.stages.printed import PrintedCells, PrintedChain, Table, idx
from qkv_tui.teach.stages.score import scored, scored_names

BLOCKS = ("dn_decayed", "dn_kv", "dn_delta", "dn_S", "dn_o")  # the Delta stage's steps, in a token's order


def _on(trace: TraceContext) -> bool:
    return getattr(trace.comp.scenario, "deltanet", None) is not None


def _hr(trace: TraceContext, head: int | None) -> HeadResult:
    assert head is not None
    return trace.comp.heads[head]


def _conv(hr: HeadResult) -> tuple[Convolved, Convolved, Convolved] | None:
    return None if hr.around is None else hr.around.conv


def _read(trace: TraceContext, hr: HeadResult) -> tuple[str, str, str, str]:
    """(Q pane, K pane, Q name, K name) the rule reads: the projections, or their convolution (deltanet_io.py)."""
    return scored(trace) if _conv(hr) is None else ("dn_cq", "dn_ck", "Qc", "Kc")


def _raw(hr: HeadResult, is_q: bool) -> Matrix:
    conv = _conv(hr)
    if conv is None:
        return hr.Q_used if is_q else hr.K_used
    return conv[0].out if is_q else conv[1].out


def _values(hr: HeadResult) -> Matrix:
    conv = _conv(hr)
    return hr.V if conv is None else conv[2].out


# --- the worksheet: every table worked from the printed tables before it, token by token -----------------------


def _l2_tables(self: StageSpec, chain: PrintedChain, head: int | None) -> list[Table]:
    assert head is not None
    sc, h = chain.sc, head
    qn, kn, _, _ = scored_names(sc.rope is not None, sc.qk_norm is not None)
    Q, K = chain.values(f"{qn}.{h}"), chain.values(f"{kn}.{h}")
    d_k = sc.heads[h].d_k
    q = chain.rounded(Q / np.sqrt((Q * Q).sum(axis=1) + L2_EPS)[:, None] / math.sqrt(d_k))  # (n, d_k)
    k = chain.rounded(K / np.sqrt((K * K).sum(axis=1) + L2_EPS)[:, None])  # (n, d_k)
    return [Table(f"dn_q.{h}", "q", "q = Q / √(ΣQ² + 1e-6) / √dₖ", "l2norm", h, q, sc.labels, idx(d_k), False, True),
            Table(f"dn_k.{h}", "k", "k = K / √(ΣK² + 1e-6)", "l2norm", h, k, sc.labels, idx(d_k), False, True)]


def _l2_line(self: StageSpec, cells: PrintedCells, table: Table, row: int, col: int, answer: str) -> str:
    h = table.head
    assert h is not None
    sc = cells.sc
    qn, kn, qs, ks = scored_names(sc.rope is not None, sc.qk_norm is not None)
    src, name = (f"{qn}.{h}", qs) if table.name == "q" else (f"{kn}.{h}", ks)
    t = sc.labels[row]
    width = cells.tables[src].values.shape[1]
    squares = " + ".join(f"{cells.txt(src, row, c)}·{cells.txt(src, row, c)}" for c in range(width))
    x = cells.txt(src, row, col)
    if table.name == "q":
        return (f"q[{t},{col}] = {name}[{t},{col}] / √(Σ {name}[{t}]² + 1e-6) / √{width}"
                f" = {x} / √({squares} + 0.000001) / √{width} = {answer}")
    return f"k[{t},{col}] = {name}[{t},{col}] / √(Σ {name}[{t}]² + 1e-6) = {x} / √({squares} + 0.000001) = {answer}"


def _gate_tables(self: StageSpec, chain: PrintedChain, head: int | None) -> list[Table]:
    """g and β: given (an input of the page) or computed by the Gates stage (printed, not asked: softplus needs ln)."""
    assert head is not None
    sc, h = chain.sc, head
    dn = chain.comp.heads[h].deltanet
    assert dn is not None and sc.deltanet is not None
    given = sc.deltanet.g is not None and sc.deltanet.beta is not None
    values = np.stack([dn.g, dn.beta], axis=1) if given else chain.rounded(np.stack([dn.g, dn.beta], axis=1))
    return [Table(f"dn_g.{h}", "g|β", "g (log decay) and β (write strength) per token", "gates" if not given else "delta",
                  h, values, sc.labels, ("g", "β"), given, False)]


def _delta_tables(self: StageSpec, chain: PrintedChain, head: int | None) -> list[Table]:
    assert head is not None
    sc, h = chain.sc, head
    hr = sc.heads[h]
    out: list[Table] = []
    if sc.deltanet is not None and sc.deltanet.g is not None and sc.deltanet.beta is not None:
        out += _gate_tables(self, chain, head)
        chain.add(out)  # an input: printed with the others, read below
        out = []
    gb = chain.values(f"dn_g.{h}") if f"dn_g.{h}" in chain.printed else next(
        t.values for t in chain.tables if t.key == f"dn_g.{h}")
    q, k, V = chain.values(f"dn_q.{h}"), chain.values(f"dn_k.{h}"), chain.values(f"V.{h}")
    ks, vs = idx(hr.d_k), idx(hr.d_v)
    S = np.zeros((hr.d_k, hr.d_v))
    outputs = []
    for t, token in enumerate(sc.labels):
        g, beta = float(gb[t, 0]), float(gb[t, 1])
        if t:
            S = chain.rounded(S * math.exp(g))  # (d_k, d_v) from the printed state
            out.append(Table(f"dn_decayed.{h}.{t}", f"S'_{token}", f"{token}: S' = S_{sc.labels[t - 1]}·e^g", "delta", h,
                             S, ks, vs, False, True))
            kv = chain.rounded(k[t] @ S)  # (d_v,)
            out.append(Table(f"dn_kv.{h}.{t}", "kv", f"{token}: kv = S'ᵀk", "delta", h, kv[None, :], (token,),
                             vs, False, True))
        else:
            kv = np.zeros(hr.d_v)
        delta = chain.rounded((V[t] - kv) * beta)  # (d_v,)
        out.append(Table(f"dn_delta.{h}.{t}", "δ", f"{token}: δ = (v − kv)·β", "delta", h, delta[None, :],
                         (token,), vs, False, True))
        S = chain.rounded(S + np.outer(k[t], delta))  # (d_k, d_v)
        out.append(Table(f"dn_S.{h}.{t}", f"S_{token}", f"{token}: S = S' + kδᵀ", "delta", h, S, ks, vs, False, True))
        o = chain.rounded(q[t] @ S)  # (d_v,)
        outputs.append(o)
        out.append(Table(f"dn_o.{h}.{t}", "o", f"{token}: o = Sᵀq", "delta", h, o[None, :], (token,), vs,
                         False, True))
    return [*out, Table(f"output.{h}", "output", "output: the rows o, token by token", "delta", h, np.stack(outputs),
                        sc.labels, vs, False, False)]


def _delta_line(self: StageSpec, cells: PrintedCells, table: Table, row: int, col: int, answer: str) -> str:
    h = table.head
    assert h is not None
    sc = cells.sc
    kind, _, rest = table.key.partition(".")
    t = int(rest.split(".")[1])
    token = sc.labels[t]
    gb = f"dn_g.{h}"
    if kind == "dn_decayed":
        before = sc.labels[t - 1]
        return (f"S'_{token}[{row},{col}] = S_{before}[{row},{col}]·e^g[{token}]"
                f" = {cells.txt(f'dn_S.{h}.{t - 1}', row, col)}·e^{cells.txt(gb, t, 0)} = {answer}")
    if kind == "dn_kv":
        terms = " + ".join(f"{cells.txt(f'dn_decayed.{h}.{t}', i, col)}·{cells.txt(f'dn_k.{h}', t, i)}"
                           for i in range(sc.heads[h].d_k))
        return f"kv[{token},{col}] = S'_{token}[:,{col}]·k[{token}] = {terms} = {answer}"
    if kind == "dn_delta":
        v, b = cells.txt(f"V.{h}", t, col), cells.txt(gb, t, 1)
        if not t:
            return f"δ[{token},{col}] = V[{token},{col}]·β[{token}] (the state starts empty) = {v}·{b} = {answer}"
        return (f"δ[{token},{col}] = (V[{token},{col}] − kv[{token},{col}])·β[{token}]"
                f" = ({v} − {cells.txt(f'dn_kv.{h}.{t}', 0, col)})·{b} = {answer}")
    if kind == "dn_S":
        product = f"{cells.txt(f'dn_k.{h}', t, row)}·{cells.txt(f'dn_delta.{h}.{t}', 0, col)}"
        if not t:
            return f"S_{token}[{row},{col}] = k[{token},{row}]·δ[{token},{col}] = {product} = {answer}"
        return (f"S_{token}[{row},{col}] = S'_{token}[{row},{col}] + k[{token},{row}]·δ[{token},{col}]"
                f" = {cells.txt(f'dn_decayed.{h}.{t}', row, col)} + {product} = {answer}")
    terms = " + ".join(f"{cells.txt(f'dn_S.{h}.{t}', i, col)}·{cells.txt(f'dn_q.{h}', t, i)}"
                       for i in range(sc.heads[h].d_k))
    return f"o[{token},{col}] = S_{token}[:,{col}]·q[{token}] = {terms} = {answer}"


def _rules(self: StageSpec, comp: Computation) -> list[str]:
    if getattr(comp.scenario, "deltanet", None) is None:
        return []
    return ["- The gated delta rule (no softmax, no scores): q and k are divided by their length √(Σx² + 1e-6), q also"
            " by √dₖ; then token after token, from the printed state: S' = S·e^g, kv = S'ᵀk (kv[j] = Σ_i S'[i,j]·k[i]),"
            " δ = (v − kv)·β, S = S' + kδᵀ (S[i,j] = S'[i,j] + k[i]·δ[j]), o = Sᵀq. The state starts at 0."]


class Normalise(StageSpec):
    stage = Stage("l2norm", "Normalise",
                  "The delta rule reads unit vectors: each Query and Key row is divided by its length,"
                  " √(Σx² + 1e-6), and each Query also by √dₖ, so a write k·δᵀ and a read Sᵀq never grow with"
                  " the size of the projections.")
    per_head = True
    matrices = ("dn_q", "dn_k")

    def runs(self, trace: TraceContext) -> bool:
        return _on(trace)

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        hr = _hr(trace, head)
        n = trace.comp.scenario.n
        return [Plan("dn_q", n, hr.d_k), Plan("dn_k", n, hr.d_k)]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert col is not None
        hr = _hr(trace, h)
        dn = hr.deltanet
        assert dn is not None
        qn, kn, qs, ks = _read(trace, hr)
        t = trace.comp.scenario.labels[row]
        is_q = seg.target == "dn_q"
        raw = _raw(hr, is_q)
        sq, root = (dn.sq_q, dn.root_q) if is_q else (dn.sq_k, dn.root_k)
        name, out = (qs, "q") if is_q else (ks, "k")
        value = float((dn.q if is_q else dn.k)[row, col])
        length = f"√(Σ {name}[{t}]² + 1e-6)"
        if is_q:
            (x, r, dv), res = fit(lambda a, b, c: a / b / c if b else math.inf,  # a root shown as 0: more digits
                                  [float(raw[row, col]), float(root[row]), dn.divisor], value, d)
            text = f"{out}[{t},{col}] = {name}[{t},{col}] / {length} / √{hr.d_k} = {x} / {r} / {dv} = {res}"
        else:
            (x, r), res = fit(lambda a, b: a / b if b else math.inf, [float(raw[row, col]), float(root[row])], value, d)
            text = f"{out}[{t},{col}] = {name}[{t},{col}] / {length} = {x} / {r} = {res}"
        details: tuple[str, ...] = ()
        if col == 0:
            sums = dot_line(raw[row], raw[row], False, False, fmt(float(sq[row]), False, d), d, trace.hand)
            (s,), rt = fit(lambda a: math.sqrt(a + 1e-6), [float(sq[row])], float(root[row]), d)
            details = (f"Σ {name}[{t}]² = {sums}", f"{length} = √({s} + 0.000001) = {rt}")
        return Operation(index, seg, row, col, value, (Ref(qn if is_q else kn, h, row),), text, details)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        dn = _hr(trace, head).deltanet
        if dn is None:
            raise KeyError(name)
        return dn.q if name == "dn_q" else dn.k

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        qn, kn, _, _ = _read(trace, _hr(trace, op.head))
        return [(qn if op.segment.target == "dn_q" else kn, op.head), (op.segment.target, op.head)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("dn_q", head), ("dn_k", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        return "q = Q/‖Q‖/√dₖ" if name == "dn_q" else "k = K/‖K‖"

    def formula(self, trace: TraceContext, op: Operation) -> list[FormulaPart]:
        return [FormulaPart(Q_SLOT, "q"), FormulaPart(QK_DOT, "·"), FormulaPart(K_SLOT, "kᵀ")]

    def lights(self, seg: Segment) -> frozenset[int]:
        return frozenset({Q_SLOT} if seg.target == "dn_q" else {K_SLOT})

    worksheet_tables = _l2_tables
    worksheet_line = _l2_line
    worksheet_rules = _rules


class Gates(StageSpec):
    stage = Stage("gates", "Gates",
                  "How much the state forgets and how strongly it writes, per token, as Qwen3-Next computes them:"
                  " g = −e^A_log·softplus(X̂·W_a + dt_bias) (a log decay, never above 0) and β = σ(X̂·W_b).")
    per_head = True
    matrices = ("dn_g",)

    def runs(self, trace: TraceContext) -> bool:
        dn = getattr(trace.comp.scenario, "deltanet", None)
        return dn is not None and (dn.g is None or dn.beta is None)

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        return [Plan("dn_g", trace.comp.scenario.n, 2)]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        hr, sc = _hr(trace, h), trace.comp.scenario
        cfg, dn = sc.deltanet, hr.deltanet
        assert cfg is not None and dn is not None
        t = sc.labels[row]
        X = trace.comp.X_in
        x_name = "X" if trace.comp.norm is None else "X̂"
        if col == 0:
            value = float(dn.g[row])
            if cfg.g is not None:
                return Operation(index, seg, row, col, value, (), f"g[{t}] = {fmt(value, False, d)} (given)")
            assert cfg.W_a is not None and cfg.A_log is not None and cfg.dt_bias is not None
            a = float(X[row] @ cfg.W_a[:, h] + cfg.dt_bias[h])
            rate = -math.exp(float(cfg.A_log[h]))
            soft = float(np.logaddexp(0.0, a))
            (r, s), res = fit(lambda x, y: x * y, [rate, soft], value, d)
            text = (f"g[{t}] = -e^A_log·softplus({x_name}[{t}]·W_a[:,{h}] + dt_bias) = {r}·softplus({fmt(a, False, d)})"
                    f" = {r}·{s} = {res}")
            (al,), rt = fit(math.exp, [float(cfg.A_log[h])], -rate, d)
            details = (f"e^A_log = e^{al} = {rt}", f"softplus(a) = ln(1 + e^a), a = {x_name}[{t}]·W_a[:,{h}] + dt_bias"
                       f" = {fmt(a, False, d)}")
            return Operation(index, seg, row, col, value, (Ref(x_name.replace("X̂", "X_norm"), None, row),), text, details)
        value = float(dn.beta[row])
        if cfg.beta is not None or cfg.W_b is None:
            return Operation(index, seg, row, col, value, (), f"β[{t}] = {fmt(value, False, d)} (given)")
        b = float(X[row] @ cfg.W_b[:, h])
        (bt,), res = fit(lambda x: 1 / (1 + math.exp(-x)), [b], value, d)
        text = f"β[{t}] = σ({x_name}[{t}]·W_b[:,{h}]) = 1 / (1 + e^(-{bt})) = {res}" if not bt.startswith("(") else \
            f"β[{t}] = σ({x_name}[{t}]·W_b[:,{h}]) = 1 / (1 + e^{bt[1:-1].replace('-', '', 1)}) = {res}"
        return Operation(index, seg, row, col, value, (Ref(x_name.replace("X̂", "X_norm"), None, row),), text)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        dn = _hr(trace, head).deltanet
        if dn is None:
            raise KeyError(name)
        both = np.stack([dn.g, dn.beta], axis=1)  # (n, 2)
        both.setflags(write=False)
        return both

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        return "[g | β] per token"

    worksheet_tables = _gate_tables


class Delta(StageSpec):
    stage = Stage("delta", "Delta",
                  "Token after token the state S (dₖ × d_v) decays by e^g, recalls kv = Sᵀk for the new key,"
                  " stores only the correction δ = (v − kv)·β as S + kδᵀ, and is read by the query: o = Sᵀq.")
    per_head = True
    matrices = ("dn_step", *BLOCKS, "dn_D")
    styles = MappingProxyType({"dn_D": PaneStyle(heat=True, masked=True)})

    def runs(self, trace: TraceContext) -> bool:
        return _on(trace)

    def meaning(self, trace: TraceContext, head: int | None) -> str:
        return (self.stage.meaning + " Unrolled, o_t = Σ_s (q_t·k_s)·e^(G_t − G_s)·δ_s: attention over the"
                " corrections with a causal mask that fades by e^g per token (the last line shows it).")

    def widths(self, hr: HeadResult) -> list[int]:
        P = hr.d_k * hr.d_v
        return [P, hr.d_v, hr.d_v, P, hr.d_v]

    def block(self, hr: HeadResult, col: int) -> tuple[str, int, int]:
        """(the block a column of a token's row is in, where the block starts, the column within it)."""
        lo = 0
        for name, w in zip(BLOCKS, self.widths(hr)):
            if col < lo + w:
                return name, lo, col - lo
            lo += w
        raise IndexError(col)

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        hr = _hr(trace, head)
        return [Plan("dn_step", trace.comp.scenario.n, sum(self.widths(hr)))]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        hr, sc = _hr(trace, h), trace.comp.scenario
        dn = hr.deltanet
        assert dn is not None
        t = sc.labels[row]
        prev = f"S_{sc.labels[row - 1]}" if row else "S"
        name, _, c = self.block(hr, col)
        hand = trace.hand
        details: tuple[str, ...] = ()
        if name in ("dn_decayed", "dn_S"):
            i, j = divmod(c, hr.d_v)
            if name == "dn_decayed":
                value = float(dn.decayed[row, i, j])
                if row == 0:
                    text = f"S'_{t}[{i},{j}] = 0 (the state starts empty)"
                    refs: tuple[Ref, ...] = ()
                else:
                    (a, b), res = fit(lambda x, y: x * y, [float(dn.S[row - 1, i, j]), float(dn.decay[row])], value, d)
                    text = f"S'_{t}[{i},{j}] = {prev}[{i},{j}]·e^g[{t}] = {a}·{b} = {res}"
                    refs = (Ref("dn_S", h, row - 1, c),)
                if c == 0:
                    (gt,), et = fit(math.exp, [float(dn.g[row])], float(dn.decay[row]), d)
                    details = (f"e^g[{t}] = e^{gt} = {et}",)
                return Operation(index, seg, row, col, value, (*refs, Ref("dn_decayed", h, row, c)), text, details)
            value = float(dn.S[row, i, j])
            (a, b, e), res = fit(lambda x, y, z: x + y * z, [float(dn.decayed[row, i, j]), float(dn.k[row, i]),
                                                           float(dn.delta[row, j])], value, d)
            text = f"S_{t}[{i},{j}] = S'_{t}[{i},{j}] + k[{t},{i}]·δ_{t}[{j}] = {a} + {b}·{e} = {res}"
            return Operation(index, seg, row, col, value, (Ref("dn_decayed", h, row, c), Ref("dn_k", h, row, i),
                                                           Ref("dn_delta", h, row, j), Ref("dn_S", h, row, c)), text)
        if name == "dn_kv":
            value = float(dn.kv[row, c])
            work = dot_line(dn.decayed[row][:, c], dn.k[row], False, False, fmt(value, False, d), d, hand)
            text = f"kv_{t}[{c}] = S'_{t}[:,{c}]·k[{t}] = {work}"
            return Operation(index, seg, row, col, value, (Ref("dn_k", h, row), Ref("dn_kv", h, row, c)), text)
        if name == "dn_delta":
            value = float(dn.delta[row, c])
            vn = "V" if _conv(hr) is None else "dn_cv"  # the convolved values where there is a convolution
            (v, kv, b), res = fit(lambda x, y, z: (x - y) * z, [float(_values(hr)[row, c]), float(dn.kv[row, c]),
                                                              float(dn.beta[row])], value, d)
            text = f"δ_{t}[{c}] = ({vn.replace('dn_cv', 'Vc')}[{t},{c}] − kv_{t}[{c}])·β[{t}] = ({v} − {kv})·{b} = {res}"
            return Operation(index, seg, row, col, value, (Ref(vn, h, row, c), Ref("dn_kv", h, row, c),
                                                           Ref("dn_delta", h, row, c)), text)
        value = float(dn.output[row, c])
        work = dot_line(dn.S[row][:, c], dn.q[row], False, False, fmt(value, False, d), d, hand)
        text = f"o[{t},{c}] = S_{t}[:,{c}]·q[{t}] = {work}"
        if row == sc.n - 1 and c == hr.d_v - 1:
            details = mask_lines(trace, hr, d)
        return Operation(index, seg, row, col, value, (Ref("dn_q", h, row), Ref("dn_o", h, row, c)), text, details)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        hr = _hr(trace, head)
        dn = hr.deltanet
        if dn is None:
            raise KeyError(name)
        n = len(dn.g)
        parts = {"dn_decayed": dn.decayed.reshape(n, -1), "dn_kv": dn.kv, "dn_delta": dn.delta,
                 "dn_S": dn.S.reshape(n, -1), "dn_o": dn.output}
        if name == "dn_D":
            out = decay_mask(dn.g)  # (n, n)
        elif name == "dn_step":
            out = np.concatenate([parts[b] for b in BLOCKS], axis=1)  # (n, 2·d_k·d_v + 3·d_v)
        else:
            out = np.ascontiguousarray(parts[name])
        out.setflags(write=False)
        return out

    def filled(self, trace: TraceContext, name: str, head: int | None, index: int) -> int:
        if name not in BLOCKS:
            return trace.filled(name, head, index)
        hr = _hr(trace, head)
        done = trace.filled("dn_step", head, index)
        width = sum(self.widths(hr))
        rows, rest = divmod(min(done, trace.comp.scenario.n * width), width)
        lo = 0
        for block, w in zip(BLOCKS, self.widths(hr)):
            if block == name:
                return rows * w + min(max(rest - lo, 0), w)
            lo += w
        raise KeyError(name)

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        h = op.head
        assert op.col is not None
        name, _, _ = self.block(_hr(trace, h), op.col)
        return {"dn_decayed": [("dn_S", h), ("dn_decayed", h)],
                "dn_kv": [("dn_decayed", h), ("dn_k", h), ("dn_kv", h)],
                "dn_delta": [("V" if _conv(_hr(trace, h)) is None else "dn_cv", h), ("dn_kv", h), ("dn_delta", h)],
                "dn_S": [("dn_k", h), ("dn_delta", h), ("dn_S", h)],
                "dn_o": [("dn_S", h), ("dn_q", h), ("dn_o", h)]}[name]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("dn_S", head), ("dn_o", head), ("dn_D", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        return {"dn_decayed": "S' = S·e^g", "dn_kv": "kv = S'ᵀk", "dn_delta": "δ = (v − kv)·β",
                "dn_S": "S = S' + kδᵀ", "dn_o": "o = Sᵀq", "dn_D": "decaying mask e^(G_t − G_s)",
                "dn_step": "a token's steps"}[name]

    def formula(self, trace: TraceContext, op: Operation) -> list[FormulaPart]:
        return [FormulaPart(V_DOT, " → S → "), FormulaPart(V_SLOT, "o")]

    def lights(self, seg: Segment) -> frozenset[int]:
        return frozenset({V_DOT, V_SLOT})

    worksheet_tables = _delta_tables
    worksheet_line = _delta_line

    def markdown(self, page: MarkdownPage, head: int | None) -> list[str]:
        out: list[str] = []
        for name in (*BLOCKS, "dn_D"):
            out += [page.table(name, head), ""]
        return out + page.worked(self.stage.key, head)


def mask_lines(trace: TraceContext, hr: HeadResult, d: int) -> tuple[str, ...]:
    """After the last token: the decaying causal mask the state amounts to, and that it gives the same outputs."""
    dn = hr.deltanet
    assert dn is not None
    sc = trace.comp.scenario
    D = decay_mask(dn.g)  # (n, n)
    rows = " | ".join(f"{sc.labels[t]}: {vector(D[t], False, d)}" for t in range(min(sc.n, 8)))
    unrolled = ((dn.q @ dn.k.T) * D) @ dn.delta  # (n, d_v)
    same = bool(np.allclose(unrolled, dn.output, rtol=1e-6, atol=1e-9))
    return (f"the state is attention with a decaying causal mask, e^(G_t − G_s) for s ≤ t (G the running sum of g),"
            f" 0 after t: {rows}{' | …' if sc.n > 8 else ''}",
            f"{'✓' if same else '≈'} o_t = Σ_s (q_t·k_s)·e^(G_t − G_s)·δ_s gives the outputs the state gave"
            f" (the causal mask is this triangle with every decay at e^0)")


NORMALISE = Normalise()
GATES = Gates()
DELTA = Delta()
