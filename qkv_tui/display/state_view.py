"""The decode view of a scenario whose heads keep a state ([linear], [deltanet]): what decoding carries
from one token to the next is the d_k × d_v state, not a KV cache, and a step costs the same at token 3
and at token 3 million. The tiles view of such a scenario says why it has no tiles.

Every line is worked from the engine's own numbers for that token (core/engine.py), with operands that
recompute the result on a calculator (teach/arith.py's fit).
"""

from __future__ import annotations

import numpy as np

from qkv_tui.core.engine import Computation, HeadResult
from qkv_tui.core.scenario import Matrix
from qkv_tui.display.frame import Frame
from qkv_tui.display.view import Explanation, PaneSpec, matrix_pane
from qkv_tui.kernels.deltanet import DeltaForward, decay_mask
from qkv_tui.kernels.deltanet_parts import Around
from qkv_tui.kernels.linear import LinearForward
from qkv_tui.teach.arith import fit

MAX_ROWS = 4  # state rows written out line by line; a wider state is in its pane
STATE_MEANING = (
    "Decoding with a state: each new token updates the dₖ × d_v state its head carries and reads its output"
    " from it. Nothing grows with the text: no Keys or Values are cached, so a step costs the same at every"
    " position. Yellow: this token's output, read from the state after it."  # the o pane is the one marked
)
NO_TILES = (
    "No tiles here: FlashAttention tiles the n × n score matrix of a softmax, and these heads keep a running"
    " state instead, which already never forms that matrix. The decode view (k) steps through the state."
)


def carries_state(comp: Computation) -> bool:
    sc = comp.scenario
    return sc.linear is not None or getattr(sc, "deltanet", None) is not None


def _v(values: Matrix) -> Matrix:
    return np.asarray(values, dtype=float)


def _line(fn: object, operands: list[float | Matrix], result: float | Matrix, decimals: int) -> tuple[list[str], str]:
    return fit(fn, operands, result, decimals)  # type: ignore[arg-type]


def linear_lines(hr: HeadResult, t: int, token: str, decimals: int) -> list[str]:
    lin = hr.part(LinearForward)
    assert lin is not None
    out: list[str] = []
    S_prev = lin.S[t - 1] if t else np.zeros_like(lin.S[0])
    for i in range(min(hr.d_k, MAX_ROWS)):
        (p, a, v), res = _line(lambda x, y, z: _v(x) + _v(y) * _v(z), [S_prev[i], float(lin.phi_K[t, i]), hr.V[t]],
                               lin.S[t, i], decimals)
        out.append(f"S_{token}[{i}] = S_prev[{i}] + φ(k)[{i}]·v = {p} + {a}·{v} = {res}")
    if hr.d_k > MAX_ROWS:
        out.append(f"… {hr.d_k - MAX_ROWS} more rows of the state, in its pane")
    if lin.spec.normalize:
        z_prev = lin.z[t - 1] if t else np.zeros_like(lin.z[0])
        (zp, pk), zr = _line(lambda x, y: _v(x) + _v(y), [z_prev, lin.phi_K[t]], lin.z[t], decimals)
        out.append(f"z_{token} = z_prev + φ(k) = {zp} + {pk} = {zr}")
        (nt, dt), o = _line(lambda x, y: _v(x) / _v(y), [lin.numer[t], float(lin.denom[t])], lin.recurrent[t], decimals)
        out.append(f"o[{token}] = φ(q)ᵀS / φ(q)ᵀz = {nt} / {dt} = {o}")
    else:
        out.append(f"o[{token}] = φ(q)ᵀS = {fit(lambda x: _v(x), [lin.numer[t]], lin.recurrent[t], decimals)[1]}")
    same = bool(np.allclose(lin.recurrent[t], lin.output[t], rtol=1e-9, atol=1e-12))
    out.append(f"{'✓' if same else '✗'} the quadratic form's out[{token}] (the trace's Quadratic stage) gives the same row")
    return out


