"""Every matrix of softmax(Q Kᵀ / scale + bias) V for a scenario, in plain NumPy.

Follows docs/scenario-format.md, "What is computed", line by line: X is normalised first where the
scenario has a [norm]; per head Q = X W_Q + b_Q, K = X_kv W_K + b_K, V = X_kv W_V + b_V;
[qk_norm] normalises each query and key vector; RoPE rotates Q and K by position;
scores = Q Kᵀ, scaled = scores / scale; the softmax's input is scaled + ALiBi bias with -inf where
the mask forbids; weights = stable row softmax (with an attention sink joining each row's sum),
output = weights V; then concat, W_O + b_O.
Query heads that share a K/V head (grouped-query attention) share its K and V arrays.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from qkv_tui.base.values import escaped
from qkv_tui.core.forward import HeadResult as HeadResult
from qkv_tui.core.forward import run_heads
from qkv_tui.core.forward import turn_of as turn_of
from qkv_tui.core.part_masks import attended
from qkv_tui.core.scenario import BoolMatrix, Matrix, Scenario, ScenarioError
from qkv_tui.core.variants import Norm, Rope, Vector
from qkv_tui.kernels.attention import frozen as _frozen
from qkv_tui.kernels.gate import Gated
from qkv_tui.kernels.norm import QKNormed, normalise
from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.rope import Rotated
from qkv_tui.kernels.rope import rotate as rotate_kernel
from qkv_tui.kernels.softmax import Biased, Capped

if TYPE_CHECKING:  # [mla]'s kernels load with a scenario that has it
    from qkv_tui.kernels.mla import MlaHead


@dataclass(frozen=True, eq=False)
class NormResult:
    """X normalised row by row, with the per-token statistics the trace shows."""

    X_norm: Matrix  # (n, d_model)
    mean: Matrix  # (n,) mean of the row (layer), or 0 (rms)
    spread: Matrix  # (n,) mean of squares (rms) or population variance (layer)
    root: Matrix  # (n,) √(spread + eps), what each centred cell is divided by


@dataclass(frozen=True, eq=False)
class Computation:
    """The whole computation of a scenario (the JSON export is its plain-data form)."""

    scenario: Scenario
    heads: tuple[HeadResult, ...]
    concat: Matrix  # (n, sum d_v)
    W_O: Matrix | None  # (sum d_v, d_out)
    output: Matrix  # (n, d_out) = concat W_O + b_O, or concat
    hand_decimals: int | None = None  # set when every intermediate was rounded (handcalc), else exact
    norm: NormResult | None = None  # set when the scenario has a [norm]
    b_O: Vector | None = None  # (d_out,)

    @property
    def allow(self) -> BoolMatrix:
        """The keys the heads attend: the scenario's mask, narrowed where a part chooses keys (the indexer)."""
        return attended(self.heads, self.scenario.allow)

    @property
    def X_in(self) -> Matrix:
        """What the Query projection reads: X, normalised where the scenario says so."""
        return self.scenario.X if self.norm is None else self.norm.X_norm

    @property
    def X_kv_in(self) -> Matrix:
        """What the Key and Value projections read: the context as given, or X_in."""
        return self.scenario.X_kv if self.scenario.is_cross else self.X_in


def normalize(norm: Norm, X: Matrix, policy: Policy = EXACT) -> NormResult:
    """RMSNorm x / √(mean(x²) + eps) · γ, or LayerNorm (x − mean) / √(var + eps) · γ + β (kernels/norm.py)."""
    done = normalise(policy, norm.kind, X, norm.gamma[None, :], None if norm.beta is None else norm.beta[None, :],
                     norm.eps)
    return NormResult(*(_frozen(a) for a in (done.X_norm, done.mean, done.spread, done.root)))


def rotate(M: Matrix, rope: Rope, positions: tuple[int, ...]) -> Matrix:
    """RoPE: each pair (a, b) of a row at position p turns by p·θ_i (docs/scenario-format.md, `[rope]`)."""
    t = turn_of(rope, positions, M.shape[1])
    assert t is not None
    return rotate_kernel(M, t.cos, t.sin, t.pairs)


# --- the one overflow rule ---------------------------------------------------------------------
#
# Every command (--check, each --export, the app, its edits and reloads) gets its numbers from
# norm_of, iter_heads and combine below, so this is the one place that decides what float64 can
# compute: a matrix with an infinite or undefined entry is refused with a line that names it, the
# row where it first happens and what to change. What it lets through is finite everywhere (masked
# cells are −∞ by design, and only there), so every export and every arithmetic line can show it.

