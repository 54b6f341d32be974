"""RMSNorm and LayerNorm: each row's statistics (safe where float64's sums and squares overflow) and the normalisation."""

from __future__ import annotations

import numpy as np

from qkv_tui.base.fixed import fixed
from qkv_tui.kernels.policy import Policy
from qkv_tui.kernels.stats import Matrix, mean_square, row_mean

__all__ = ["Matrix", "Normed", "mean_square", "normalise", "row_mean"]


@fixed
class Normed:
    """X normalised row by row, with the statistics a reader sees (as the policy keeps them)."""

    X_norm: Matrix  # (n, d_model)
    mean: Matrix  # (n,) the row's mean (layer), or 0 (rms)
    spread: Matrix  # (n,) mean of squares (rms) or population variance (layer)
    root: Matrix  # (n,) √(spread + eps), what each centred cell is divided by
    unrounded: Matrix  # (n, d_model) X_norm as computed from the kept statistics, before the policy keeps it


def norm_root(spread: Matrix, eps: float) -> Matrix:
    """Each row's √(spread + eps): what its centred cells are divided by."""
    root: Matrix = np.sqrt(spread + eps)
    return root


def normalise(policy: Policy, kind: str, X: Matrix, gamma: Matrix, beta: Matrix | None, eps: float,
              rows: Normed | None = None) -> Normed:
    """RMSNorm x / √(mean(x²) + eps) · γ, or LayerNorm (x − mean) / √(var + eps) · γ + β (docs/scenario-format.md, [norm]).

    Works on the last axis, so a batch of rows of any leading shape normalises too. ``rows`` gives each row's
    statistics taken over a wider row that X is a slice of (QK-norm over every head: X is one head's columns)."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        mean = rows.mean if rows is not None else policy.table(row_mean(X) if kind == "layer" else np.zeros(X.shape[:-1]))
        centred = policy.worked(X - mean[..., None])  # (n, d_model)
        if rows is None:
            spread = policy.statistic(policy.mean_square(centred), table=True)  # (n,) mean of squares, or the variance
            exact_root = norm_root(spread, eps)  # (n,)
            root = policy.statistic(exact_root, table=False)
            root = np.where(root == 0, exact_root, root)  # never divide by a rounded 0
        else:
            spread, root = rows.spread, rows.root
        raw = centred / root[..., None] * gamma  # (n, d_model)
        if beta is not None:
            raw = raw + beta
        X_norm = policy.table(policy.worked(raw))  # by hand: each cell worked, then copied into the table
    shown = policy.statistic(root, table=True)
    return Normed(X_norm, mean, spread, np.where(shown == 0, root, shown), raw)  # a root is never kept as a rounded 0
