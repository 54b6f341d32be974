"""The gated delta rule's stages (Qwen3-Next, Qwen3.5; Yang et al. 2024), in place of Score … Mix under ``[deltanet]``:

- Normalise: q = Q / √(ΣQ² + 1e-6) / √d_k and k = K / √(ΣK² + 1e-6), cell by cell;
- Gates (where g and β come from the weights): g = −e^{A_log}·softplus(X̂·W_a + dt_bias), β = σ(X̂·W_b);
- Delta: token after token, every cell a step: the decay S·e^g, the recall kv = Sᵀk, the correction
  δ = (v − kv)·β, the rank-one write S + kδᵀ and the read o = Sᵀq. Its last line is the decaying causal
  mask the state amounts to.

With a gate per key channel (Kimi Delta Attention, core/kda_part.py) g carries one more index: g[t,i], one log
decay per row i of the state, computed in Gates from Kimi Linear's W_fa, W_fb, A_log and dt_bias where not given,
and the decay is diag(e^g)·S, row i times its own e^g[t,i].

The Delta stage is one segment of n rows (one per token) whose columns are the five steps' cells side by
side, so the trace walks token by token; its panes show each block as a matrix of its own (:meth:`Delta.filled`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from types import MappingProxyType
from typing import TYPE_CHECKING

import numpy as np

from qkv_tui.core.engine import Computation, HeadResult
from qkv_tui.core.fmt import fmt, vector
from qkv_tui.core.kda_part import Channels
from qkv_tui.core.scenario import Matrix
from qkv_tui.kernels.attention_backward import row_dots
from qkv_tui.kernels.deltanet import L2_EPS, DeltaForward, decay_mask
from qkv_tui.kernels.deltanet_parts import Around, Convolved
from qkv_tui.kernels.kda import channel_mask, channel_weights
from qkv_tui.kernels.policy import EXACT, ByHand
from qkv_tui.teach.arith import dot_line, fit, shown
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
    counts,
)
from qkv_tui.teach.stages.context import TraceContext
from qkv_tui.teach.stages.grads import BackwardSpec, dot_cell, formula_cell, grads, has_backward, kept, sum_cell
from qkv_tui.teach.stages.markdown import MarkdownPage
from qkv_tui.teach.stages.printed import PrintedCells, PrintedChain, Table, idx
from qkv_tui.teach.stages.score import scored, scored_names

if TYPE_CHECKING:  # the cost view's module loads on its first use
    from qkv_tui.core.cell_edit import InputCell
    from qkv_tui.core.cost import Count, Phase
    from qkv_tui.core.gradients import Gradients, HeadGrad
    from qkv_tui.core.scenario import Scenario
    from qkv_tui.core.variants.deltanet import DeltaNet
    from qkv_tui.kernels.deltanet_backward import DeltaBack, GatesBack


def _back(hg: HeadGrad) -> DeltaBack | None:
    """The head's [deltanet] read backwards (core/grad_faces/deltanet.py)."""
    from qkv_tui.kernels.deltanet_backward import DeltaBack  # with the head's gradients

    return hg.part(DeltaBack)


def _gates(g: Gradients) -> GatesBack | None:
    """g's and β's weights read backwards, where the table computes them from X̂."""
    from qkv_tui.kernels.deltanet_backward import GatesBack

    return g.part(GatesBack)


BLOCKS = ("dn_decayed", "dn_kv", "dn_delta", "dn_S", "dn_o")  # the Delta stage's steps, in a token's order


def _on(trace: TraceContext) -> bool:
    return getattr(trace.comp.scenario, "deltanet", None) is not None


def _read_by(trace: TraceContext, op: Operation, beta: bool) -> InputCell | None:
    """The input an edit opens on at an operation of g (or β, or a step that reads it): the number as the
    file gives it or the weights that compute it (core/variants/deltanet_edit.py)."""
    dn = getattr(trace.comp.scenario, "deltanet", None)
    if dn is None or op.head is None:
        return None
    from qkv_tui.core.cell_edit import InputCell
    from qkv_tui.core.variants import deltanet_edit

    target, row, col = deltanet_edit.read_by(dn, beta, op.row, op.head)
    return InputCell(target, None, row, col)


def _hr(trace: TraceContext, head: int | None) -> HeadResult:
    assert head is not None
    return trace.comp.heads[head]


def _block_filled(trace: TraceContext, blocks: tuple[str, ...], step: str, widths: Callable[[HeadResult], list[int]],
                 name: str, head: int | None, index: int) -> int:
    """How many cells of one block are filled at ``index``: the trace fills the step matrix ``step`` (the
    blocks side by side, a row per token) row after row, so a block holds every finished row's share and
    what the current row has reached of it. A name not in ``blocks`` is the trace's own matrix."""
    if name not in blocks:
        return trace.filled(name, head, index)
    done = trace.filled(step, head, index)
    ws = widths(_hr(trace, head))
    width = sum(ws)
    rows, rest = divmod(min(done, trace.comp.scenario.n * width), width)
    lo = 0
    for block, w in zip(blocks, ws):
        if block == name:
            return rows * w + min(max(rest - lo, 0), w)
        lo += w
    raise KeyError(name)


def _channels(hr: HeadResult) -> Channels | None:
    """The head's gate per key channel (Kimi Delta Attention); None where g is one number a token."""
    return hr.part(Channels)


def _g_given(cfg: DeltaNet) -> bool:
    return cfg.g is not None or (cfg.channels is not None and cfg.channels.g is not None)


def _kda_meaning(hr: HeadResult) -> str:
    """What a gate per key channel changes, and whether this scenario is Gated DeltaNet after all."""
    ch = _channels(hr)
    if ch is None:
        return ""
    case = (" Here every channel's g is equal at every token: this is Gated DeltaNet's rule (one gate a head), number"
            " for number." if ch.uniform else " Gated DeltaNet is the case where every channel's g is equal; here they"
            " differ, so the rows of S fade at different rates.")
    return (" Kimi Delta Attention (Kimi Linear) gives each key channel i its own forget gate: the decay is"
            " diag(e^g)·S, row i of the state times e^g[t,i], so a channel can keep what it holds while another"
            " forgets." + case)


