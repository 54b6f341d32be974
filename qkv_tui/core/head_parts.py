"""Each variant's part of a head's forward pass, built from the scenario (the driver, core/forward.py, runs them).

A builder reads the scenario once for every head (QK-norm's statistics over all heads, [deltanet]'s gates) and
answers each head's spec (kernels/attention.py PartSpec), or None where the scenario or the head has no such
part. HEAD_PARTS is their order in a head's pass: QK-norm before RoPE (RoPE turns the normalised vectors), the
gate before [deltanet]'s output norm (Concat joins the last part's output). A new variant adds its builder here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from qkv_tui.core import variants
from qkv_tui.core.head import HeadResult
from qkv_tui.core.scenario import Matrix, Scenario
from qkv_tui.core.variants import QKNorm, Rope, Vector
from qkv_tui.core.variants.common import Keys, Table, face
from qkv_tui.kernels.attention import CapSpec, PartSpec, QKNormHead, SinkSpec, Turn, project
from qkv_tui.kernels.gate import GateSpec
from qkv_tui.kernels.norm import Normed, normalise
from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.rope import RopeSpec, angles_at

if TYPE_CHECKING:  # [linear]'s and [deltanet]'s kernels load with a scenario that has them
    from qkv_tui.kernels.deltanet_parts import AroundSpec
    from qkv_tui.kernels.linear import LinearSpec


@dataclass(frozen=True, eq=False)
class Run:
    """What the builders read: the scenario, what its projections read, the policy, and (by hand) the exact heads."""

    sc: Scenario
    X_in: Matrix  # (n, d_model) what the Query projection reads, normalised where the scenario says so
    X_kv: Matrix  # (m, d_in) what the Keys and Values read
    policy: Policy
    exact: Sequence[HeadResult] | None  # by hand: the exact heads, whose divisor and ALiBi bias are kept

    def quiet(self) -> AbstractContextManager[object]:
        """The exact run lets float64 overflow quietly (the engine's checks then name what did); by hand,
        NumPy's own rule stands, as it always did there."""
        return np.errstate(over="ignore", invalid="ignore") if self.exact is None else nullcontext()


PerHead = Callable[[int], "PartSpec | None"]
Builder = Callable[[Run], "PerHead | None"]


def turn_of(rope: Rope | None, positions: tuple[int, ...] | None, d_k: int, policy: Policy = EXACT) -> Turn | None:
    """RoPE's cos and sin for every token's position, for heads of width d_k; None without rope."""
    if rope is None:
        return None
    assert positions is not None
    a = angles_at(rope.inv_freq(d_k), positions)  # (n, r/2): r = d_k unless partial
    factor = rope.attention_factor  # YaRN's: it multiplies cos and sin (so the scores carry it squared)
    if factor == 1.0:
        return Turn(np.cos(a), np.sin(a), rope.pairs(d_k))
    # by hand cos, sin and the factor are each written down rounded, then their products
    f = policy.worked(np.array(factor))
    cos, sin = policy.worked(np.cos(a)) * f, policy.worked(np.sin(a)) * f  # (n, r/2)
    return Turn(policy.worked(cos), policy.worked(sin), rope.pairs(d_k))


def qk_norms(sc: Scenario, X: Matrix, X_kv: Matrix, policy: Policy = EXACT) -> list[QKNormHead | None]:
    """Each head's QK-norm ([qk_norm]); over every head, each token's statistics are those of its whole
    projection, the heads' columns side by side (under the same policy as the heads' own)."""
    qk = sc.qk_norm
    if qk is None:
        return [None] * len(sc.heads)
    q_rows = k_rows = None
    if qk.over == "all":
        kv_heads = sorted({sc.kv_head(h): h for h in range(len(sc.heads))}.items())  # K/V head -> a query head reading it
        Q_all = np.concatenate([project(X, h.W_Q, h.b_Q, policy) for h in sc.heads], axis=1)  # (n, H·d_k)
        K_all = np.concatenate([project(X_kv, sc.heads[h].W_K, sc.heads[h].b_K, policy) for _, h in kv_heads], axis=1)
        q_rows = _row_stats(Q_all, qk, qk.gamma_q, policy)
        k_rows = _row_stats(K_all, qk, qk.gamma_k, policy)
    out: list[QKNormHead | None] = []
    for h, head in enumerate(sc.heads):
        gamma_q, gamma_k = qk.gammas(h, sc.kv_head(h), head.d_k)
        out.append(QKNormHead(gamma_q, gamma_k, qk.eps, q_rows, k_rows))
    return out


def _row_stats(M: Matrix, qk: QKNorm, gamma: Vector, policy: Policy) -> Normed:
    with np.errstate(over="ignore", invalid="ignore"):
        return normalise(policy, "rms", M, gamma[None, :], None, qk.eps)


def linear_spec(sc: Scenario) -> LinearSpec | None:
    if sc.linear is None:
        return None
    from qkv_tui.kernels.linear import LinearSpec

    return LinearSpec(sc.linear.feature, sc.linear.normalize)


def deltanet_gates(sc: Scenario, X_in: Matrix, policy: Policy = EXACT) -> tuple[Matrix, Matrix] | None:
    """[deltanet]'s g and β, (n, num_heads) each: as given, or computed from W_a, A_log, dt_bias and W_b."""
    dn = sc.deltanet
    if dn is None:
        return None
    g, beta = dn.g, dn.beta
    if g is None or beta is None:
        W_a = dn.W_a if dn.W_a is not None else np.zeros((X_in.shape[1], len(sc.heads)))
        # with g given, the g worked from zeros is discarded: only β is read from these
        A_log = dn.A_log if dn.A_log is not None else np.zeros(len(sc.heads))
        dt_bias = dn.dt_bias if dn.dt_bias is not None else np.zeros(len(sc.heads))
        from qkv_tui.kernels.deltanet import gates

        made_g, made_beta = gates(X_in, W_a, dn.W_b, A_log, dt_bias, policy)
        g = made_g if g is None else g
        beta = made_beta if beta is None else beta
    return g, beta


def around_spec(sc: Scenario, h: int) -> AroundSpec | None:
    """Head h's share of [deltanet]'s short convolution and gated output norm; None without either."""
    io = None if sc.deltanet is None else sc.deltanet.io
    if io is None:
        return None
    from qkv_tui.kernels.deltanet_parts import AroundSpec

    q, k, v, z = (None if cut is None else cut[h] for cut in (io.conv_q, io.conv_k, io.conv_v, io.W_Z))
    return AroundSpec(q, k, v, z, io.gamma_o, io.eps_o)


def _qk_norm(run: Run) -> PerHead | None:
    if run.sc.qk_norm is None:
        return None
    with run.quiet():
        heads = qk_norms(run.sc, run.X_in, run.X_kv, run.policy)
    return heads.__getitem__


def _rope(run: Run) -> PerHead | None:
    sc, rope = run.sc, run.sc.rope
    if rope is None:
        return None

    def spec(h: int) -> PartSpec:
        turn = turn_of(rope, sc.positions, sc.heads[h].d_k, run.policy)
        assert turn is not None
        return RopeSpec(turn)
    return spec


def _sink(run: Run) -> PerHead | None:
    heads = run.sc.heads
    return lambda h: None if (sink := heads[h].sink) is None else SinkSpec(sink)


def _softcap(run: Run) -> PerHead | None:
    heads = run.sc.heads
    return lambda h: None if (cap := heads[h].softcap) is None else CapSpec(cap)


def _gate(run: Run) -> PerHead | None:
    heads = run.sc.heads
    return lambda h: None if (W_G := heads[h].W_G) is None else GateSpec(W_G)


def _linear(run: Run) -> PerHead | None:
    spec = linear_spec(run.sc)
    return None if spec is None else lambda h: spec


def _deltanet(run: Run) -> PerHead | None:
    sc = run.sc
    if sc.deltanet is not None and sc.deltanet.channels is not None:  # a gate per key channel: Kimi Delta Attention
        from qkv_tui.core.kda_part import kda_heads

        return kda_heads(run, around_spec)
    with run.quiet():
        dn = deltanet_gates(sc, run.X_in, run.policy)
    if dn is None:
        return None
    from qkv_tui.kernels.deltanet import DeltaSpec

    g, beta = dn
    return lambda h: DeltaSpec(g[:, h], beta[:, h], around_spec(sc, h))


def _part(table: Table[object], path: str) -> Builder:
    """A registered part's builder (its Table's ``faces.head``), imported the first time a scenario has the table."""
    def build(run: Run) -> PerHead | None:
        if table.of(run.sc) is None:
            return None
        made: PerHead | None = face(path)(run)
        return made
    return build


# the first variants' builders, by their registry entry (the parts registered since name their own face)
_FIRST: dict[int, Builder] = {id(variants.qk_norm.TABLE): _qk_norm, id(variants.rope.TABLE): _rope,
                              id(variants.sinks.KEYS): _sink, id(variants.softcap.KEYS): _softcap,
                              id(variants.gate.KEYS): _gate, id(variants.linear.TABLE): _linear,
                              id(variants.deltanet.TABLE): _deltanet}


def _builder(f: Table[Any] | Keys) -> Builder | None:
    if id(f) in _FIRST:
        return _FIRST[id(f)]
    if not isinstance(f, Table) or f.faces is None or f.faces.head is None:
        return None
    return _part(f, f.faces.head)


# every builder in FEATURES's order: QK-norm before RoPE, the gate before [deltanet]'s output norm, [value_scale]
# before [differential] (its attend hook runs both maps)
HEAD_PARTS: tuple[Builder, ...] = tuple(b for b in map(_builder, variants.FEATURES) if b is not None)


def head_parts(run: Run) -> Callable[[int], list[PartSpec]]:
    """Each head's specs in HEAD_PARTS's order, the scenario read once."""
    built = [per for per in (builder(run) for builder in HEAD_PARTS) if per is not None]
    return lambda h: [spec for spec in (per(h) for per in built) if spec is not None]
