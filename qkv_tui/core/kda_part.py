"""Kimi Delta Attention as [deltanet]'s head pass (contracts §15): the gated delta rule with one forget gate per
key channel, S ← diag(e^{g_t})·S, where the table gives g per channel or Kimi Linear's W_fa, W_fb, A_log, dt_bias
(core/variants/kda_gates.py).

The head keeps the record every [deltanet] consumer reads (kernels/deltanet.DeltaForward), its g and e^g then
n × d_k instead of n, and a :class:`Channels` record beside it: the channel gates as computed, whether every
channel's g is equal (then the rule is Gated DeltaNet's, number for number), and the views it cannot serve yet.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from qkv_tui.kernels.attention import Attended, HeadPass, frozen
from qkv_tui.kernels.deltanet import DeltaForward, DeltaSpec
from qkv_tui.kernels.deltanet_parts import convolve
from qkv_tui.kernels.kda import ChannelGates, channel_gates, channel_weights, kda_forward
from qkv_tui.kernels.sigmoid import sigmoid
from qkv_tui.kernels.softmax import SoftmaxRows

if TYPE_CHECKING:
    from qkv_tui.core.arrays import Matrix


@dataclass(frozen=True, eq=False)
class Channels:
    """What a head with a gate per key channel adds to its DeltaForward record."""

    g: Matrix  # (n, d_k) each channel's log decay, as the rule read it
    uniform: bool  # every token's g equal across the channels: Gated DeltaNet's rule exactly
    gates: ChannelGates | None  # all heads' gates as Kimi Linear computes them; None where g is given
    head: int  # this head's index into ``gates``

    refuses: ClassVar[Mapping[str, str]] = MappingProxyType({
        "worksheet": "a worksheet of [deltanet] with a gate per key channel (Kimi Delta Attention) is not written yet;"
                     " use --export markdown for every step",
    })


@dataclass(frozen=True, eq=False)
class KdaSpec(DeltaSpec):
    """[deltanet]'s part of a head with a gate per key channel: g is (n, d_k)."""

    gates: ChannelGates | None = None
    head: int = 0

    def attend(self, p: HeadPass) -> Attended:
        conv = None if self.around is None else convolve(self.around, p.Q_turned, p.K_used, p.V, p.policy)
        q, k, v = (p.Q_used, p.K_used, p.V) if conv is None else (c.out for c in conv)
        kda = kda_forward(q, k, v, self.g, self.beta, policy=p.policy)
        dn = DeltaForward(**{f.name: getattr(kda, f.name) for f in fields(DeltaForward)})
        p.records += [dn, Channels(kda.g, kda.uniform, self.gates, self.head)]
        p.notes["conv"] = conv
        scores = frozen(dn.q @ dn.k.T)  # (n, n)
        weights = frozen(np.where(p.allow, channel_weights(dn.q, dn.k, dn.g), 0.0))
        logits = frozen(np.where(p.allow, weights, -np.inf))
        n = len(dn.g)
        return Attended(1.0, scores, scores, None, logits,
                        SoftmaxRows(frozen(np.zeros(n)), weights, frozen(np.ones(n)), weights, None), dn.output)


def kda_heads(run: Any, around: Callable[[Any, int], Any]) -> Callable[[int], KdaSpec]:
    """Each head's spec, the gates computed once for every head (as Kimi Linear's projections compute them).
    ``run`` is core/head_parts.py's Run and ``around`` its around_spec (not imported: that module imports this)."""
    sc = run.sc
    dn = sc.deltanet
    assert dn is not None and dn.channels is not None
    kg, X, policy = dn.channels, run.X_in, run.policy
    heads = len(sc.heads)
    gates = None
    with run.quiet():
        if kg.g is None:
            from qkv_tui.core.variants.kda_gates import kernel_weights

            W_b = dn.W_b if dn.W_b is not None else np.zeros((X.shape[1], heads))  # β given: σ(0) discarded
            gates = channel_gates(X, *kernel_weights(kg), W_b, policy)
            g = [gates.g[:, h] for h in range(heads)]
        else:
            g = list(kg.g)
        if dn.beta is not None:
            beta = dn.beta
        elif gates is not None:
            beta = gates.beta
        else:
            assert dn.W_b is not None
            beta = sigmoid(policy.table(policy.matmul(X, dn.W_b)), policy)  # (n, H)
    return lambda h: KdaSpec(g[h], beta[:, h], around(sc, h), gates, h)