def _conv(hr: HeadResult) -> tuple[Convolved, Convolved, Convolved] | None:
    return None if hr.part(Around) is None else hr.need(Around).conv


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
    qn, kn, _, _ = scored_names(chain.comp.heads[h])
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
    qn, kn, qs, ks = scored_names(cells.comp.heads[h])
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
    dn = chain.comp.heads[h].part(DeltaForward)
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
                  " √(Σx² + 1e-6), and each Query also by √dₖ (the softmax's scale). Unit keys make the write an"
                  " exact overwrite: with ‖k‖ = 1 (to within the 1e-6), S + kδᵀ with δ = (v − Sᵀk)·β leaves"
                  " Sᵀk = (1 − β)·(what S held at k) + β·v. As a map of the state the write is"
                  " S ← (I − βkkᵀ)S + βkvᵀ, and I − βkkᵀ has eigenvalues 1 (across k) and 1 − β (along k), so with"
                  " β between 0 and 1 no write amplifies what the state held.")
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
        dn = hr.part(DeltaForward)
        assert dn is not None
        qn, kn, qs, ks = _read(trace, hr)
        t = trace.comp.scenario.labels[row]
        is_q = seg.target == "dn_q"
        raw = _raw(hr, is_q)
        sq, root = (dn.sq_q, dn.root_q) if is_q else (dn.sq_k, dn.root_k)
        name, out = (qs, "q") if is_q else (ks, "k")
        value = float((dn.q if is_q else dn.k)[row, col])
        length = f"√(Σ {name}[{t}]² + 1e-6)"
        if is_q and trace.hand is not None:
            # by hand √dₖ is written down at the hand's places (√2 = 1.41): shown so, never 1.410 beside guard digits
            dv = fmt(dn.divisor, False, trace.hand)
            (x, r), res = fit(lambda a, b: a / b / shown(dv) if b else math.inf,  # a root shown as 0: more digits
                              [float(raw[row, col]), float(root[row])], value, d)
            text = f"{out}[{t},{col}] = {name}[{t},{col}] / {length} / √{hr.d_k} = {x} / {r} / {dv} = {res}"
        elif is_q:
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
        dn = _hr(trace, head).part(DeltaForward)
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

    def markdown(self, page: MarkdownPage, head: int | None) -> list[str]:
        return [page.table("dn_q", head, "q"), "", page.table("dn_k", head, "k"), "",
                *page.worked(self.stage.key, head)]

    def formula(self, trace: TraceContext, op: Operation) -> list[FormulaPart]:
        return [FormulaPart(Q_SLOT, "q"), FormulaPart(QK_DOT, "·"), FormulaPart(K_SLOT, "kᵀ")]

    def lights(self, seg: Segment) -> frozenset[int]:
        return frozenset({Q_SLOT} if seg.target == "dn_q" else {K_SLOT})

    worksheet_tables = _l2_tables
    worksheet_line = _l2_line
    worksheet_rules = _rules


def _x_named(trace: TraceContext, text: str) -> str:
    """The gates read X̂ only after a [norm]; without one they read X itself, as their lines write it."""
    return text if trace.comp.norm is not None else text.replace("X̂", "X")


def _g_width(hr: HeadResult) -> int:
    """Columns of g a token has: one, or one per key channel."""
    return 1 if _channels(hr) is None else hr.d_k


def _channel_gate(trace: TraceContext, index: int, seg: Segment, row: int, col: int, d: int) -> Operation:
    """g[t,i] of a head with a gate per key channel: given, or −e^A_log·softplus(a[t,i]) as Kimi Linear computes it."""
    h = seg.head
    assert h is not None
    hr, sc = _hr(trace, h), trace.comp.scenario
    dn, ch = hr.need(DeltaForward), hr.need(Channels)
    t, value = sc.labels[row], float(dn.g[row, col])
    if ch.gates is None:
        return Operation(index, seg, row, col, value, (), f"g[{t},{col}] = {fmt(value, False, d)} (given)")
    gates = ch.gates
    cfg = sc.deltanet
    assert cfg is not None and cfg.channels is not None and cfg.channels.W_fb is not None
    assert cfg.channels.dt_bias is not None and cfg.channels.A_log is not None
    x_name = "X" if trace.comp.norm is None else "X̂"
    c = h * hr.d_k + col  # the column of W_fb this channel reads
    rate, a, soft = float(gates.rate[h]), float(gates.a[row, h, col]), float(gates.softplus[row, h, col])
    (r, s), res = fit(lambda x, y: -x * y, [rate, soft], value, d)
    text = f"g[{t},{col}] = −e^A_log·softplus(a[{t},{col}]) = −{r}·softplus({fmt(a, False, d)}) = −{r}·{s} = {res}"
    low, W_fb, bias = gates.low[row], cfg.channels.W_fb[:, c], float(cfg.channels.dt_bias[h][col])
    r_low = len(low)
    texts, at = fit(lambda *xs: sum(xs[2 * j] * xs[2 * j + 1] for j in range(r_low)) + xs[-1],
                    [y for j in range(r_low) for y in (float(low[j]), float(W_fb[j]))] + [bias], a, d)
    terms = " + ".join(f"{texts[2 * j]}·{texts[2 * j + 1]}" for j in range(r_low))
    (al,), rt = fit(math.exp, [float(cfg.channels.A_log[h])], rate, d)
    (sa,), st = fit(lambda x: float(np.logaddexp(0.0, x)), [a], soft, d)
    a_line = f"a[{t},{col}] = ({x_name}[{t}]·W_fa)·W_fb[:,{c}] + dt_bias[{col}] = {terms} + {texts[-1]} = {at}"
    details: tuple[str, ...] = (a_line,
                                f"softplus(a) = ln(1 + e^a) = ln(1 + e^{sa}) = {st}" if a <= 20 else
                                f"softplus(a) = a past 20, as Kimi Linear takes it = {st}",
                                f"e^A_log = e^{al} = {rt}")
    if col == 0:
        lows = vector(gates.low[row], False, d)
        details = (f"{x_name}[{t}]·W_fa = {lows} (the low-rank bottleneck, shared by every head and channel)", *details)
    return Operation(index, seg, row, col, value, (Ref(x_name.replace("X̂", "X_norm"), None, row),), text, details)


