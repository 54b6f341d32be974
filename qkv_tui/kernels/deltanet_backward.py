"""The gated delta rule (kernels/deltanet.py) read backwards, token by token in reverse, under a numeric
policy (docs/backward.md, "[deltanet]").

The state's gradient dS flows backwards in time: the state after token t fed o_t = S_tᵀq_t and, decayed by
e^{g_{t+1}}, every later token, so dS_t = q_t dO_tᵀ + e^{g_{t+1}}·dS̃_{t+1}. Each token's write
S_t = S̃_t + k_t δ_tᵀ, δ_t = (v_t − S̃_tᵀk_t)·β_t, then gives dk, dv, dβ and dS̃_t; the decay S̃_t = S_{t−1}·e^{g_t}
gives dg_t = Σ S̃_t ⊙ dS̃_t. Last, back through the L2 norms, and (where g and β were computed) through
Qwen3-Next's softplus and sigmoid to W_a, A_log, dt_bias and W_b.

What a printed page shows as a number of its own (dS, dq, dδ, dv, dβ, dk, dg) is ``policy.table``, what one
operation writes down on the way (a product, dS' and the carry e^g·dS', dq / √d_k, x / ‖x‖) ``policy.worked``: the two are the
same by hand, but a printed page (edges/worksheet/backward/deltanet.py) rounds only the former, so each of its tables
is worked from printed numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from qkv_tui.kernels.attention_backward import row_dots
from qkv_tui.kernels.deltanet import L2_EPS, DeltaForward
from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.stats import Matrix


@dataclass(frozen=True, eq=False)
class DeltaBack:
    """One head's gated delta rule read backwards."""

    dS: Matrix  # (n, d_k, d_v) the adjoint of the state after token t: o_t's share and every later token's
    dq: Matrix  # (n, d_k) at q (L2-normalised and ÷ √d_k): S_t·dO_t
    dk: Matrix  # (n, d_k) at k (L2-normalised): dS_t·δ_t + S̃_t·dkv_t
    ddelta: Matrix  # (n, d_v) dS_tᵀ·k_t
    dv: Matrix  # (n, d_v) ddelta·β_t
    dbeta: Matrix  # (n,) ddelta·(v_t − kv_t)
    dkv: Matrix  # (n, d_v) −ddelta·β_t
    dS_decayed: Matrix  # (n, d_k, d_v) the adjoint of S̃_t = S_{t−1}·e^{g_t}: dS_t + k_t·dkv_tᵀ
    dg: Matrix  # (n,) Σ S̃_t ⊙ dS̃_t
    dQ_used: Matrix  # (n, d_k) back through q = Q / √(ΣQ² + eps) / √d_k
    dK_used: Matrix  # (n, d_k) back through k = K / √(ΣK² + eps)


def l2_backward(x: Matrix, root: Matrix, dy: Matrix, policy: Policy = EXACT) -> Matrix:
    """y = x / r, r = √(Σx² + eps) per row: dx = (dy − ŷ·(ŷ·dy)) / r, ŷ = x / r (rows, d). Each ŷ of a row
    read every x of it through r, so what r passes back is taken away along ŷ."""
    y = policy.worked(x / root[:, None])  # (rows, d)
    along = row_dots(y, dy, policy)  # (rows,)
    return policy.table((dy - y * along[:, None]) / root[:, None])


def deltanet_backward(dO: Matrix, Q_used: Matrix, K_used: Matrix, V: Matrix, dn: DeltaForward,
                      policy: Policy = EXACT) -> DeltaBack:
    """``dO`` (n, d_v) at the head's output; Q_used, K_used (n, d_k) what the L2 norms read; V (n, d_v);
    ``dn`` the head's forward under the same policy."""
    n, d_k = dn.q.shape
    d_v = V.shape[1]
    dS, dS_decayed = np.zeros((n, d_k, d_v)), np.zeros((n, d_k, d_v))
    dq, dk = np.zeros((n, d_k)), np.zeros((n, d_k))
    ddelta, dv, dkv = np.zeros((n, d_v)), np.zeros((n, d_v)), np.zeros((n, d_v))
    dbeta, dg = np.zeros(n), np.zeros(n)
    carry = np.zeros((d_k, d_v))  # e^{g_{t+1}}·dS̃_{t+1}: what the later tokens ask of S_t
    for t in range(n - 1, -1, -1):
        grad = policy.table(carry + policy.worked(dn.q[t][:, None] * dO[t][None, :]))  # (d_k, d_v)
        dS[t] = grad
        dq[t] = policy.table(policy.worked(dn.S[t] * dO[t][None, :]).sum(axis=1))  # (d_k,)
        ddelta[t] = policy.table(policy.worked(grad * dn.k[t][:, None]).sum(axis=0))  # (d_v,)
        dv[t] = policy.table(ddelta[t] * dn.beta[t])
        dkv[t] = -policy.worked(ddelta[t] * dn.beta[t])  # the recall's gradient, from dδ and β as kept
        dbeta[t] = float(policy.table(policy.worked(ddelta[t] * policy.worked(V[t] - dn.kv[t])).sum()))
        before = policy.worked(grad + policy.worked(dn.k[t][:, None] * dkv[t][None, :]))  # (d_k, d_v)
        dS_decayed[t] = before
        write = policy.worked(policy.worked(grad * dn.delta[t][None, :]).sum(axis=1))  # (d_k,) dS_t·δ_t
        recall = policy.worked(policy.worked(dn.decayed[t] * dkv[t][None, :]).sum(axis=1))  # (d_k,) S̃_t·dkv_t
        dk[t] = policy.table(write + recall)
        dg[t] = float(policy.table(policy.worked(dn.decayed[t] * before).sum()))
        carry = policy.worked(before * dn.decay[t])
    dq_hat = policy.worked(dq / dn.divisor)  # (n, d_k) q = q̂ / √d_k
    dQ_used = l2_backward(Q_used, dn.root_q, dq_hat, policy)
    dK_used = l2_backward(K_used, dn.root_k, dk, policy)
    arrays = (dS, dq, dk, ddelta, dv, dbeta, dkv, dS_decayed, dg, dQ_used, dK_used)
    for a in arrays:
        a.setflags(write=False)
    return DeltaBack(*arrays)


