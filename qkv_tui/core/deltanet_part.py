"""[deltanet] as a part of a head's pass: the gated delta rule's state in place of the softmax (kernels/deltanet.py),
its short convolution and gated output norm around it (kernels/deltanet_parts.py), or Kimi's per-channel gates
(core/kda_part.py); built for core/head_parts.py's HEAD_PARTS."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from qkv_tui.core.arrays import Matrix
from qkv_tui.core.scenario import Scenario
from qkv_tui.kernels.policy import EXACT, Policy

if TYPE_CHECKING:  # the kernels load with a scenario that has [deltanet]
    from qkv_tui.kernels.deltanet_parts import AroundSpec


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
    return AroundSpec(q, k, v, z, io.gamma_o, io.eps_o, io.gate_o)


def deltanet_part(run: Any) -> Any:
    """Each head's spec where the scenario has [deltanet] (``run`` is core/head_parts.py's Run)."""
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