class Gates(StageSpec):
    stage = Stage("gates", "Gates",
                  "How much the state forgets and how strongly it writes, per token, as Qwen3-Next computes them:"
                  " g = −e^A_log·softplus(X̂·W_a + dt_bias) (a log decay, never above 0) and β = σ(X̂·W_b).")
    per_head = True
    matrices = ("dn_g",)

    def runs(self, trace: TraceContext) -> bool:
        dn = getattr(trace.comp.scenario, "deltanet", None)
        return dn is not None and (not _g_given(dn) or dn.beta is None)

    def meaning(self, trace: TraceContext, head: int | None) -> str:
        if head is None or _channels(_hr(trace, head)) is None:
            return _x_named(trace, self.stage.meaning)
        cfg = trace.comp.scenario.deltanet
        assert cfg is not None and cfg.channels is not None
        g = ("g[t,i] is given for each key channel (a log decay, never above 0)" if cfg.channels.g is not None else
             "g[t,i] = −e^A_log·softplus(a[t,i]) with a = (X̂·W_fa)·W_fb + dt_bias (a low-rank projection, as Kimi"
             " Linear computes it: one log decay per key channel, never above 0)")
        beta = "β is given" if cfg.beta is not None else "β = σ(X̂·W_b), one per head"
        return _x_named(trace, f"How much each key channel of the state forgets and how strongly the head writes, per"
                        f" token: {g}; {beta}." + _kda_meaning(_hr(trace, head)))

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        return [Plan("dn_g", trace.comp.scenario.n, _g_width(_hr(trace, head)) + 1)]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        hr, sc = _hr(trace, h), trace.comp.scenario
        cfg, dn = sc.deltanet, hr.part(DeltaForward)
        assert cfg is not None and dn is not None
        t = sc.labels[row]
        X = trace.comp.X_in
        x_name = "X" if trace.comp.norm is None else "X̂"
        width = _g_width(hr)
        if _channels(hr) is not None and col < width:
            return _channel_gate(trace, index, seg, row, col, d)
        if col < width:
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
        dn = _hr(trace, head).part(DeltaForward)
        if dn is None:
            raise KeyError(name)
        both = np.column_stack([dn.g.reshape(len(dn.beta), -1), dn.beta])  # (n, 2), or (n, d_k + 1) per channel
        both.setflags(write=False)
        return both

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        if head is not None and _channels(_hr(trace, head)) is not None:
            return "[g per key channel | β] per token"
        return "[g | β] per token"

    def col_label(self, trace: TraceContext, name: str, col: int) -> str | None:
        """g's columns (one, or one per key channel, by its index), then β's, where every head is as wide."""
        widths = {_g_width(hr) for hr in trace.comp.heads}
        if len(widths) != 1:
            return None
        width = widths.pop()
        if col == width:
            return "β"
        return "g" if _channels(trace.comp.heads[0]) is None else None

    def markdown(self, page: MarkdownPage, head: int | None) -> list[str]:
        return [page.table("dn_g", head, "g, β"), "", *page.worked(self.stage.key, head)]

    def edit_cell(self, trace: TraceContext, op: Operation) -> InputCell | None:
        if op.head is None:
            return None
        # a token's row is g (one column, or one per key channel), then β
        return _read_by(trace, op, beta=op.col == _g_width(_hr(trace, op.head)))

    worksheet_tables = _gate_tables


class Delta(StageSpec):
    stage = Stage("delta", "Delta",
                  "Token after token the state S (dₖ × d_v) decays by e^g, recalls kv = Sᵀk for the new key,"
                  " stores only the correction δ = (v − kv)·β as S + kδᵀ, and is read by the query: o = Sᵀq.")
    per_head = True
    matrices = ("dn_step", *BLOCKS, "dn_D")
    styles = MappingProxyType({"dn_D": PaneStyle(heat=True, masked=True)})
    key_columns = ("dn_D",)  # the unrolled map: a column per key token, as the softmax's weights

    def runs(self, trace: TraceContext) -> bool:
        return _on(trace)

    def meaning(self, trace: TraceContext, head: int | None) -> str:
        if head is not None and _channels(_hr(trace, head)) is not None:
            return (self.stage.meaning.replace("decays by e^g,", "decays by diag(e^g) (row i by e^g[t,i]),")
                    + _kda_meaning(_hr(trace, head)) + " Unrolled, o_t = Σ_s (Σ_i q_t[i]·e^(G_t[i] − G_s[i])·k_s[i])·δ_s:"
                    " attention over the corrections with a causal mask of its own in every key channel (the last"
                    " line shows them).")
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

    def edit_cell(self, trace: TraceContext, op: Operation) -> InputCell | None:
        if op.head is None:
            return None
        # δ = (v − kv)·β reads β; every other step of the token reads g
        return _read_by(trace, op, beta=self.block(trace.comp.heads[op.head], op.col or 0)[0] == "dn_delta")

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        hr, sc = _hr(trace, h), trace.comp.scenario
        dn = hr.part(DeltaForward)
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
                elif dn.decay.ndim == 2:  # a gate per key channel: row i of the state by its own e^g[t,i]
                    (a, b), res = fit(lambda x, y: x * y, [float(dn.S[row - 1, i, j]), float(dn.decay[row, i])], value, d)
                    text = f"S'_{t}[{i},{j}] = {prev}[{i},{j}]·e^g[{t},{i}] = {a}·{b} = {res}"
                    refs = (Ref("dn_S", h, row - 1, c),)
                else:
                    (a, b), res = fit(lambda x, y: x * y, [float(dn.S[row - 1, i, j]), float(dn.decay[row])], value, d)
                    text = f"S'_{t}[{i},{j}] = {prev}[{i},{j}]·e^g[{t}] = {a}·{b} = {res}"
                    refs = (Ref("dn_S", h, row - 1, c),)
                if dn.decay.ndim == 2 and j == 0:
                    (gt,), et = fit(math.exp, [float(dn.g[row, i])], float(dn.decay[row, i]), d)
                    details = (f"e^g[{t},{i}] = e^{gt} = {et}",)
                elif c == 0:
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
        dn = hr.part(DeltaForward)
        if dn is None:
            raise KeyError(name)
        n = len(dn.g)
        parts = {"dn_decayed": dn.decayed.reshape(n, -1), "dn_kv": dn.kv, "dn_delta": dn.delta,
                 "dn_S": dn.S.reshape(n, -1), "dn_o": dn.output}
        if name == "dn_D" and _channels(hr) is not None:  # per channel no one mask: the weights it makes of q, k
            out = channel_weights(dn.q, dn.k, dn.g)  # (n, n)
        elif name == "dn_D":
            out = decay_mask(dn.g)  # (n, n)
        elif name == "dn_step":
            out = np.concatenate([parts[b] for b in BLOCKS], axis=1)  # (n, 2·d_k·d_v + 3·d_v)
        else:
            out = np.ascontiguousarray(parts[name])
        out.setflags(write=False)
        return out

    def filled(self, trace: TraceContext, name: str, head: int | None, index: int) -> int:
        if name == "dn_D":  # the unrolled map is derived after the last token, where mask_lines work it: not before
            n = trace.comp.scenario.n
            done = trace.filled("dn_step", head, index) >= n * sum(self.widths(_hr(trace, head)))
            return n * n if done else 0
        return _block_filled(trace, BLOCKS, "dn_step", self.widths, name, head, index)

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
        if head is not None and _channels(_hr(trace, head)) is not None:
            if name == "dn_decayed":
                return "S' = diag(e^g)·S"
            if name == "dn_D":
                return "Σᵢ q_t[i]·e^(G_t[i] − G_s[i])·k_s[i]"
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
        for name in (*BLOCKS, "dn_D"):  # named as the lines name them, the pane titles' left-hand sides
            out += [page.table(name, head, self.title(page.trace, name, head).split(" = ")[0]), ""]
        return out + page.worked(self.stage.key, head)


