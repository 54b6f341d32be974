"""The gated delta rule (Yang et al. 2024; Qwen3-Next's and Qwen3.5's linear-attention layers), one head,
token by token, under a numeric policy, as transformers' ``torch_recurrent_gated_delta_rule`` computes it:

q and k L2-normalised, x / √(Σx² + 1e-6), and q also ÷ √d_k; then per token
S ← S·e^{g_t}; kv = Sᵀk_t; δ = (v_t − kv)·β_t; S ← S + k_t δᵀ; o_t = Sᵀq_t.

Unrolled, o_t = Σ_{s ≤ t} (q_t·k_s)·e^{G_t − G_s}·δ_s with G_t = g_1 + … + g_t: attention over the
corrections δ with a causal mask that fades by each later token's own e^g (:func:`decay_mask`). In Qwen3-Next
g comes from each token's X̂, so the fading depends on the tokens; only a constant g makes it a function of the
distance t − s alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

from qkv_tui.kernels.attention import Attended, HeadPass, PartSpec, frozen
from qkv_tui.kernels.deltanet_parts import Around, AroundSpec, convolve, norm_out
from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.softmax import SoftmaxRows
from qkv_tui.kernels.stats import Matrix

L2_EPS = 1e-6


@dataclass(frozen=True, eq=False)
class DeltaForward:
    """One head's gated delta rule; every array read-only."""

    sq_q: Matrix  # (n,) Σq² of each raw query row
    sq_k: Matrix  # (n,) Σk²
    root_q: Matrix  # (n,) √(Σq² + eps)
    root_k: Matrix  # (n,)
    divisor: float  # √d_k, as kept
    q: Matrix  # (n, d_k) q / root / √d_k
    k: Matrix  # (n, d_k) k / root
    g: Matrix  # (n,) the log decay
    beta: Matrix  # (n,) the write strength
    decay: Matrix  # (n,) e^g
    decayed: Matrix  # (n, d_k, d_v) S_{t−1}·e^{g_t}
    kv: Matrix  # (n, d_v) decayedᵀ k_t: what the state recalls for k_t
    delta: Matrix  # (n, d_v) (v_t − kv)·β_t
    S: Matrix  # (n, d_k, d_v) the state after token t
    output: Matrix  # (n, d_v) S_tᵀ q_t

    # its weights, q·k times the decaying mask, weigh the corrections δ, not V: no distribution
    distribution: ClassVar[bool] = False
    route: ClassVar[str] = "Sᵀq, the state read with its query: the corrections δ weighted by q·k and the decaying causal mask"
    # the decode view's module for the state it carries, line by line (core/part_questions.py face)
    faces: ClassVar[Mapping[str, str]] = MappingProxyType({"state": "deltanet_state"})
    # the last operation's "Next:" line names the k view by what it shows here: a state, where no KV cache is kept
    words: ClassVar[Mapping[str, str]] = MappingProxyType({"closing.cache": "decoding with a state"})

    @property
    def map_formula(self) -> tuple[tuple[str, bool], ...]:
        """What the heads view's maps hold (core/part_questions.py): one decay a head multiplies q·k, a decay per
        key channel sits inside the dot product (Kimi Delta Attention: A[t,s] = Σᵢ q_t[i]·e^(G_t[i] − G_s[i])·k_s[i]);
        the decaying mask weighs the corrections δ. The map is the weights alone, not times δ: the header says so."""
        inner = "Σᵢ q[i]·e^(G_t[i] − G_s[i])·k[i]" if self.decay.ndim == 2 else "(q·kᵀ)·e^(G_t − G_s)"
        return ((inner, True), (" weighs δ", False))

    def overflow(self, stage: str, at: Any) -> tuple[str, str, str] | None:
        """The delta rule's values past float64, in place of the weights (core/part_questions.py)."""
        return state_overflow(self, stage, at)


def state_overflow(record: Any, stage: str, at: Any) -> tuple[str, str, str] | None:
    """A delta rule's values past float64 (one gate a head, or one a key channel: kernels/kda.py), in the order
    they are worked. Σq² and Σk² first: a row whose square overflows has a finite length float64 cannot reach
    this way, and its unit vector would be written as x / ∞ = 0. Then g: the state reads e^g, so an overflow
    of g shows in S too, and g's inputs are what to change."""
    if stage != "state":
        return None
    for what, array in (("Σq²", record.sq_q), ("Σk²", record.sq_k), ("g", record.g), ("e^g", record.decay),
                        ("δ", record.delta), ("the state S", record.S), ("the output", record.output)):
        if (where := at.first(array)) is not None:
            return what, (f"{at.head}: values in {what} of [deltanet] overflow float64 at {where}"), \
                _hint(at.sc.deltanet, at.h, what)
    return None