@dataclass(frozen=True, eq=False)
class GatesBack:
    """Qwen3-Next's g = −e^{A_log}·softplus(X̂·W_a + dt_bias) and β = σ(X̂·W_b) read backwards, every head at once;
    the parts for what the file gives as arrays are None."""

    da: Matrix | None  # (n, H) at X̂·W_a + dt_bias: dg·(−e^{A_log})·σ(a), softplus' slope being σ
    dW_a: Matrix | None  # (d_model, H) X̂ᵀ·da
    dA_log: Matrix | None  # (H,) Σ_t dg·g (∂g/∂A_log is g itself)
    ddt_bias: Matrix | None  # (H,) Σ_t da
    db: Matrix | None  # (n, H) at X̂·W_b: dβ·β(1 − β)
    dW_b: Matrix | None  # (d_model, H) X̂ᵀ·db


def gates_backward(X: Matrix, g: Matrix, beta: Matrix, dg: Matrix, dbeta: Matrix, W_a: Matrix | None,
                   A_log: Matrix | None, dt_bias: Matrix | None, W_b: Matrix | None,
                   policy: Policy = EXACT) -> GatesBack:
    """X (n, d_model) is X̂, what the gates read; g, β, dg, dβ (n, H); W_a with A_log and dt_bias where g was
    computed, W_b where β was."""
    da = dW_a = dA_log = ddt_bias = db = dW_b = None
    if W_a is not None and A_log is not None and dt_bias is not None:
        a = policy.table(policy.matmul(X, W_a) + dt_bias[None, :])  # (n, H)
        slope = policy.table(1.0 / (1.0 + np.exp(-a)))  # (n, H) softplus'(a) = σ(a)
        rate = policy.worked(np.exp(A_log))  # (H,)
        da = policy.table(-dg * rate[None, :] * slope)
        dW_a = policy.matmul(X.T, da)
        dA_log = row_dots(dg.T, g.T, policy)  # (H,) Σ over tokens of dg·g
        ddt_bias = policy.table(da.sum(axis=0))
    if W_b is not None:
        db = policy.table(dbeta * beta * (1.0 - beta))  # (n, H) σ' = σ(1 − σ)
        dW_b = policy.matmul(X.T, db)
    return GatesBack(da, dW_a, dA_log, ddt_bias, db, dW_b)


def forward_as_printed(Q: Matrix, K: Matrix, q: Matrix, k: Matrix, gates: Matrix, beta: Matrix, S: np.ndarray,
                       delta: Matrix, values: Matrix, kv_given: Matrix, output: Matrix) -> DeltaForward:
    """A head's forward record from the numbers a page prints (Q, K, q, k, g, β, each token's S and δ, V's rows):
    what the backward reads and the page does not print is worked from them, S' = S before·e^g (the first token's
    is 0) and kv = v − δ / β; where β is 0, δ says nothing of kv, and ``kv_given``'s row is taken."""
    n, d_k = q.shape
    d_v = S.shape[2]
    decayed = np.zeros((n, d_k, d_v))
    decayed[1:] = S[:-1] * np.exp(gates[1:])[:, None, None]
    kv = np.where(beta[:, None] != 0, values - delta / np.where(beta == 0, 1.0, beta)[:, None], kv_given)
    sq_q, sq_k = (Q * Q).sum(axis=1), (K * K).sum(axis=1)
    return DeltaForward(sq_q, sq_k, np.sqrt(sq_q + L2_EPS), np.sqrt(sq_k + L2_EPS), math.sqrt(d_k), q, k, gates, beta,
                        np.exp(gates), decayed, kv, delta, S, output)