def mask_lines(trace: TraceContext, hr: HeadResult, d: int) -> tuple[str, ...]:
    """After the last token: the decaying causal mask the state amounts to, and that it gives the same outputs."""
    dn = hr.part(DeltaForward)
    assert dn is not None
    sc = trace.comp.scenario
    if _channels(hr) is not None:
        return _channel_mask_lines(trace, hr, d)
    D = decay_mask(dn.g)  # (n, n)
    rows = " | ".join(f"{sc.labels[t]}: {vector(D[t], False, d)}" for t in range(min(sc.n, 8)))
    unrolled = ((dn.q @ dn.k.T) * D) @ dn.delta  # (n, d_v)
    same = bool(np.allclose(unrolled, dn.output, rtol=1e-6, atol=1e-9))
    return (f"the state is attention with a decaying causal mask, e^(G_t − G_s) for s ≤ t (G the running sum of g),"
            f" 0 after t: {rows}{' | …' if sc.n > 8 else ''}",
            f"{'✓' if same else '≈'} o_t = Σ_s (q_t·k_s)·e^(G_t − G_s)·δ_s gives the outputs the state gave"
            f" (the causal mask is this triangle with every decay at e^0)")


def _channel_mask_lines(trace: TraceContext, hr: HeadResult, d: int) -> tuple[str, ...]:
    """After the last token, with a gate per key channel: each channel's own decaying mask, and that they give the
    outputs the state gave."""
    dn, ch = hr.need(DeltaForward), hr.need(Channels)
    sc = trace.comp.scenario
    D = channel_mask(dn.g)  # (n, n, d_k)
    shown = min(sc.n, 8)
    masks = " | ".join(f"channel {i}: " + ", ".join(f"{sc.labels[t]} {vector(D[t, :, i], False, d)}" for t in range(shown))
                       + (" …" if sc.n > 8 else "") for i in range(min(hr.d_k, 4)))
    unrolled = channel_weights(dn.q, dn.k, dn.g) @ dn.delta  # (n, d_v)
    same = bool(np.allclose(unrolled, dn.output, rtol=1e-6, atol=1e-9))
    case = ("every channel's mask is the same here, Gated DeltaNet's one mask" if ch.uniform else
            "the masks differ: each channel fades at its own rate, where Gated DeltaNet has one mask for all")
    return (f"the state is attention with a decaying causal mask in every key channel, e^(G_t[i] − G_s[i]) for s ≤ t"
            f" (G each channel's running sum of g), 0 after t: {masks}{' | …' if hr.d_k > 4 else ''} ({case})",
            f"{'✓' if same else '≈'} o_t = Σ_s (Σ_i q_t[i]·e^(G_t[i] − G_s[i])·k_s[i])·δ_s gives the outputs the"
            " state gave")


NORMALISE = Normalise()
GATES = Gates()
DELTA = Delta()


@counts(NORMALISE)
def _normalise_cost(sc: Scenario, ph: Phase) -> Count:
    """Each query row: a root and d_k divisions by it, then d_k by √d_k; each key row: a root and d_k divisions."""
    from qkv_tui.core.cost import B, Count, fig, shapes, term

    s = shapes(sc)
    dk = ("Σd_k", s.sum_dk)
    h = ("h", s.h)
    return Count(NORMALISE.stage.key, NORMALISE.stage.name, ph.name,
                 other=fig(term("root q", ph.R, h), term("div q", ("2", 2), ph.R, dk),
                           term("root k", ph.NEW, h), term("div k", ph.NEW, dk)),
                 read=fig(term("Q", ph.R, dk, B(ph)), term("K", ph.NEW, dk, B(ph))),
                 written=fig(term("q", ph.R, dk, B(ph)), term("k", ph.NEW, dk, B(ph))))


@counts(GATES)
def _gates_cost(sc: Scenario, ph: Phase) -> Count:
    """Per token and head: a = X̂·W_a + dt_bias, g = −e^A_log·ln(1 + e^a) (softplus: an exponential and a log; e^A_log
    once a head), and β = σ(X̂·W_b) (an exponential and a division) where W_b is given."""
    from qkv_tui.core.cost import B, Count, fig, term

    cfg = sc.deltanet
    assert cfg is not None
    two, h, d = ("2", 2), ("h", len(sc.heads)), ("d_model", int(sc.X.shape[1]))
    x = "X" if sc.norm is None else "X̂"
    if cfg.channels is not None:
        return _channel_gates_cost(sc, ph)
    matmul = fig(term("X·W_a", two, ph.R, d, h))
    other = fig(term("exp", ph.R, h), term("log", ph.R, h), term("e^A_log", h))
    read = fig(term(x, ph.R, d, B(ph)), term("W_a", d, h, B(ph)), term("dt_bias, A_log", ("2", 2), h, B(ph)))
    if cfg.W_b is not None:
        matmul += fig(term("X·W_b", two, ph.R, d, h))
        other += fig(term("exp β", ph.R, h), term("div β", ph.R, h))
        read += fig(term("W_b", d, h, B(ph)))
    return Count(GATES.stage.key, GATES.stage.name, ph.name, matmul=matmul, other=other, read=read,
                 written=fig(term("g, β", ("2", 2), ph.R, h, B(ph))))