class ComputeError(ScenarioError):
    """The rule's refusal, with what went past float64 (``fact``: the matrix and its row) apart from what to
    change (``hint``): a caller that knows more of where the numbers came from (a training step) names the
    input to change in the hint's place."""

    def __init__(self, source: str, fact: str, hint: str) -> None:
        super().__init__(source, f"{fact}; {hint}")
        self.fact, self.hint = escaped(fact), escaped(hint)


_NORM_HINTS = {
    "mean": "expected values whose sum stays within float64 (about ±1.8e308)",
    "mean square": "expected values below about 1.3e154 in size, whose squares float64 can hold",
    "variance": "expected values closer together (their distances from the mean square past float64)",
    "root": "expected a smaller eps (the mean square plus eps is past float64)",
    "X_norm": "expected a smaller gamma or beta",
}
_HEAD_HINTS = {
    "Q": "expected smaller X, W_Q or b_Q", "K": "expected smaller X, W_K or b_K",
    "V": "expected smaller X, W_V or b_V", "Q_rot": "expected smaller Q", "K_rot": "expected smaller K",
    "Q_norm": "expected a smaller gamma_q in [qk_norm], or Q whose squares float64 can hold",
    "K_norm": "expected a smaller gamma_k in [qk_norm], or K whose squares float64 can hold",
    "scores": "expected smaller Q and K, so that every product stays finite",
    "scaled": "expected a larger scale or smaller scores",
    "capped": "expected a larger scale or smaller scores (the soft-cap reads scores / scale)",
    "bias": "expected a smaller ALiBi slope (the bias is slope·(j − i))",
    "masked": "expected a smaller ALiBi slope or smaller scaled scores (the softmax reads their sum)",
    "weights": "expected smaller scores",
    "output": "expected smaller V",
}


def first_bad(array: Matrix, where: BoolMatrix | None = None) -> tuple[int, ...] | None:
    """The index of the first entry that is not finite (among ``where``), or None."""
    bad = ~np.isfinite(array)
    if where is not None:
        bad &= where
    if not bad.any():
        return None
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), bad.shape))


def _at(labels: tuple[str, ...], i: int) -> str:
    return f'row {i + 1} ("{labels[i]}")'


def norm_of(scenario: Scenario) -> NormResult | None:
    """The scenario's [norm] applied to X; raises ScenarioError where a statistic or X_norm overflows."""
    if scenario.norm is None:
        return None
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        norm = normalize(scenario.norm, scenario.X)
    spread = "mean square" if scenario.norm.kind == "rms" else "variance"
    for what, array in (("mean", norm.mean), (spread, norm.spread), ("root", norm.root), ("X_norm", norm.X_norm)):
        if (bad := first_bad(array)) is not None:
            raise ComputeError(scenario.source, f"[norm]: the {what} of X {_at(scenario.tokens, bad[0])} overflows float64",
                           _NORM_HINTS[what])
    return norm


def check_head(sc: Scenario, result: HeadResult, h: int) -> None:
    """Refuse head h with a value float64 cannot hold: ScenarioError naming the matrix, row and remedy.
    Matrices are looked at in the order they are computed, so the one named is the first past float64 and
    its hint names the inputs it is made of (a later matrix would blame inputs that did nothing wrong)."""
    if sc.mla is not None:  # its kernels load with a scenario that has it
        from qkv_tui.kernels.mla import MlaHead

        mla_check(sc, result.need(MlaHead))
    _check_matrices(sc, result, ("Q", "K", "V", "Q_norm", "K_norm", "Q_rot", "K_rot"))
    linear_check(sc, result, h)  # before the weights: a zero denominator would read as an overflow of them
    _check_matrices(sc, result, ("scores", "scaled", "capped", "bias", "masked", "weights", "output"))
    # the gate's logit X̂·W_G (its sigmoid and the gated output stay finite wherever the logit is)
    gated = result.part(Gated)
    if gated is not None and (bad := first_bad(gated.logit)) is not None:
        raise ComputeError(sc.source, f"{result.name}: values in the gate's X̂·W_G overflow float64 at {_at(sc.tokens, bad[0])}",
                       "expected smaller X or W_G")


