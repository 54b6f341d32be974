"""What a [deltanet] head's decode step shows of the state it carries (display/state_view.py asks it through the
head's record, core/part_questions.py face): S' = S·e^g, kv = S'ᵀk, δ = (v − kv)·β, S = S' + kδᵀ, o = Sᵀq."""

from __future__ import annotations

import numpy as np

from qkv_tui.core.engine import HeadResult
from qkv_tui.core.scenario import Matrix
from qkv_tui.display.state_view import MAX_ROWS, as_array, fitted
from qkv_tui.kernels.deltanet import DeltaForward, decay_mask
from qkv_tui.kernels.deltanet_parts import Around


def _read(x: Matrix, S: Matrix, result: Matrix, decimals: int) -> tuple[str, str]:
    """Sᵀx written out, row by row of the state: (``x[0]·S[0] + x[1]·S[1] + …``, the result), each operand as
    fit shows it so that the line recomputes."""
    d_k = len(x)
    texts, res = fitted(lambda *a: sum(as_array(a[2 * i]) * as_array(a[2 * i + 1]) for i in range(len(a) // 2)),
                        [y for i in range(d_k) for y in (float(x[i]), S[i])], result, decimals)
    return " + ".join(f"{texts[2 * i]}·{texts[2 * i + 1]}" for i in range(d_k)), res


def lines(hr: HeadResult, t: int, token: str, decimals: int) -> list[str]:
    """Token ``t``'s decay, recall, correction, write and read of the state, each line recomputing from its operands."""
    dn = hr.need(DeltaForward)
    out: list[str] = []
    S_prev = dn.S[t - 1] if t else np.zeros_like(dn.S[0])
    rows = range(min(hr.d_k, MAX_ROWS))
    per_channel = dn.decay.ndim == 2  # Kimi Delta Attention: row i of the state decays by its own e^g[i]
    for i in rows:
        decay = float(dn.decay[t, i] if per_channel else dn.decay[t])
        (p, e), res = fitted(lambda x, y: as_array(x) * as_array(y), [S_prev[i], decay], dn.decayed[t, i], decimals)
        out.append(f"S'[{i}] = S_prev[{i}]·e^g{f'[{i}]' if per_channel else ''} = {p}·{e} = {res}")
    k = dn.k[t]
    terms, kv = _read(k, dn.decayed[t], dn.kv[t], decimals)
    out.append(f"kv = S'ᵀk = {terms} = {kv}" if hr.d_k <= MAX_ROWS else f"kv = S'ᵀk = {kv}")
    around = hr.part(Around)
    V = hr.V if around is None or around.conv is None else around.conv[2].out  # (n, d_v) what the rule reads
    (vt, kt, bt), d = fitted(lambda x, y, z: (as_array(x) - as_array(y)) * as_array(z),
                             [V[t], dn.kv[t], float(dn.beta[t])], dn.delta[t], decimals)
    out.append(f"δ = (v − kv)·β = ({vt} − {kt})·{bt} = {d}")
    for i in rows:
        (p, a, e), res = fitted(lambda x, y, z: as_array(x) + as_array(y) * as_array(z),
                                [dn.decayed[t, i], float(k[i]), dn.delta[t]], dn.S[t, i], decimals)
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


def states(hr: HeadResult) -> tuple[Matrix, Matrix]:
    """(the state after each token (n, d_k, d_v), each token's output read from it (n, d_v))."""
    dn = hr.need(DeltaForward)
    return dn.S, dn.output


def carried(hr: HeadResult) -> int:
    """The numbers carried from one token to the next: the state alone."""
    return hr.d_k * hr.d_v
