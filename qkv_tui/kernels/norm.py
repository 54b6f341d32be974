"""RMSNorm and LayerNorm: each row's statistics (safe where float64's sums and squares overflow) and the normalisation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from qkv_tui.kernels.policy import Policy

Matrix = npt.NDArray[np.float64]


def row_mean(X: Matrix) -> Matrix:
    """Each row's mean, (n,): its plain mean, or, where the sum overflows float64 (1e308 + 1e308) though the
    mean does not, the mean of the row divided by its largest magnitude, times that magnitude."""
    with np.errstate(over="ignore", invalid="ignore"):
        mean: Matrix = X.mean(axis=-1)
    return _rescued(X, mean, lambda unit: unit.mean(axis=-1), power=1)


def mean_square(C: Matrix) -> Matrix:
    """Each row's mean of squares, (n,), safe where the squares overflow: a row of 1.5e154 and 0 has squares
    past float64 (2.25e308) but a mean square of 1.125e308. Where the mean square itself is beyond float64
    the result is inf (the caller refuses it). Rows whose squares are all finite are computed plainly, so
    ordinary numbers come out bit for bit as ``(C * C).mean(axis=1)``."""
    with np.errstate(over="ignore", invalid="ignore"):
        plain: Matrix = (C * C).mean(axis=-1)
    return _rescued(C, plain, lambda unit: (unit * unit).mean(axis=-1), power=2)


def _rescued(X: Matrix, plain: Matrix, of_unit: Callable[[Matrix], Matrix], power: int) -> Matrix:
    """``plain`` where it is finite; elsewhere the statistic of the row scaled to magnitude 1, scaled back."""
    bad = ~np.isfinite(plain) & np.isfinite(X).all(axis=-1)
    if not bad.any():
        return plain
    out = plain.copy()
    top = np.abs(X[bad]).max(axis=-1)  # (bad,) > 0: a row of zeros has a finite statistic
    with np.errstate(over="ignore"):
        value = of_unit(X[bad] / top[..., None])
        for _ in range(power):  # one factor at a time: top² alone may overflow where the product does not
            value = value * top
        out[bad] = value  # inf where the statistic is past float64
    return out


@dataclass(frozen=True, eq=False)
class Normed:
    """X normalised row by row, with the statistics a reader sees (as the policy keeps them)."""

    X_norm: Matrix  # (n, d_model)
    mean: Matrix  # (n,) the row's mean (layer), or 0 (rms)
    spread: Matrix  # (n,) mean of squares (rms) or population variance (layer)
    root: Matrix  # (n,) √(spread + eps), what each centred cell is divided by
    unrounded: Matrix  # (n, d_model) X_norm as computed from the kept statistics, before the policy keeps it


def normalise(policy: Policy, kind: str, X: Matrix, gamma: Matrix, beta: Matrix | None, eps: float) -> Normed:
    """RMSNorm x / √(mean(x²) + eps) · γ, or LayerNorm (x − mean) / √(var + eps) · γ + β (docs/scenario-format.md, [norm]).

    Works on the last axis, so a batch of rows of any leading shape normalises too."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        mean = policy.table(row_mean(X) if kind == "layer" else np.zeros(X.shape[:-1]))  # (n,)
        centred = policy.worked(X - mean[..., None])  # (n, d_model)
        spread = policy.table(policy.mean_square(centred))  # (n,) mean of squares, or the variance
        exact_root: Matrix = np.sqrt(spread + eps)  # (n,)
        root = policy.worked(exact_root)
        root = np.where(root == 0, exact_root, root)  # never divide by a rounded 0
        raw = centred / root[..., None] * gamma  # (n, d_model)
        if beta is not None:
            raw = raw + beta
        X_norm = policy.table(policy.worked(raw))  # by hand: each cell worked, then copied into the table
    return Normed(X_norm, mean, spread, policy.table(root), raw)