def _check_matrices(sc: Scenario, result: HeadResult, names: tuple[str, ...]) -> None:
    keys = sc.key_tokens
    parts = _part_matrices(result)
    for name in names:
        array = parts[name] if name in parts else getattr(result, name)
        if array is None:
            continue
        # masked cells of the softmax's input are −∞ by design; an infinity where the mask allows is an overflow
        bad = first_bad(array, attended([result], sc.allow) if name == "masked" else None)
        if bad is None:
            continue
        where = _at(keys if name in ("K", "V", "K_norm", "K_rot") else sc.tokens, bad[0])
        if name in ("scores", "scaled", "capped", "bias", "masked", "weights"):
            where += f', key "{keys[bad[1]]}"'
        hint = _HEAD_HINTS[name] if sc.mla is None else _MLA_HINTS.get(name, _HEAD_HINTS[name])
        if name == "Q" and sc.mla is not None and sc.mla.W_Q is None:  # the query's latent, not a W_Q the file lacks
            hint = "expected smaller W_UQ or c_Q = X̂·W_DQ (smaller X or W_DQ)"
        if name == "scores" and sc.qk_norm is not None:  # the normalised vectors' size is the gains'
            hint = "expected smaller [qk_norm] gains (gamma_q, gamma_k), so that every product stays finite"
        a = 1.0 if sc.rope is None else sc.rope.attention_factor
        if name in ("Q_rot", "K_rot", "scores") and a != 1.0:  # YaRN's a multiplies cos and sin: it, not Q, may be huge
            carried = "multiplies cos and sin" if name != "scores" else "multiplies cos and sin, so the scores carry a²"
            hint = (f"expected a smaller [rope.scaling] attention_factor (a = {a:g} {carried}) or "
                    + hint.removeprefix("expected "))
        raise ComputeError(sc.source, f"{result.name}: values in {name} overflow float64 at {where}", hint)


def _part_matrices(result: HeadResult) -> dict[str, Matrix | None]:
    """The checked matrices that are parts' (None where the head has no such part), by the names messages use."""
    qk, rot, cap, alibi = result.part(QKNormed), result.part(Rotated), result.part(Capped), result.part(Biased)
    return {"Q_norm": None if qk is None else qk.Q_norm, "K_norm": None if qk is None else qk.K_norm,
            "Q_rot": None if rot is None else rot.Q_rot, "K_rot": None if rot is None else rot.K_rot,
            "capped": None if cap is None else cap.capped, "bias": None if alibi is None else alibi.bias}


# [mla]'s heads have no W_Q, W_K or W_V of their own to blame: their Q, K and V come from the latent layer
_MLA_HINTS = {
    "Q": "expected smaller X or W_Q",
    "K": "expected smaller W_UK or c_KV = X̂·W_DKV (the no-position part), or X or W_KR (the rotary part)",
    "V": "expected smaller W_UV or c_KV = X̂·W_DKV (smaller X or W_DKV)",
}


def mla_check(sc: Scenario, head: MlaHead) -> None:
    """The latent layer's own matrices, before the heads' Q, K and V they make: the first that overflows is named."""
    shared = head.shared
    parts = (("c_KV = X̂·W_DKV", shared.c_KV_raw, "expected smaller X or W_DKV"),
             ("c_KV after kv_norm", shared.c_KV, "expected a smaller gamma_kv"),
             ("c_Q = X̂·W_DQ", shared.c_Q_raw, "expected smaller X or W_DQ"),
             ("c_Q after q_norm", shared.c_Q, "expected a smaller gamma_q"),
             ("k_R = X̂·W_KR", shared.k_R_raw, "expected smaller X or W_KR"))
    for what, array, hint in parts:
        if array is not None and (bad := first_bad(array)) is not None:
            raise ComputeError(sc.source, f"values in [mla]'s {what} overflow float64 at {_at(sc.tokens, bad[0])}", hint)


def deltanet_logit_check(sc: Scenario, X_in: Matrix) -> None:
    """The gates' inputs X̂·W_a + dt_bias and X̂·W_b past float64 are refused: σ and softplus would hide it
    as 1 or ∞, and every page that works them out term by term would meet the overflow."""
    dn = sc.deltanet
    if dn is None:
        return
    for what, W, bias in (("X̂·W_a + dt_bias", dn.W_a, dn.dt_bias), ("X̂·W_b", dn.W_b, None)):
        if W is None:
            continue
        with np.errstate(over="ignore", invalid="ignore"):
            logit = X_in @ W + (0.0 if bias is None else bias[None, :])  # (n, num_heads)
        if (bad := first_bad(logit)) is not None:
            raise ComputeError(sc.source, f"values in [deltanet]'s {what} overflow float64 at {_at(sc.tokens, bad[0])}",
                           f"expected smaller X or {what.split('·')[1].split(' ')[0]}")


