"""The backward tables of a head that is no softmax: [linear]'s quadratic form read backwards.

edges/worksheet/backward/tables.py calls these in place of the softmax's dP, D, dS and dscores; the numbers are
core/gradients.py's (kernels/linear_backward.py) run on the printed forward pass, so each table is worked
from tables printed before it (edges/worksheet/backward/linear_lines.py writes the key's lines).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from qkv_tui.core.scenario import Matrix
from qkv_tui.edges.worksheet.backward.lines import OperandKeys
from qkv_tui.kernels.linear import LinearForward
from qkv_tui.kernels.linear_backward import LinearBack
from qkv_tui.teach.stages.printed import PrintedChain, idx

Add = Callable[..., None]  # adds one table: key, name, heading, values, rows, cols, head, allow


def weights_key(normalize: bool, h: int) -> str:
    """The printed table the quadratic form mixes V with: W = A ÷ its row sum, or A itself."""
    return f"lin_W.{h}" if normalize else f"lin_A.{h}"


def linear_weights(chain: PrintedChain, h: int) -> Matrix:
    assert chain.sc.linear is not None
    return np.where(chain.sc.allow, chain.values(weights_key(chain.sc.linear.normalize, h)), 0.0)  # (n, n)


def printed_linear(chain: PrintedChain, h: int, lin: LinearForward, weights: Matrix) -> LinearForward:
    """The head's quadratic form as printed: φ(Q), φ(K), W and the output tables; each row sum is the printed
    A's (what W was divided by)."""
    A = chain.values(f"lin_A.{h}")  # (n, n) 0 where masked
    row_sum = A.sum(axis=1) if lin.spec.normalize else np.ones(A.shape[0])  # (n,)
    return replace(lin, phi_Q=chain.values(f"phi_Q.{h}"), phi_K=chain.values(f"phi_K.{h}"), weights=weights,
                   row_sum=row_sum, output=chain.values(f"output.{h}"))


def linear_tables(t: Add, chain: PrintedChain, h: int, lb: LinearBack, ops: OperandKeys) -> None:
    """dV, dW, D, dA, dφ(Q), dφ(K), then dQ and dK at what φ read (kernels/linear_backward.py's order)."""
    sc = chain.sc
    assert sc.linear is not None
    rows, keys = sc.labels, sc.key_labels
    hd = sc.heads[h]
    dq, dk = ops.dq_names(h), ops.dk_names(h)
    q, k = ops.q_used_name, ops.k_used_name
    norm = sc.linear.normalize
    w = "W" if norm else "A"
    t(f"dV.{h}", "dV", f"dV = {w}ᵀ·dO_h", lb.dV, keys, idx(hd.d_v), h)
    t(f"dP.{h}", "dW", "dW = dO_h·Vᵀ", lb.dweights, rows, keys, h)
    if norm:
        t(f"D.{h}", "D", "D = rowsum(dO_h ⊙ output)", lb.D[:, None], rows, ("D",), h)
        t(f"dA.{h}", "dA", "dA = (dW − D) ÷ ΣA, row by row (0 where masked)", lb.dA, rows, keys, h, sc.allow)
    else:
        t(f"dA.{h}", "dA", "dA = dW (0 where masked)", lb.dA, rows, keys, h, sc.allow)
    t(f"dphiQ.{h}", f"dφ({q})", f"dφ({q}) = dA·φ({k})", lb.dphi_Q, rows, idx(hd.d_k), h)
    t(f"dphiK.{h}", f"dφ({k})", f"dφ({k}) = dAᵀ·φ({q})", lb.dphi_K, keys, idx(hd.d_k), h)
    phi_slope = {"elu1": "1 above 0, e^x at or below", "relu": "1 above 0, else 0", "identity": "1"}[sc.linear.feature]
    t(f"dQu.{h}", dq[0], f"{dq[0]} = dφ({q}) ⊙ φ'({q}) (φ' = {phi_slope})", lb.dQ_used, rows, idx(hd.d_k), h)
    t(f"dKu.{h}", dk[0], f"{dk[0]} = dφ({k}) ⊙ φ'({k})", lb.dK_used, keys, idx(hd.d_k), h)