def _channel_gates_cost(sc: Scenario, ph: Phase) -> Count:
    """A gate per key channel: per token, X̂·W_fa (r wide) then ·W_fb (Σd_k wide), and g = −e^A_log·ln(1 + e^a) for
    every channel (an exponential and a log each) where g is computed; β = σ(X̂·W_b) where W_b is given."""
    from qkv_tui.core.cost import B, Count, Figure, fig, term

    cfg = sc.deltanet
    assert cfg is not None and cfg.channels is not None
    kg = cfg.channels
    two, h, d = ("2", 2), ("h", len(sc.heads)), ("d_model", int(sc.X.shape[1]))
    dk = ("Σd_k", sum(head.d_k for head in sc.heads))
    x = "X" if sc.norm is None else "X̂"
    matmul, other, read, written = Figure(), Figure(), fig(term(x, ph.R, d, B(ph))), Figure()
    if kg.g is None:
        assert kg.W_fa is not None
        r = ("r", int(kg.W_fa.shape[1]))
        matmul += fig(term("X·W_fa", two, ph.R, d, r), term("low·W_fb", two, ph.R, r, dk))
        other += fig(term("exp", ph.R, dk), term("log", ph.R, dk), term("e^A_log", h))
        read += fig(term("W_fa", d, r, B(ph)), term("W_fb", r, dk, B(ph)), term("dt_bias", dk, B(ph)),
                    term("A_log", h, B(ph)))
        written += fig(term("g", ph.R, dk, B(ph)))
    if cfg.W_b is not None:
        matmul += fig(term("X·W_b", two, ph.R, d, h))
        other += fig(term("exp β", ph.R, h), term("div β", ph.R, h))
        read += fig(term("W_b", d, h, B(ph)))
        written += fig(term("β", ph.R, h, B(ph)))
    return Count(GATES.stage.key, GATES.stage.name, ph.name, matmul=matmul, other=other, read=read, written=written)


@counts(DELTA)
def _delta_cost(sc: Scenario, ph: Phase) -> Count:
    """Per token and head: e^g, then three d_k × d_v products: the recall Sᵀk, the write kδᵀ and the read Sᵀq. The
    state is d_k × d_v whatever the context: at decode it is read once, and nothing grows with N."""
    from qkv_tui.core.cost import DECODE, B, Count, fig, shapes, term

    s = shapes(sc)
    P = ("Σd_k·d_v", sum(dk * dv for dk, dv in s.heads))
    dk, dv, h = ("Σd_k", s.sum_dk), ("Σd_v", s.sum_dv), ("h", s.h)
    per_channel = sc.deltanet is not None and sc.deltanet.channels is not None  # e^g for every key channel
    gates = (fig(term("g", ph.R, dk, B(ph)), term("β", ph.R, h, B(ph))) if per_channel
             else fig(term("g, β", ("2", 2), ph.R, h, B(ph))))
    read = fig(term("q", ph.R, dk, B(ph)), term("k", ph.R, dk, B(ph)), term("v", ph.R, dv, B(ph))) + gates
    if ph.name == DECODE:  # the state carried from the tokens before
        read += fig(term("S", P, B(ph)))
    return Count(DELTA.stage.key, DELTA.stage.name, ph.name,
                 matmul=fig(term("Sᵀk", ("2", 2), ph.R, P), term("kδᵀ", ("2", 2), ph.R, P), term("Sᵀq", ("2", 2), ph.R, P)),
                 other=fig(term("exp", ph.R, dk if per_channel else h)), read=read,
                 written=fig(term("S' and S", ("2", 2), ph.R, P, B(ph)), term("kv, δ, o", ("3", 3), ph.R, dv, B(ph))))


# --- the backward pass (docs/backward.md, "[deltanet]"): the tokens in reverse, the state's adjoint carried back ---

BACK_BLOCKS = ("dnb_dS", "dnb_dq", "dnb_ddelta", "dnb_dv", "dnb_dbeta", "dnb_dSd", "dnb_dk", "dnb_dg")
BACK_TITLES = {"dnb_dS": "dS = q·dOᵀ + e^g·dS'(next)", "dnb_dq": "dq = S·dO", "dnb_ddelta": "dδ = dSᵀk",
               "dnb_dv": "dv = dδ·β", "dnb_dbeta": "dβ = dδ·(v − kv)", "dnb_dSd": "dS' = dS − k·dvᵀ",
               "dnb_dk": "dk = dS·δ − S'·dv", "dnb_dg": "dg = Σ S'⊙dS'", "dnb_step": "a token's steps, last first",
               "dn_dQ": "dQ via ‖Q‖", "dn_dK": "dK via ‖K‖"}


