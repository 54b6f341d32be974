"""The output gate read backwards (docs/backward.md): joined = output ⊙ σ(z), z = X̂·W_G, from the gradient at what
Concat joins back to the head's own output, the gate's logits, its weights and its path into X̂."""

from __future__ import annotations

from dataclasses import dataclass

from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.stats import Matrix


@dataclass(frozen=True, eq=False)
class GateBack:
    """The output gate read backwards: joined = output ⊙ σ(z), z = X̂·W_G."""

    d_output: Matrix  # (n, d_v) dJ ⊙ gate: what reaches the head's own output
    d_gate: Matrix  # (n, d_v) dJ ⊙ output
    d_logit: Matrix  # (n, d_v) d_gate ⊙ σ(z)(1 − σ(z))
    dW_G: Matrix  # (d_model, d_v) X̂ᵀ·d_logit
    dX: Matrix  # (n, d_model) d_logit·W_Gᵀ: the gate's path into X̂


def gate_backward(dJ: Matrix, X: Matrix, W_G: Matrix, output: Matrix, gate: Matrix, policy: Policy = EXACT) -> GateBack:
    """``dJ`` (n, d_v) is the gradient at the gated output; σ'(z) = σ(z)(1 − σ(z)). Each table is one line
    keyed into a calculator from the tables before it (by hand: written down rounded)."""
    d_output = policy.table(dJ * gate)  # (n, d_v)
    d_gate = policy.table(dJ * output)  # (n, d_v)
    d_logit = policy.table(dJ * output * gate * (1.0 - gate))  # (n, d_v)
    return GateBack(d_output, d_gate, d_logit, policy.matmul(X.T, d_logit), policy.matmul(d_logit, W_G.T))
