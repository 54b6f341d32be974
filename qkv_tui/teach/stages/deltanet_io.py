"""The stages around the gated delta rule where ``[deltanet]`` has Qwen3-Next's and Qwen3.5's extra parts:

- Conv (before Normalise): each channel of Q, K and V through its short causal convolution, then SiLU,
  qc[t,c] = silu(Σ_j conv_q[j,c]·Q[t − K + 1 + j, c]), one cell at a time;
- Output norm (after Delta): z = X̂·W_Z, each output row RMS-normed and scaled by γ, then times silu(z), or σ(z)
  where ``gate_o = "sigmoid"`` (Kimi Linear's gated norm).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from qkv_tui.core.engine import HeadResult
from qkv_tui.core.fmt import fmt
from qkv_tui.core.scenario import Matrix
from qkv_tui.core.variants.deltanet_io import DeltaIO
from qkv_tui.kernels.deltanet_parts import Around, Convolved, GatedNorm
from qkv_tui.teach.arith import agrees, dot_line, first_fit, fit, shown, tries
from qkv_tui.teach.stages.common import (
    GATE_SLOT,
    OPEN,
    FormulaPart,
    Key,
    Operation,
    Plan,
    Ref,
    Segment,
    Stage,
    StageSpec,
    hround,
    x_in,
)
from qkv_tui.teach.stages.context import TraceContext

CONV = {"dn_cq": ("Q", "conv_q", 0), "dn_ck": ("K", "conv_k", 1), "dn_cv": ("V", "conv_v", 2)}  # result -> source
TAPS = {"dn_wq": 0, "dn_wk": 1, "dn_wv": 2}


def _hr(trace: TraceContext, head: int | None) -> HeadResult:
    assert head is not None
    return trace.comp.heads[head]


def _io(trace: TraceContext) -> DeltaIO:
    dn = trace.comp.scenario.deltanet
    assert dn is not None and dn.io is not None
    return dn.io


def _convs(hr: HeadResult) -> tuple[Convolved, Convolved, Convolved]:
    conv = hr.need(Around).conv
    assert conv is not None
    return conv


def _onorm(hr: HeadResult) -> GatedNorm:
    out_norm = hr.need(Around).out_norm
    assert out_norm is not None
    return out_norm


def has_conv(trace: TraceContext) -> bool:
    return any(h.part(Around) is not None and h.need(Around).conv is not None for h in trace.comp.heads)


def _negated(text: str) -> str:
    """−m as a calculator reads it after e^: ``e^-0.5`` for m = 0.5, ``e^0.5`` for m = -0.5."""
    if text.startswith("-"):
        return text[1:]
    return text if shown(text) == 0 else f"-{text}"


def sigma_line(trace: TraceContext, name: str, m: float, sig: float, d: int) -> str:
    """``σ(m) = 1 / (1 + e^-m) = 1 / D = s``: e^−m and the sum at the digits that make each step re-compute
    (by hand, each rounded as the hand computation rounds it)."""
    result = fmt(sig, False, d)

    def attempt(p: int) -> tuple[tuple[str, str], bool]:
        mt = fmt(m, False, p)
        mv = shown(mt)
        if -mv > 700:
            return (mt, ""), True
        e = math.exp(-mv) if trace.hand is None else hround(math.exp(-m), trace.hand)
        dt = fmt(1.0 + (e if trace.hand is None else hround(e, trace.hand)), False, p)
        ok = agrees(1.0 / (1.0 + math.exp(-mv)), result) and shown(dt) > 0 and agrees(1.0 / shown(dt), result)
        return (mt, dt), ok

    mt, dt = first_fit(tries(d, False), attempt)
    if not dt:
        return f"σ({name}) = σ({mt}) = {result} (e^{_negated(mt)} is past float64)"
    return f"σ({name}) = 1 / (1 + e^{_negated(mt)}) = 1 / {dt} = {result}"


class Conv(StageSpec):
    stage = Stage("conv", "Conv",
                  "Before the rule, every channel of Q, K and V is mixed with the same channel of the kernel_size − 1"
                  " tokens before it (a short causal convolution, one kernel per channel, zeros before the first token),"
                  " then passed through SiLU, x·σ(x): each token's query, key and value already carry a little of"
                  " its neighbours, which the state alone, updated one token at a time, could not give them.")
    per_head = True
    matrices = ("dn_cq", "dn_ck", "dn_cv", "dn_wq", "dn_wk", "dn_wv")

    def runs(self, trace: TraceContext) -> bool:
        return has_conv(trace)

    def meaning(self, trace: TraceContext, head: int | None) -> str:
        # the number itself: on this screen K is the Key matrix, not the kernel's length
        before = _io(trace).taps - 1
        tokens = f"{before} token{'s' if before != 1 else ''} before it (a short causal convolution of kernel_size {before + 1}"
        return self.stage.meaning.replace("kernel_size − 1 tokens before it (a short causal convolution", tokens)

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        hr = _hr(trace, head)
        n = trace.comp.scenario.n
        return [Plan("dn_cq", n, hr.d_k), Plan("dn_ck", n, hr.d_k), Plan("dn_cv", n, hr.d_v)]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        hr = _hr(trace, h)
        src, _, which = CONV[seg.target]
        c = _convs(hr)[which]
        x = {"Q": hr.Q, "K": hr.K, "V": hr.V}[src]
        w = self.matrix(trace, ("dn_wq", "dn_wk", "dn_wv")[which], h)  # (K, width)
        labels = trace.comp.scenario.labels
        t, taps = labels[row], int(w.shape[0])
        first = row - taps + 1
        window = [float(x[s, col]) if s >= 0 else 0.0 for s in range(first, row + 1)]  # oldest first, zeros before t 0
        m, sig, value = float(c.mixed[row, col]), float(c.gate[row, col]), float(c.out[row, col])
        (mt, st), res = fit(lambda a, b: a * b, [m, sig], value, d)
        out = seg.target.replace("dn_c", "").upper() + "c"
        text = f"{out}[{t},{col}] = silu(m) = m·σ(m) = {mt}·{st} = {res}"
        dot = dot_line(w[:, col], window, trace.integral(("dn_wq", "dn_wk", "dn_wv")[which], h),
                       trace.integral(src, h), mt, max(d, len(mt.partition(".")[2])), trace.hand)
        rows = ", ".join(labels[s] if s >= 0 else "0" for s in range(first, row + 1))
        details = (f"m = Σ_j conv_{src.lower()}[j,{col}]·{src}[t − {taps - 1} + j,{col}] over ({rows}) = {dot}",
                   sigma_line(trace, "m", m, sig, d))
        refs = (Ref(src, h, None, col), Ref(("dn_wq", "dn_wk", "dn_wv")[which], h, None, col))
        return Operation(index, seg, row, col, value, refs, text, details)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        hr = _hr(trace, head)
        if hr.part(Around) is None or hr.need(Around).conv is None:
            raise KeyError(name)
        if name in CONV:
            return _convs(hr)[CONV[name][2]].out
        io = _io(trace)
        cut = (io.conv_q, io.conv_k, io.conv_v)[TAPS[name]]
        assert head is not None and cut is not None
        return cut[head]

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        src, _, which = CONV[op.segment.target]
        return [(src, op.head), (("dn_wq", "dn_wk", "dn_wv")[which], op.head), (op.segment.target, op.head)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("dn_cq", head), ("dn_ck", head), ("dn_cv", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        if name in TAPS:
            return f"conv_{'qkv'[TAPS[name]]} taps (oldest first)"
        src = CONV[name][0]
        return f"{src}c = silu(conv({src}))"

    def formula(self, trace: TraceContext, op: Operation) -> list[FormulaPart]:
        return [FormulaPart(OPEN, "silu(conv) → ")]

    def lights(self, seg: Segment) -> frozenset[int]:
        return frozenset({OPEN})


ONORM = ("dn_z", "dn_on", "dn_og")


def _sigmoid(trace: TraceContext) -> bool:
    """Whether the output norm is gated by σ(z) (``gate_o = "sigmoid"``, Kimi Linear's) rather than silu(z)."""
    dn = trace.comp.scenario.deltanet
    return dn is not None and dn.io is not None and dn.io.gate_o == "sigmoid"


def _act(trace: TraceContext) -> str:
    return "σ" if _sigmoid(trace) else "silu"


class OutputNorm(StageSpec):
    stage = Stage("onorm", "Output norm",
                  "Each head's output o is RMS-normed row by row and scaled by γ, then multiplied cell by cell by"
                  " silu(z), z = X̂·W_Z: a gate the token computes for itself, as in the models' Gated DeltaNet"
                  " (the state's read-out can grow or shrink with what was written; the norm keeps its size steady"
                  " and the gate lets a token mute what it does not need). W_O reads the result.")
    per_head = True
    matrices = ("W_Z", *ONORM)

    def runs(self, trace: TraceContext) -> bool:
        return any(h.part(Around) is not None and h.need(Around).out_norm is not None for h in trace.comp.heads)

    def meaning(self, trace: TraceContext, head: int | None) -> str:
        said = self.stage.meaning
        if _sigmoid(trace):
            kimi = "as in Kimi Linear's KDA layers, whose gate is σ where Qwen3-Next's is silu"
            said = said.replace("silu(z)", "σ(z)").replace("as in the models' Gated DeltaNet", kimi)
        return said if trace.comp.norm is not None else said.replace("X̂", "X")

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        n, d_v = trace.comp.scenario.n, _hr(trace, head).d_v
        return [Plan("dn_z", n, d_v), Plan("dn_on", n, d_v), Plan("dn_og", n, d_v)]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        hr = _hr(trace, h)
        on = _onorm(hr)
        t = trace.comp.scenario.labels[row]
        if seg.target == "dn_z":
            src, xs = x_in(trace)
            W_Z = self.matrix(trace, "W_Z", h)
            value = float(on.z[row, col])
            work = dot_line(trace.comp.X_in[row], W_Z[:, col], trace.integral(src, None), trace.integral("W_Z", h),
                            fmt(value, False, d), d, trace.hand)
            return Operation(index, seg, row, col, value, (Ref(src, None, row), Ref("W_Z", h, None, col)),
                             f"z[{t},{col}] = {xs}[{t}]·W_Z[:,{col}] = {work}")
        if seg.target == "dn_on":
            value = float(on.normed[row, col])
            gamma = float(self.gamma(trace)[col])
            (o, r, g), res = fit(lambda a, b, c: a / b * c, [float(hr.output[row, col]), float(on.root[row]), gamma],
                                 value, d)
            text = f"ô[{t},{col}] = o[{t},{col}] / √(mean(o[{t}]²) + eps)·γ[{col}] = {o} / {r}·{g} = {res}"
            details: tuple[str, ...] = ()
            if col == 0:
                d_v = hr.d_v
                squares: Callable[..., float] = lambda *xs: sum(x * x for x in xs) / d_v
                row_o = [float(v) for v in hr.output[row]]
                texts, ms = fit(squares, row_o, float(on.mean_sq[row]), d)
                (mst,), rt = fit(lambda a: math.sqrt(a + self.eps(trace)), [float(on.mean_sq[row])], float(on.root[row]), d)
                eps = fmt(self.eps(trace), False, 12).rstrip("0").rstrip(".")
                details = (f"mean(o[{t}]²) = ({' + '.join(f'{x}·{x}' for x in texts)}) / {d_v} = {ms}",
                           f"√(mean + eps) = √({mst} + {eps}) = {rt}")
            return Operation(index, seg, row, col, value, (Ref("output", h, row), Ref("dn_on", h, row, col)), text,
                             details)
        value = float(on.out[row, col])
        z, sig = float(on.z[row, col]), float(on.sig_z[row, col])
        if on.gate == "sigmoid":  # Kimi Linear: the gate is σ(z) itself
            (a, st), res = fit(lambda x, s: x * s, [float(on.normed[row, col]), sig], value, d)
            text = f"out[{t},{col}] = ô[{t},{col}]·σ(z[{t},{col}]) = {a}·{st} = {res}"
            return Operation(index, seg, row, col, value, (Ref("dn_on", h, row, col), Ref("dn_z", h, row, col)), text,
                             (sigma_line(trace, "z", z, sig, d),))
        (a, zt, st), res = fit(lambda x, y, s: x * y * s, [float(on.normed[row, col]), z, sig], value, d)
        text = f"out[{t},{col}] = ô[{t},{col}]·silu(z[{t},{col}]) = ô·z·σ(z) = {a}·{zt}·{st} = {res}"
        return Operation(index, seg, row, col, value, (Ref("dn_on", h, row, col), Ref("dn_z", h, row, col)), text,
                         (sigma_line(trace, "z", z, sig, d),))

    def gamma(self, trace: TraceContext) -> Matrix:
        io = _io(trace)
        assert io is not None and io.gamma_o is not None
        return io.gamma_o

    def eps(self, trace: TraceContext) -> float:
        io = _io(trace)
        assert io is not None
        return io.eps_o

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        hr = _hr(trace, head)
        if hr.part(Around) is None or hr.need(Around).out_norm is None:
            raise KeyError(name)
        on = hr.need(Around).out_norm
        assert on is not None
        if name == "W_Z":
            io = _io(trace)
            assert head is not None and io is not None and io.W_Z is not None
            return io.W_Z[head]
        return {"dn_z": on.z, "dn_on": on.normed, "dn_og": on.out}[name]

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        h = op.head
        if op.segment.target == "dn_z":
            return [(x_in(trace)[0], None), ("W_Z", h), ("dn_z", h)]
        if op.segment.target == "dn_on":
            return [("output", h), ("dn_on", h)]
        return [("dn_on", h), ("dn_z", h), ("dn_og", h)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("dn_z", head), ("dn_on", head), ("dn_og", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        return {"W_Z": "W_Z", "dn_z": f"z = {x_in(trace)[1]}·W_Z", "dn_on": "ô = o/rms(o)·γ",
                "dn_og": f"out = ô ⊙ {_act(trace)}(z)"}[name]

    def formula(self, trace: TraceContext, op: Operation) -> list[FormulaPart]:
        return [FormulaPart(GATE_SLOT, f" → rmsnorm(o)·γ⊙{_act(trace)}(z)")]

    def lights(self, seg: Segment) -> frozenset[int]:
        return frozenset({GATE_SLOT})


CONV_STAGE = Conv()
OUTPUT_NORM = OutputNorm()
# the cost view lists these as not counted, with why (docs/cost.md)
CONV_STAGE.uncounted = "not counted yet: the short convolution over the last tokens' q, k and v"
OUTPUT_NORM.uncounted = "not counted yet: the gated RMSNorm of each head's output"