class DeltaBackStage(BackwardSpec):
    """The gated delta rule read backwards: one segment of n rows, the last token first (row r is token n − 1 − r),
    whose columns are a token's backward steps side by side; then the L2 norms."""

    stage = Stage("ddelta", "dDelta",
                  "Back through the gated delta rule, the last token first. The state's gradient flows backwards in"
                  " time: token t's dS collects what its own output asked (q_t·dO_tᵀ) and everything every later"
                  " token asked of it, decayed by e^g of the token after. From dS: dq = S·dO, dδ = dSᵀk, dv = dδ·β,"
                  " dβ = dδ·(v − kv); the recall kv = S'ᵀk passed −dv back, so dS' = dS − k·dvᵀ and"
                  " dk = dS·δ − S'·dv; the decay S' = S·e^g gives dg = Σ S'⊙dS'. Last, q and k were L2-normalised:"
                  " dx = (dx̂ − x̂·(x̂·dx̂)) / ‖x‖, the part along x̂ taken away, as the norm's length absorbed it.")
    per_head = True
    matrices = ("dnb_step", *BACK_BLOCKS, "dn_dQ", "dn_dK")

    def runs(self, trace: TraceContext) -> bool:
        return has_backward(trace) and _on(trace)

    def widths(self, hr: HeadResult) -> list[int]:
        P = hr.d_k * hr.d_v
        return [P, hr.d_k, hr.d_v, hr.d_v, 1, P, hr.d_k, 1]

    def block(self, hr: HeadResult, col: int) -> tuple[str, int]:
        lo = 0
        for name, w in zip(BACK_BLOCKS, self.widths(hr)):
            if col < lo + w:
                return name, col - lo
            lo += w
        raise IndexError(col)

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        hr, n = _hr(trace, head), trace.comp.scenario.n
        return [Plan("dnb_step", n, sum(self.widths(hr))), Plan("dn_dQ", n, hr.d_k), Plan("dn_dK", n, hr.d_k)]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        if seg.target in ("dn_dQ", "dn_dK"):
            return self._l2(trace, index, seg, row, col, d)
        hr, sc, hg = _hr(trace, h), trace.comp.scenario, grads(trace).heads[h]
        dn, db = hr.part(DeltaForward), _back(hg)
        assert dn is not None and db is not None
        t = sc.n - 1 - row
        tl = sc.labels[t]
        name, c = self.block(hr, col)
        me = Ref(name, h, row, c)
        if name in ("dnb_dS", "dnb_dSd"):
            i, j = divmod(c, hr.d_v)
            if name == "dnb_dS":
                value = float(db.dS[t, i, j])
                q, o = float(dn.q[t, i]), float(hg.dO[t, j])
                if t == sc.n - 1:
                    return formula_cell(trace, index, seg, row, col, d, value, lambda x, y: x * y, [q, o],
                                        lambda s: f"{s[0]}·{s[1]}", f"dS_{tl}[{i},{j}] = q[{tl},{i}]·dO[{tl},{j}]",
                                        (Ref("dn_q", h, t, i), Ref("dO_h", h, t, j), me),
                                        ("the last token: no later token read its state",))
                nl = sc.labels[t + 1]
                return formula_cell(trace, index, seg, row, col, d, value, lambda x, y, z, w: x * y + z * w,
                                    [q, o, float(dn.decay[t + 1]), float(db.dS_decayed[t + 1, i, j])],
                                    lambda s: f"{s[0]}·{s[1]} + {s[2]}·{s[3]}",
                                    f"dS_{tl}[{i},{j}] = q[{tl},{i}]·dO[{tl},{j}] + e^g[{nl}]·dS'_{nl}[{i},{j}]",
                                    (Ref("dn_q", h, t, i), Ref("dO_h", h, t, j), Ref("dnb_dSd", h, row - 1, c), me))
            value = float(db.dS_decayed[t, i, j])
            return formula_cell(trace, index, seg, row, col, d, value, lambda x, y, z: x - y * z,
                                [float(db.dS[t, i, j]), float(dn.k[t, i]), float(db.dv[t, j])],
                                lambda s: f"{s[0]} − {s[1]}·{s[2]}",
                                f"dS'_{tl}[{i},{j}] = dS_{tl}[{i},{j}] − k[{tl},{i}]·dv[{tl},{j}]",
                                (Ref("dnb_dS", h, row, c), Ref("dn_k", h, t, i), me))
        if name == "dnb_dq":
            return dot_cell(trace, index, seg, row, col, d, float(db.dq[t, c]), dn.S[t][c, :], hg.dO[t], False, False,
                            f"dq[{tl},{c}] = S_{tl}[{c},:]·dO[{tl}]", (Ref("dn_S", h, t), Ref("dO_h", h, t), me))
        if name == "dnb_ddelta":
            return dot_cell(trace, index, seg, row, col, d, float(db.ddelta[t, c]), db.dS[t][:, c], dn.k[t], False,
                            False, f"dδ_{tl}[{c}] = dS_{tl}[:,{c}]·k[{tl}]", (Ref("dnb_dS", h, row), Ref("dn_k", h, t), me))
        if name == "dnb_dv":
            return formula_cell(trace, index, seg, row, col, d, float(db.dv[t, c]), lambda x, y: x * y,
                                [float(db.ddelta[t, c]), float(dn.beta[t])], lambda s: f"{s[0]}·{s[1]}",
                                f"dv[{tl},{c}] = dδ_{tl}[{c}]·β[{tl}]", (Ref("dnb_ddelta", h, row, c), me))
        if name == "dnb_dbeta":
            diff = kept(trace, hr.V[t] - dn.kv[t])  # (d_v,) the correction before β, as the forward kept it
            return dot_cell(trace, index, seg, row, col, d, float(db.dbeta[t]), db.ddelta[t], diff, False, False,
                            f"dβ[{tl}] = dδ_{tl}·(V[{tl}] − kv_{tl})", (Ref("dnb_ddelta", h, row), Ref("dn_kv", h, t), me))
        if name == "dnb_dk":
            a = np.concatenate([db.dS[t][c, :], dn.decayed[t][c, :]])
            b = np.concatenate([dn.delta[t], -db.dv[t]])
            return dot_cell(trace, index, seg, row, col, d, float(db.dk[t, c]), a, b, False, False,
                            f"dk[{tl},{c}] = dS_{tl}[{c},:]·δ_{tl} + S'_{tl}[{c},:]·(−dv[{tl}])",
                            (Ref("dnb_dS", h, row), Ref("dn_delta", h, t), Ref("dn_decayed", h, t), me))
        value = float(db.dg[t])
        if t == 0:
            return Operation(index, seg, row, col, value, (me,),
                             f"dg[{tl}] = Σ S'_{tl}⊙dS'_{tl} = {trace.formatted('dnb_dg', h, value, d)}"
                             " (the state was empty before the first token, so its decay changed nothing)")
        return dot_cell(trace, index, seg, row, col, d, value, dn.decayed[t].ravel(), db.dS_decayed[t].ravel(), False,
                        False, f"dg[{tl}] = Σ S'_{tl}⊙dS'_{tl}", (Ref("dn_decayed", h, t), Ref("dnb_dSd", h, row), me))

    def _l2(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int, d: int) -> Operation:
        """dQ' = (dq/√dₖ − q̂·m) / ‖Q‖ with m = q̂·(dq/√dₖ); dK' = (dk − k·m) / ‖K‖, m = k·dk."""
        h = seg.head
        assert h is not None
        hr, sc, hg = _hr(trace, h), trace.comp.scenario, grads(trace).heads[h]
        dn, db = hr.part(DeltaForward), _back(hg)
        assert dn is not None and db is not None
        is_q = seg.target == "dn_dQ"
        qn, kn, qs, ks = scored(trace)
        x = hr.Q_used if is_q else hr.K_used
        root = dn.root_q if is_q else dn.root_k
        y = kept(trace, x / root[:, None])  # (n, d_k) x̂ = x / ‖x‖
        dy = kept(trace, db.dq / dn.divisor) if is_q else db.dk  # (n, d_k) at x̂
        policy = EXACT if trace.hand is None else ByHand(trace.hand)  # m as the kernel worked it (l2_backward)
        m_row = float(row_dots(y[row:row + 1], dy[row:row + 1], policy)[0])
        value = float((db.dQ_used if is_q else db.dK_used)[row, col])
        tl, name, small = sc.labels[row], qs if is_q else ks, "q" if is_q else "k"
        refs = (Ref("dnb_dq" if is_q else "dnb_dk", h, sc.n - 1 - row), Ref(qn if is_q else kn, h, row, col))
        details: tuple[str, ...] = ()
        if col == 0:
            work = dot_line(y[row], dy[row], False, False, fmt(float(m_row), False, d), d, trace.hand)
            details = (f"m[{tl}] = {small}̂[{tl}]·d{small}̂[{tl}] = {work}",)
        if is_q:  # by hand dq̂ = dq / √dₖ is written down first, as the kernel does
            (a, sd), res = fit(lambda u, v: u / v, [float(db.dq[row, col]), float(dn.divisor)], float(dy[row, col]), d)
            details = (f"dq̂[{tl},{col}] = dq[{tl},{col}] / √dₖ = {a} / {sd} = {res}", *details)
        return formula_cell(trace, index, seg, row, col, d, value, lambda g, u, m, r: (g - u * m) / r,
                            [float(dy[row, col]), float(y[row, col]), float(m_row), float(root[row])],
                            lambda s: f"({s[0]} − {s[1]}·{s[2]}) / {s[3]}",
                            f"d{name}[{tl},{col}] = (d{small}̂[{tl},{col}] − {small}̂[{tl},{col}]·m[{tl}]) / ‖{name}[{tl}]‖",
                            refs, details)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        if head is None or not has_backward(trace):
            raise KeyError(name)
        db = _back(grads(trace).heads[head])
        if db is None:
            raise KeyError(name)
        n = db.dq.shape[0]
        if name in ("dn_dQ", "dn_dK"):
            return db.dQ_used if name == "dn_dQ" else db.dK_used
        last_first = {"dnb_dS": db.dS.reshape(n, -1), "dnb_dq": db.dq, "dnb_ddelta": db.ddelta, "dnb_dv": db.dv,
                      "dnb_dbeta": db.dbeta[:, None], "dnb_dSd": db.dS_decayed.reshape(n, -1), "dnb_dk": db.dk,
                      "dnb_dg": db.dg[:, None]}
        if name == "dnb_step":
            out = np.concatenate([last_first[b][::-1] for b in BACK_BLOCKS], axis=1)
        else:
            out = np.ascontiguousarray(last_first[name][::-1])
        out.setflags(write=False)
        return out

    def filled(self, trace: TraceContext, name: str, head: int | None, index: int) -> int:
        return _block_filled(trace, BACK_BLOCKS, "dnb_step", self.widths, name, head, index)

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        h = op.head
        assert op.col is not None
        qn, kn, _, _ = scored(trace)
        if op.segment.target == "dn_dQ":
            return [(qn, h), ("dnb_dq", h), ("dn_dQ", h)]
        if op.segment.target == "dn_dK":
            return [(kn, h), ("dnb_dk", h), ("dn_dK", h)]
        name, _ = self.block(_hr(trace, h), op.col)
        return {"dnb_dS": [("dn_q", h), ("dO_h", h), ("dnb_dS", h)], "dnb_dq": [("dn_S", h), ("dO_h", h), ("dnb_dq", h)],
                "dnb_ddelta": [("dnb_dS", h), ("dn_k", h), ("dnb_ddelta", h)],
                "dnb_dv": [("dnb_ddelta", h), ("dn_g", h), ("dnb_dv", h)],
                "dnb_dbeta": [("dnb_ddelta", h), ("dn_kv", h), ("dnb_dbeta", h)],
                "dnb_dSd": [("dnb_dS", h), ("dnb_dv", h), ("dnb_dSd", h)],
                "dnb_dk": [("dnb_dS", h), ("dn_delta", h), ("dnb_dk", h)],
                "dnb_dg": [("dn_decayed", h), ("dnb_dSd", h), ("dnb_dg", h)]}[name]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("dnb_dS", head), ("dn_dQ", head), ("dn_dK", head)] if has_backward(trace) else []

    def markdown(self, page: MarkdownPage, head: int | None) -> list[str]:
        out: list[str] = []
        for name in (*BACK_BLOCKS, "dn_dQ", "dn_dK"):  # each step's block as a table of its own, the last token first
            out += [page.table(name, head, BACK_TITLES[name].split(" ")[0]), ""]  # dS, dq, …: as the lines name them
        return out + page.worked(self.stage.key, head)

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        return BACK_TITLES[name]