def _hint(dn: Any, h: int, what: str) -> str:
    """What to change where a value of the delta rule overflows: the inputs that value is made of, and only
    those. g = −e^A_log·softplus(X̂·W_a + dt_bias) reads neither V nor the state; the state, δ and the output
    read V, β and e^g ≤ 1, with the unit-length q and k (their size cannot grow)."""
    if what in ("Σq²", "Σk²"):
        role = what[1].upper()
        conv = f" or smaller conv_{role.lower()} taps" if dn.io is not None and dn.io.conv_q is not None else ""
        return (f"expected smaller {role} (X, W_{role} or b_{role}){conv}: each {role} row is divided by its length,"
                f" √(Σ{role.lower()}² + 1e-6), and the sum of its squares must stay within float64")
    kda = dn.channels
    if what in ("g", "e^g") and kda is not None:
        if kda.g is not None:
            return "expected a smaller g"
        return ("expected a smaller A_log, or a smaller (X̂·W_fa)·W_fb + dt_bias (X, W_fa, W_fb or dt_bias):"
                " g = −e^A_log·softplus((X̂·W_fa)·W_fb + dt_bias) is their product")
    if what in ("g", "e^g"):
        if dn.A_log is None:  # g given: the loader keeps it finite and <= 0, so e^g <= 1
            return "expected a smaller g"
        rate = float(decay_rate(dn.A_log)[h])
        if not math.isfinite(rate):
            return (f"expected a smaller A_log (e^A_log, the decay's rate, is past float64 for A_log ="
                    f" {dn.A_log[h]:g}: g = −e^A_log·softplus(X̂·W_a + dt_bias))")
        return ("expected a smaller A_log, or a smaller X̂·W_a + dt_bias (X, W_a or dt_bias): g = −e^A_log·softplus(X̂·W_a"
                " + dt_bias) is their product")
    given = " or a smaller beta" if dn.beta is not None else ""
    conv = " or smaller conv_v taps" if dn.io is not None and dn.io.conv_v is not None else ""
    return f"expected smaller V (X, W_V or b_V){conv}{given}: the state holds β-weighted Values, its q and k have length 1"


def l2_rows(x: Matrix, policy: Policy = EXACT) -> tuple[Matrix, Matrix, Matrix]:
    """(Σx², √(Σx² + eps), x / √(Σx² + eps)) of each row: transformers' l2norm."""
    sq = policy.worked(policy.worked(x * x).sum(axis=1))  # (n,)
    exact_root = np.sqrt(sq + L2_EPS)  # (n,)
    root = policy.worked(exact_root)
    root = np.where(root == 0, exact_root, root)  # never divide by a rounded 0 (a zero row, by hand)
    return sq, root, policy.table(x / root[:, None])


def decay_rate(A_log: Matrix) -> Matrix:
    """e^{A_log}, the rate in g = −e^{A_log}·softplus(…): ∞ (without a warning) where A_log is past float64's."""
    with np.errstate(over="ignore"):
        return np.exp(A_log)


def gates(X: Matrix, W_a: Matrix, W_b: Matrix | None, A_log: Matrix, dt_bias: Matrix,
          policy: Policy = EXACT) -> tuple[Matrix, Matrix]:
    """(g, β) for every token and head as Qwen3-Next computes them: g = −e^{A_log}·softplus(X·W_a + dt_bias),
    β = σ(X·W_b): (n, H) each (β is None's stand-in, ones, without W_b)."""
    a = policy.table(policy.matmul(X, W_a) + dt_bias[None, :])  # (n, H)
    softplus = policy.worked(np.logaddexp(0.0, a))  # (n, H) ln(1 + e^a), overflow-safe
    g = policy.table(-policy.worked(np.exp(A_log))[None, :] * softplus)  # (n, H)
    if W_b is None:
        return g, np.ones_like(g)
    b = policy.table(policy.matmul(X, W_b))  # (n, H)
    return g, policy.table(1.0 / (1.0 + np.exp(-b)))


