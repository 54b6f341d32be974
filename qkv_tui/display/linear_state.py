"""What a [linear] head's decode step shows of the state it carries (display/state_view.py asks it through the
head's record, core/part_questions.py face): S ← S + φ(k)vᵀ, z ← z + φ(k), o = φ(q)ᵀS / φ(q)ᵀz."""

from __future__ import annotations

import numpy as np

from qkv_tui.core.engine import HeadResult
from qkv_tui.core.scenario import Matrix
from qkv_tui.display.state_view import MAX_ROWS, as_array, fitted
from qkv_tui.kernels.linear import LinearForward
from qkv_tui.teach.arith import fit


def lines(hr: HeadResult, t: int, token: str, decimals: int) -> list[str]:
    """Token ``t``'s update of the state and its read, each line recomputing from its operands."""
    lin = hr.need(LinearForward)
    out: list[str] = []
    S_prev = lin.S[t - 1] if t else np.zeros_like(lin.S[0])
    for i in range(min(hr.d_k, MAX_ROWS)):
        (p, a, v), res = fitted(lambda x, y, z: as_array(x) + as_array(y) * as_array(z),
                                [S_prev[i], float(lin.phi_K[t, i]), hr.V[t]], lin.S[t, i], decimals)
        out.append(f"S_{token}[{i}] = S_prev[{i}] + φ(k)[{i}]·v = {p} + {a}·{v} = {res}")
    if hr.d_k > MAX_ROWS:
        out.append(f"… {hr.d_k - MAX_ROWS} more rows of the state, in its pane")
    if lin.spec.normalize:
        z_prev = lin.z[t - 1] if t else np.zeros_like(lin.z[0])
        (zp, pk), zr = fitted(lambda x, y: as_array(x) + as_array(y), [z_prev, lin.phi_K[t]], lin.z[t], decimals)
        out.append(f"z_{token} = z_prev + φ(k) = {zp} + {pk} = {zr}")
        (nt, dt), o = fitted(lambda x, y: as_array(x) / as_array(y), [lin.numer[t], float(lin.denom[t])],
                             lin.recurrent[t], decimals)
        out.append(f"o[{token}] = φ(q)ᵀS / φ(q)ᵀz = {nt} / {dt} = {o}")
    else:
        out.append(f"o[{token}] = φ(q)ᵀS = {fit(lambda x: as_array(x), [lin.numer[t]], lin.recurrent[t], decimals)[1]}")
    same = bool(np.allclose(lin.recurrent[t], lin.output[t], rtol=1e-9, atol=1e-12))
    out.append(f"{'✓' if same else '✗'} the quadratic form's out[{token}] (the trace's Quadratic stage) gives the same row")
    return out


def states(hr: HeadResult) -> tuple[Matrix, Matrix]:
    """(the state after each token (n, d_k, d_v), each token's output read from it (n, d_v)): the recurrent form's."""
    lin = hr.need(LinearForward)
    return lin.S, lin.recurrent


def carried(hr: HeadResult) -> int:
    """The numbers carried from one token to the next: the state, and z beside it where rows are normalised."""
    return hr.d_k * hr.d_v + (hr.d_k if hr.need(LinearForward).spec.normalize else 0)