BACKWARD = DeltaBackStage()


class GatesBackStage(BackwardSpec):
    """Qwen3-Next's gates read backwards, where g and β were computed from X̂: to W_a, A_log, dt_bias and W_b."""

    stage = Stage("dgates", "dGates",
                  "Back through the gates, where g and β came from the weights. g = −e^A_log·softplus(a) with"
                  " a = X̂·W_a + dt_bias: softplus' slope is σ(a), so da = dg·(−e^A_log)·σ(a), and ∂g/∂A_log is g"
                  " itself, so dA_log = Σₜ dg·g; dt_bias was added to every token's a, so its gradient is Σₜ da."
                  " β = σ(X̂·W_b): the sigmoid's slope is β(1 − β), so db = dβ·β(1 − β). dW_a = X̂ᵀ·da, dW_b = X̂ᵀ·db,"
                  " and da and db join the paths back into X̂.")
    per_head = True
    matrices = ("gb_da", "dW_a", "dA_log", "ddt_bias", "gb_db", "dW_b")

    def runs(self, trace: TraceContext) -> bool:
        dn = getattr(trace.comp.scenario, "deltanet", None)
        return has_backward(trace) and dn is not None and (dn.g is None or dn.beta is None)

    def meaning(self, trace: TraceContext, head: int | None) -> str:
        return _x_named(trace, self.stage.meaning)

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        gb = _gates(grads(trace))
        n, d_model = trace.comp.X_in.shape
        plans = []
        if gb is not None and gb.da is not None:
            plans += [Plan("gb_da", n, 1), Plan("dW_a", d_model, 1), Plan("dA_log", 1, 1), Plan("ddt_bias", 1, 1)]
        if gb is not None and gb.db is not None:
            plans += [Plan("gb_db", n, 1), Plan("dW_b", d_model, 1)]
        return plans

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None
        comp, g = trace.comp, grads(trace)
        sc, gb, db, fw = comp.scenario, _gates(g), _back(g.heads[h]), comp.heads[h].part(DeltaForward)
        cfg = sc.deltanet
        assert gb is not None and db is not None and fw is not None and cfg is not None
        X = comp.X_in
        x = "X" if comp.norm is None else "X̂"
        name, me = seg.target, Ref(seg.target, h, row, 0)
        value = float(self.matrix(trace, name, h)[row, 0])
        tl = sc.labels[row] if name in ("gb_da", "gb_db") else ""
        if name == "gb_da":
            assert cfg.W_a is not None and cfg.A_log is not None and cfg.dt_bias is not None
            a = float(kept(trace, np.array([X[row] @ cfg.W_a[:, h] + cfg.dt_bias[h]]))[0])
            rate = float(kept(trace, np.array([math.exp(float(cfg.A_log[h]))]))[0])
            sigma_a = float(kept(trace, np.array([1.0 / (1.0 + math.exp(-a))]))[0])
            _, st = fit(lambda u: 1.0 / (1.0 + math.exp(-u)), [a], sigma_a, d)
            (lt,), rt = fit(math.exp, [float(cfg.A_log[h])], rate, d)
            details: tuple[str, ...] = (f"a[{tl}] = {x}[{tl}]·W_a[:,{h}] + dt_bias[{h}] = {fmt(a, False, d)}",
                                        f"σ(a[{tl}]) = 1 / (1 + e^−a[{tl}]) = {st}")
            if row == 0:
                details = (f"e^A_log[{h}] = e^{lt} = {rt}", *details)
            return formula_cell(trace, index, seg, row, 0, d, value, lambda u, v, w: -u * v * w,
                                [float(db.dg[row]), rate, sigma_a], lambda s: f"−{s[0]}·{s[1]}·{s[2]}",
                                f"da[{tl}] = −dg[{tl}]·e^A_log·σ(a[{tl}])", (Ref("dnb_dg", h), me), details)
        if name in ("dW_a", "dW_b"):
            d_col = gb.da if name == "dW_a" else gb.db
            assert d_col is not None
            grad = "da" if name == "dW_a" else "db"
            return dot_cell(trace, index, seg, row, 0, d, value, X[:, row], d_col[:, h], False, False,
                            f"{name}[{row},{h}] = {x}[:,{row}]·{grad}", (Ref("gb_da" if name == "dW_a" else "gb_db", h), me))
        if name == "dA_log":
            return dot_cell(trace, index, seg, row, 0, d, value, db.dg, fw.g, False, False,
                            f"dA_log[{h}] = Σₜ dg·g", (Ref("dnb_dg", h), Ref("dn_g", h), me))
        if name == "ddt_bias":
            assert gb.da is not None
            return sum_cell(trace, index, seg, row, 0, d, value, gb.da[:, h], f"ddt_bias[{h}] = Σₜ da",
                            (Ref("gb_da", h), me))
        beta = float(fw.beta[row])
        return formula_cell(trace, index, seg, row, 0, d, value, lambda u, b: u * b * (1 - b),
                            [float(db.dbeta[row]), beta], lambda s: f"{s[0]}·{s[1]}·(1 − {s[1]})",
                            f"db[{tl}] = dβ[{tl}]·β[{tl}]·(1 − β[{tl}])", (Ref("dnb_dbeta", h), me))

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        gb = _gates(grads(trace)) if has_backward(trace) else None
        if head is None or gb is None:
            raise KeyError(name)
        full = {"gb_da": gb.da, "dW_a": gb.dW_a, "gb_db": gb.db, "dW_b": gb.dW_b,
                "dA_log": None if gb.dA_log is None else gb.dA_log[None, :],
                "ddt_bias": None if gb.ddt_bias is None else gb.ddt_bias[None, :]}[name]
        if full is None:
            raise KeyError(name)
        out = np.ascontiguousarray(full[:, head:head + 1])
        out.setflags(write=False)
        return out

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        h, name = op.head, op.segment.target
        x = "X" if trace.comp.norm is None else "X_norm"
        return {"gb_da": [("dnb_dg", h), ("dn_g", h), ("gb_da", h)], "dW_a": [(x, None), ("gb_da", h), ("dW_a", h)],
                "dA_log": [("dnb_dg", h), ("dn_g", h), ("dA_log", h)], "ddt_bias": [("gb_da", h), ("ddt_bias", h)],
                "gb_db": [("dnb_dbeta", h), ("dn_g", h), ("gb_db", h)],
                "dW_b": [(x, None), ("gb_db", h), ("dW_b", h)]}[name]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        return _x_named(trace, {"gb_da": "da = −dg·e^A_log·σ(a)", "dW_a": "dW_a = X̂ᵀ·da", "dA_log": "dA_log = Σ dg·g",
                                "ddt_bias": "ddt_bias = Σ da", "gb_db": "db = dβ·β(1 − β)",
                                "dW_b": "dW_b = X̂ᵀ·db"}[name])

    def markdown(self, page: MarkdownPage, head: int | None) -> list[str]:
        out: list[str] = []
        for plan in self.segments(page.trace, head):  # named as the lines name them: da, not gb_da
            out += [page.table(plan.target, head, self.title(page.trace, plan.target, head).split(" = ")[0]), ""]
        return out + page.worked(self.stage.key, head)


GATES_BACKWARD = GatesBackStage()
