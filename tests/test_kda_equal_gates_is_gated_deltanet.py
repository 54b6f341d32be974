"""Gated DeltaNet is Kimi Delta Attention with every key channel's g equal: kernels/kda.kda_forward, given a g
whose row t is g_t in every channel, computes kernels/deltanet.deltanet_forward's numbers bit for bit (exactly,
and under a by-hand policy), and says so (``uniform``). With unequal channels it says not, and differs."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv_tui.kernels.deltanet import deltanet_forward
from qkv_tui.kernels.kda import kda_forward
from qkv_tui.kernels.policy import EXACT, ByHand

FIELDS = ("sq_q", "sq_k", "root_q", "root_k", "q", "k", "beta", "decayed", "kv", "delta", "S", "output")


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 6), d_k=st.integers(1, 5), d_v=st.integers(1, 5), seed=st.integers(0, 2**32 - 1),
       places=st.sampled_from([None, 2, 3, 4]))
def test_equal_channel_gates_are_gated_deltanet(n: int, d_k: int, d_v: int, seed: int, places: int | None) -> None:
    rng = np.random.default_rng(seed)
    Q, K, V = rng.normal(size=(n, d_k)), rng.normal(size=(n, d_k)), rng.normal(size=(n, d_v))
    g, beta = -rng.exponential(0.7, size=n), rng.uniform(0.0, 1.0, size=n)
    policy = EXACT if places is None else ByHand(places)
    kda = kda_forward(Q, K, V, np.repeat(g[:, None], d_k, axis=1), beta, policy)
    gdn = deltanet_forward(Q, K, V, g, beta, policy)
    assert kda.uniform
    assert kda.divisor == gdn.divisor
    for name in FIELDS:
        np.testing.assert_array_equal(getattr(kda, name), getattr(gdn, name), err_msg=name)
    np.testing.assert_array_equal(kda.decay, np.repeat(gdn.decay[:, None], d_k, axis=1))


def test_unequal_channels_are_not_gated_deltanet() -> None:
    rng = np.random.default_rng(3)
    n, d_k, d_v = 5, 3, 2
    Q, K, V = rng.normal(size=(n, d_k)), rng.normal(size=(n, d_k)), rng.normal(size=(n, d_v))
    beta = rng.uniform(0.2, 1.0, size=n)
    g = np.tile([-0.05, -1.0, -3.0], (n, 1))  # channel 1 keeps, channel 3 forgets
    kda = kda_forward(Q, K, V, g, beta)
    assert not kda.uniform
    for shared in (-0.05, -1.0, -3.0):  # no single per-head gate gives the same state
        gdn = deltanet_forward(Q, K, V, np.full(n, shared), beta)
        assert np.abs(kda.S - gdn.S).max() > 1e-3
    # the state's row i is what it keeps of key channel i: the row that decays slowest keeps the most
    only_writes = kda_forward(Q, K, V, g, np.where(np.arange(n) == 0, 1.0, 0.0))  # write at token 1 only
    kept = np.abs(only_writes.S[-1]).sum(axis=1) / np.maximum(np.abs(only_writes.S[0]).sum(axis=1), 1e-300)
    np.testing.assert_allclose(kept, np.exp(g[1:].sum(axis=0)), rtol=1e-12)