def deltanet_forward(Q: Matrix, K: Matrix, V: Matrix, g: Matrix, beta: Matrix, policy: Policy = EXACT) -> DeltaForward:
    """One head: Q, K (n, d_k) as projected, V (n, d_v), g and β (n,)."""
    n, d_k = Q.shape
    d_v = V.shape[1]
    sq_q, root_q, q_hat = l2_rows(Q, policy)
    sq_k, root_k, k = l2_rows(K, policy)
    divisor = policy.divisor(float(np.sqrt(d_k)))
    q = policy.table(q_hat / divisor)  # (n, d_k)
    decay = policy.worked(np.exp(g))  # (n,)
    decayed, S = np.zeros((n, d_k, d_v)), np.zeros((n, d_k, d_v))
    kv, delta, output = np.zeros((n, d_v)), np.zeros((n, d_v)), np.zeros((n, d_v))
    state = np.zeros((d_k, d_v))
    for t in range(n):
        state = policy.worked(state * decay[t])  # (d_k, d_v)
        decayed[t] = state
        kv[t] = policy.worked(policy.worked(state * k[t][:, None]).sum(axis=0))  # (d_v,)
        delta[t] = policy.worked(policy.worked(V[t] - kv[t]) * beta[t])  # (d_v,)
        state = policy.worked(state + policy.worked(k[t][:, None] * delta[t][None, :]))  # (d_k, d_v)
        S[t] = state
        output[t] = policy.worked(policy.worked(state * q[t][:, None]).sum(axis=0))  # (d_v,)
    arrays = (sq_q, sq_k, root_q, root_k, q, k, decay, decayed, kv, delta, S, output)
    for a in arrays:
        a.setflags(write=False)
    g_kept, beta_kept = np.array(g, dtype=float), np.array(beta, dtype=float)
    g_kept.setflags(write=False)
    beta_kept.setflags(write=False)
    return DeltaForward(sq_q, sq_k, root_q, root_k, divisor, q, k, g_kept, beta_kept, decay, decayed, kv, delta, S, output)


def decay_mask(g: Matrix) -> Matrix:
    """D[t, s] = e^{G_t − G_s} = e^{g_{s+1}}·…·e^{g_t} for s ≤ t (1 on the diagonal), 0 for a later s: (n, n),
    or (n, n, d_k) for a g of one log decay per key channel (kernels/kda.py), each channel its own mask.

    The causal mask the state applies: o_t = Σ_s (q_t·k_s)·D[t, s]·δ_s. Multiplied out from the decays between
    s and t, as the state applies them (and as kernels/ssd.py's L), never from the running sums G: once one g is
    huge, G_s swallows every later small g (−1e17 − 3.049 is −1e17 in float64), and G_t − G_s would read e^0 = 1
    where the state faded by e^−3.049."""
    e = np.exp(np.asarray(g, dtype=float))  # (n,) or (n, d_k)
    n = e.shape[0]
    D = np.zeros((n, n, *e.shape[1:]))
    D[np.arange(n), np.arange(n)] = 1.0
    for s in range(n - 2, -1, -1):  # a column at a time, leftwards: D[t, s] = D[t, s+1]·e^{g_{s+1}} for t > s
        D[s + 1:, s] = D[s + 1:, s + 1] * e[s + 1]
    return D


@dataclass(frozen=True, eq=False)
class DeltaSpec(PartSpec):
    """[deltanet] as a part of a head's forward pass: its gated delta rule replaces the softmax's map, with the
    short convolution before it and the gated output norm after Mix where the head has them (``around``)."""

    g: Matrix  # (n,) the head's log decay
    beta: Matrix  # (n,) its write strength
    around: AroundSpec | None = None

    def attend(self, p: HeadPass) -> Attended:
        # the convolution reads the Queries before any rotation, as the layer does
        conv = None if self.around is None else convolve(self.around, p.Q_turned, p.K_used, p.V, p.policy)
        q, k, v = (p.Q_used, p.K_used, p.V) if conv is None else (c.out for c in conv)
        delta = deltanet_forward(q, k, v, self.g, self.beta, policy=p.policy)
        p.records.append(delta)
        p.notes["conv"] = conv
        return delta_attended(delta, p.allow)

    def after_mix(self, p: HeadPass, attended: Attended) -> None:
        if self.around is not None:  # after the gate's record, so that Concat joins the normed output
            conv = p.notes["conv"]
            assert conv is None or isinstance(conv, tuple)
            p.records.append(Around(conv, norm_out(self.around, p.X, attended.output, p.policy)))


def delta_attended(dn: DeltaForward, allow: np.ndarray) -> Attended:
    """The gated delta rule in the softmax's places: scores q̂·k̂ᵀ, and as weights those scores times the
    decaying causal mask, which weigh the corrections δ (not V) into the output."""
    scores = frozen(dn.q @ dn.k.T)  # (n, n)
    weighted = scores * decay_mask(dn.g)  # (n, n) 0 above the diagonal
    weights = frozen(np.where(allow, weighted, 0.0))
    logits = frozen(np.where(allow, weighted, -np.inf))
    n = len(dn.g)
    return Attended(1.0, scores, scores, None, logits,
                    SoftmaxRows(frozen(np.zeros(n)), weights, frozen(np.ones(n)), weights, None), dn.output)