def _read(x: Matrix, S: Matrix, result: Matrix, decimals: int) -> tuple[str, str]:
    """Sᵀx written out, row by row of the state: (``x[0]·S[0] + x[1]·S[1] + …``, the result), each operand as
    fit shows it so that the line recomputes."""
    d_k = len(x)
    texts, res = _line(lambda *a: sum(_v(a[2 * i]) * _v(a[2 * i + 1]) for i in range(len(a) // 2)),
                       [y for i in range(d_k) for y in (float(x[i]), S[i])], result, decimals)
    return " + ".join(f"{texts[2 * i]}·{texts[2 * i + 1]}" for i in range(d_k)), res


def deltanet_lines(hr: HeadResult, t: int, token: str, decimals: int) -> list[str]:
    dn = hr.part(DeltaForward)
    assert dn is not None
    out: list[str] = []
    S_prev = dn.S[t - 1] if t else np.zeros_like(dn.S[0])
    rows = range(min(hr.d_k, MAX_ROWS))
    per_channel = dn.decay.ndim == 2  # Kimi Delta Attention: row i of the state decays by its own e^g[i]
    for i in rows:
        decay = float(dn.decay[t, i] if per_channel else dn.decay[t])
        (p, e), res = _line(lambda x, y: _v(x) * _v(y), [S_prev[i], decay], dn.decayed[t, i], decimals)
        out.append(f"S'[{i}] = S_prev[{i}]·e^g{f'[{i}]' if per_channel else ''} = {p}·{e} = {res}")
    k = dn.k[t]
    terms, kv = _read(k, dn.decayed[t], dn.kv[t], decimals)
    out.append(f"kv = S'ᵀk = {terms} = {kv}" if hr.d_k <= MAX_ROWS else f"kv = S'ᵀk = {kv}")
    around = hr.part(Around)
    V = hr.V if around is None or around.conv is None else around.conv[2].out  # (n, d_v) what the rule reads
    (vt, kt, bt), d = _line(lambda x, y, z: (_v(x) - _v(y)) * _v(z), [V[t], dn.kv[t], float(dn.beta[t])],
                            dn.delta[t], decimals)
    out.append(f"δ = (v − kv)·β = ({vt} − {kt})·{bt} = {d}")
    for i in rows:
        (p, a, e), res = _line(lambda x, y, z: _v(x) + _v(y) * _v(z), [dn.decayed[t, i], float(k[i]), dn.delta[t]],
                               dn.S[t, i], decimals)
        out.append(f"S_{token}[{i}] = S'[{i}] + k[{i}]·δ = {p} + {a}·{e} = {res}")
    terms, o = _read(dn.q[t], dn.S[t], dn.output[t], decimals)
    out.append(f"o[{token}] = Sᵀq = {terms} = {o}" if hr.d_k <= MAX_ROWS else f"o[{token}] = Sᵀq = {o}")
    if per_channel:
        from qkv_tui.kernels.kda import channel_weights

        unrolled = channel_weights(dn.q, dn.k, dn.g)[t, : t + 1] @ dn.delta[: t + 1]  # (d_v,)
        form = "Σ_s (Σ_i q[i]·e^(G_t[i] − G_s[i])·k_s[i])·δ_s"
    else:
        unrolled = ((dn.q[t] @ dn.k[: t + 1].T) * decay_mask(dn.g)[t, : t + 1]) @ dn.delta[: t + 1]  # (d_v,)
        form = "Σ_s (q·k_s)·e^(G_t − G_s)·δ_s"
    same = bool(np.allclose(unrolled, dn.output[t], rtol=1e-6, atol=1e-9))
    out.append(f"{'✓' if same else '✗'} the decaying-mask form {form} gives the same row")
    return out


def memory_line(hr: HeadResult, t: int) -> str:
    kept = hr.d_k * hr.d_v + (hr.d_k if hr.part(LinearForward) is not None and hr.need(LinearForward).spec.normalize else 0)
    # K and V rows of their own widths: 2·dₖ a token would be false wherever d_v ≠ dₖ
    per_token = hr.d_k + hr.d_v
    seen = f"the {t + 1} tokens so far" if t else "the first token"
    return (f"carried: the state, {kept} numbers at every step; a KV cache would hold K and V of {seen},"
            f" {t + 1}·(dₖ + d_v) = {t + 1}·({hr.d_k} + {hr.d_v}) = {(t + 1) * per_token}, and grow by {per_token}"
            " a token")


def state_lines(comp: Computation, t: int, head: int, decimals: int) -> list[str]:
    hr = comp.heads[head]
    token = comp.scenario.labels[t]
    lines = linear_lines(hr, t, token, decimals) if hr.part(LinearForward) is not None else deltanet_lines(hr, t, token, decimals)
    return [*lines, memory_line(hr, t)]


def _pane(key: str, title: str, values: Matrix, rows: tuple[str, ...], cols: tuple[str, ...], decimals: int,
          current: bool = False) -> PaneSpec:
    one_row = np.atleast_2d(values).shape[0] == 1
    return matrix_pane(key, title, values, rows, cols, decimals, current=(0, None) if current and one_row else None)


def state_frame(comp: Computation, t: int, head: int, decimals: int) -> Frame:
    sc, hr = comp.scenario, comp.heads[head]
    token = sc.labels[t]
    S = hr.need(LinearForward).S if hr.part(LinearForward) is not None else hr.need(DeltaForward).S
    idx_k, idx_v = tuple(map(str, range(hr.d_k))), tuple(map(str, range(hr.d_v)))
    before = S[t - 1] if t else np.zeros_like(S[0])
    out = hr.need(LinearForward).recurrent if hr.part(LinearForward) is not None else hr.need(DeltaForward).output
    focus = [_pane("state_prev", "S carried in", before, idx_k, idx_v, decimals),
             _pane("state", f"S after {token}", S[t], idx_k, idx_v, decimals),
             _pane("state_out", f"o[{token}]", out[t], (token,), idx_v, decimals, current=True)]
    lines = state_lines(comp, t, head, decimals)
    heads = len(comp.heads)
    stages = tuple((f"{i + 1} {sc.labels[i]}", "current" if i == t else "done" if i < t else "todo")
                   for i in range(sc.n)) if sc.n <= 7 else ()
    explanation = Explanation(
        stage_label=f"state step {t + 1}/{sc.n}", counter=f'processing "{token}"',
        head_label=f"{hr.name} ({head + 1}/{heads})" if heads > 1 else "", arithmetic=lines[0],
        details=tuple(lines[1:]), meaning=STATE_MEANING,
        formula=(("S", True), (" ← ", False), ("update(S, k, v)", True), ("; o = ", False), ("read(S, q)", True)),
        stages=stages)
    return Frame(explanation, focus, [], (), "")


def no_tiles_frame(comp: Computation, head: int) -> Frame:
    hr = comp.heads[head]
    explanation = Explanation(stage_label="no tiles", counter="", head_label="", arithmetic=NO_TILES,
                              details=(memory_line(hr, comp.scenario.n - 1),), formula=(),
                              meaning="Linear attention has chunked forms of its own (the state handed from chunk to chunk);"
                              " this view is FlashAttention's, for a softmax.")
    return Frame(explanation, [], [], (), "")


def state_section(comp: Computation, decimals: int = 3, worked: int = 8) -> list[str]:
    """The Markdown page's production section for such a scenario: decoding with a state, token by token."""
    sc = comp.scenario
    out = ["## Decoding with a state", "",
           "Each head carries a dₖ × d_v state from one token to the next instead of a KV cache; each token"
           " updates it and reads its output from it, at the same cost at every position. FlashAttention's tiles"
           " do not apply: no n × n score matrix is ever formed.", ""]
    for h, hr in enumerate(comp.heads):
        if len(comp.heads) > 1:
            out += [f"### {hr.name}", ""]
        for t in range(min(sc.n, worked)):
            out.append(f"- step {t + 1}, {sc.labels[t]}:")
            out += [f"    {line}" for line in state_lines(comp, t, h, decimals)]
        if sc.n > worked:
            out.append(f"- steps {worked + 1} to {sc.n}: the same update, one token a step")
        out.append("")
    return out
