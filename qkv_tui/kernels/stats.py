"""Each row's mean and mean of squares, safe where float64's sums and squares overflow though the statistic does not.

The norm and the by-hand policy both read these, so they sit below both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

Matrix = np.ndarray[tuple[Any, ...], np.dtype[np.float64]]  # npt.NDArray[np.float64], without numpy.typing at run time


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
