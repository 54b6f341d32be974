"""Cross-entropy through an unembedding, as a language model's training step takes it: logits = output·W_U,
a softmax over the vocabulary per token, −ln p of each token's next id, averaged over the tokens (torch's
``cross_entropy`` with reduction "mean"), and its gradient back to the output and to W_U."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.softmax import SoftmaxRows, softmax_rows
from qkv_tui.kernels.stats import Matrix


@dataclass(frozen=True, eq=False)
class CrossEntropy:
    logits: Matrix  # (n, vocab) output·W_U
    softmax: SoftmaxRows  # over each row of the logits: .weights is p
    nll: Matrix  # (n,) −ln p[i, next_i], each token's share before the mean
    loss: float  # mean of nll
    onehot: Matrix  # (n, vocab) 1 at each token's next id
    dlogits: Matrix  # (n, vocab) (p − onehot) / n
    dO: Matrix  # (n, d_out) dlogits·W_Uᵀ
    dW_U: Matrix  # (d_out, vocab) outputᵀ·dlogits

    @property
    def probs(self) -> Matrix:
        return self.softmax.weights


def cross_entropy(output: Matrix, W_U: Matrix, next_ids: tuple[int, ...], policy: Policy = EXACT) -> CrossEntropy:
    """Every number of the loss and its gradient, as ``policy`` keeps them (by hand: each written down rounded)."""
    n = output.shape[0]
    logits = policy.matmul(output, W_U)
    rows = softmax_rows(logits, policy=policy)
    ids = np.asarray(next_ids, dtype=np.intp)
    at = np.arange(n)
    # ln Σe^(z − max) − (z_t − max): −ln p without p, so a p below float64's smallest is still a finite loss
    shifted = np.log(rows.row_sum) - (logits[at, ids] - rows.row_max)
    if policy is EXACT:
        nll = shifted
    else:  # by hand −ln of the p written down; where it was written down as 0, the form without p
        p_t = rows.weights[at, ids]
        with np.errstate(divide="ignore"):
            nll = policy.table(np.where(p_t > 0, -np.log(np.where(p_t > 0, p_t, 1.0)), shifted))
    loss = float(policy.table(np.array(nll.sum() / n)))
    onehot = np.zeros_like(logits)
    onehot[at, ids] = 1.0
    dlogits = policy.table((rows.weights - onehot) / n)
    return CrossEntropy(logits, rows, nll, loss, onehot, dlogits, policy.matmul(dlogits, W_U.T),
                        policy.matmul(output.T, dlogits))