def _deltanet_hint(sc: Scenario, h: int, what: str) -> str:
    """What to change where a value of the delta rule overflows: the inputs that value is made of, and only
    those. g = −e^A_log·softplus(X̂·W_a + dt_bias) reads neither V nor the state; the state, δ and the output
    read V, β and e^g ≤ 1, with the unit-length q and k (their size cannot grow)."""
    dn = sc.deltanet
    assert dn is not None
    if what in ("g", "e^g"):
        if dn.A_log is None:  # g given: the loader keeps it finite and <= 0, so e^g <= 1
            return "expected a smaller g"
        from qkv_tui.kernels.deltanet import decay_rate

        rate = float(decay_rate(dn.A_log)[h])
        if not math.isfinite(rate):
            return (f"expected a smaller A_log (e^A_log, the decay's rate, is past float64 for A_log ="
                    f" {dn.A_log[h]:g}: g = −e^A_log·softplus(X̂·W_a + dt_bias))")
        return ("expected a smaller A_log, or a smaller X̂·W_a + dt_bias (X, W_a or dt_bias): g = −e^A_log·softplus(X̂·W_a"
                " + dt_bias) is their product")
    given = " or a smaller beta" if dn.beta is not None else ""
    conv = " or smaller conv_v taps" if dn.io is not None and dn.io.conv_v is not None else ""
    return f"expected smaller V (X, W_V or b_V){conv}{given}: the state holds β-weighted Values, its q and k have length 1"


def linear_check(sc: Scenario, result: HeadResult, h: int) -> None:
    """A zero denominator of linear attention is refused naming its row; an overflow in φ or the state naming it."""
    if sc.deltanet is not None:  # [linear]'s and [deltanet]'s kernels load with a scenario that has them
        from qkv_tui.kernels.deltanet import DeltaForward

        dn = result.need(DeltaForward)
        # g first: the state reads e^g, so an overflow of g shows in S too, and g's inputs are what to change
        for what, array in (("g", dn.g), ("e^g", dn.decay), ("δ", dn.delta), ("the state S", dn.S),
                            ("the output", dn.output)):
            if (bad := first_bad(array)) is not None:
                raise ComputeError(sc.source, f"{result.name}: values in {what} of [deltanet] overflow float64 at"
                               f" {_at(sc.tokens, bad[0])}", _deltanet_hint(sc, h, what))
    if sc.linear is None:
        return
    from qkv_tui.kernels.linear import LinearForward, zero_row

    lin = result.need(LinearForward)
    for what, array in (("φ(Q)", lin.phi_Q), ("φ(K)", lin.phi_K), ("the state S", lin.S), ("z", lin.z),
                        ("φ(q)ᵀS", lin.numer)):
        if (bad := first_bad(array)) is not None:
            raise ComputeError(sc.source, f"{result.name}: values in {what} of [linear] overflow float64 at"
                           f" {_at(sc.tokens, bad[0])}", "expected smaller Q and K (or V)")
    if lin.spec.normalize and (row := zero_row(lin.denom)) is not None:
        raise ComputeError(sc.source, f"{result.name}: [linear]'s denominator φ(q)ᵀz is 0 at {_at(sc.tokens, row)}"
                       " (every φ(q)·φ(k) of the row is 0), so the row cannot be divided by it",
                       "expected feature = \"elu1\" (never 0) or normalize = false")


def iter_heads(scenario: Scenario, norm: NormResult | None = None) -> Iterator[HeadResult]:
    """Each head's computation in turn (core/forward.py), so a caller can hold one head at a time (the
    streaming JSON export); raises ScenarioError on the first head that overflows."""
    sc = scenario
    if norm is None:
        norm = norm_of(sc)
    X_in = sc.X if norm is None else norm.X_norm
    if sc.mla is None:
        deltanet_logit_check(sc, X_in)
    for h, result in enumerate(run_heads(sc, X_in)):
        check_head(sc, result, h)
        yield result


def combine(scenario: Scenario, outputs: Sequence[Matrix]) -> tuple[Matrix, Matrix]:
    """(concat, final output) from the heads' outputs; raises ScenarioError on overflow."""
    with np.errstate(over="ignore", invalid="ignore"):
        concat = np.concatenate(outputs, axis=1)  # (n, sum d_v)
        output = concat @ scenario.W_O if scenario.W_O is not None else concat  # (n, d_out)
        if scenario.b_O is not None:
            output = output + scenario.b_O[None, :]
    if (bad := first_bad(output)) is not None:
        raise ComputeError(scenario.source, f"the final output overflows float64 at {_at(scenario.tokens, bad[0])}",
                       "expected smaller W_O or b_O")
    return _frozen(concat), _frozen(output)


def compute(scenario: Scenario) -> Computation:
    """Every matrix of the scenario; raises ScenarioError if a value overflows."""
    norm = norm_of(scenario)
    heads = tuple(iter_heads(scenario, norm))
    concat, output = combine(scenario, [h.joined for h in heads])
    return Computation(scenario, heads, concat, scenario.W_O, output, norm=norm, b_O=scenario.b_O)
