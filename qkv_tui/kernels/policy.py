"""How numbers are kept between operations: exactly, by hand, or as a printed page prints them.

The forward pass (attention.py, norm.py, rope.py, softmax.py) is written once and asks its policy at
each site where a number is written down. Two kinds of site exist: ``worked`` (a number written down
inside one operation, such as a product of a dot product, a shifted logit or a cos) and ``table`` (a
result the reader sees as a matrix of its own, such as Q, scores or weights).
"""

from __future__ import annotations

import numpy as np

from qkv_tui.kernels.stats import Matrix, mean_square

CHUNK = 2_000_000  # products held at once by hand_matmul (16 MB of float64)
WHOLE = 2.0 ** 52  # from here on every float is a whole number: rounding to decimals >= 0 leaves it as it is


def round_to(x: Matrix, decimals: int) -> Matrix:
    """``x`` rounded to ``decimals`` as its printed text reads (``1.85`` → 1.9, as ``f"{1.85:.1f}"``).

    ``np.round`` scales by 10^decimals in binary first: near a tie it can round the other way
    from the correctly rounded text a student writes (1.85 → 1.8), and 1e306 at 3 decimals
    overflows to inf. The few entries near a tie take Python's correctly rounded ``round``;
    values from 2^52 on are whole numbers already and are kept as they are.
    """
    x = np.asarray(x, dtype=float)
    small = np.abs(x) < WHOLE  # False for inf and NaN too: kept as they are
    safe = np.where(small, x, 0.0)
    out = np.where(small, np.round(safe, decimals), x)
    scaled = np.abs(safe) * 10.0**decimals
    near_tie = small & (np.abs(scaled - np.floor(scaled) - 0.5) < 1e-6)
    if near_tie.any():
        flat, values = out.reshape(-1), x.reshape(-1)
        for i in np.flatnonzero(near_tie):
            flat[i] = round(float(values[i]), decimals)
        out = flat.reshape(x.shape)
    return out


def statistic_places(x: Matrix, decimals: int) -> Matrix:
    """Each entry's places as a norm's statistic (a mean square, a variance, a root) is written down by hand:
    ``decimals``, but never fewer than keep two significant digits of one below 0.1. A mean square of 0.0002 at
    three decimals would read 0.000, and x / √(0 + eps) makes a normalised cell five times too large; a root of
    0.0145 at two decimals would read 0.01, a divisor half again too small. Never past 15 places."""
    a = np.abs(np.asarray(x, dtype=float))
    small = (a > 0) & (a < 0.1)
    with np.errstate(divide="ignore", invalid="ignore"):
        magnitude = np.floor(np.log10(np.where(small, a, 1.0)))
    places: Matrix = np.where(small, np.minimum(15, np.maximum(decimals, 1 - magnitude)), decimals).astype(int)
    return places


def round_statistic(x: Matrix, decimals: int) -> Matrix:
    """``x`` rounded entry by entry at :func:`statistic_places`."""
    x = np.asarray(x, dtype=float)
    places = statistic_places(x, decimals)
    out = round_to(x, decimals)
    for p in np.unique(places[places != decimals]):
        at = places == p
        out[at] = round_to(x[at], int(p))
    return out


def hand_matmul(a: Matrix, b: Matrix, decimals: int) -> Matrix:
    """a·b with every product rounded, then every sum: (n, k) · (k, m) -> (n, m)."""
    n, k = a.shape
    m = b.shape[1]
    result: Matrix = np.empty((n, m))
    rows = max(1, CHUNK // max(k * m, 1))  # rows per block, so the products stay a few MB at 2048 tokens
    for start in range(0, n, rows):
        products = round_to(a[start:start + rows, :, None] * b[None, :, :], decimals)  # (rows, k, m)
        result[start:start + rows] = round_to(products.sum(axis=1), decimals)
    return result


class Exact:
    """float64 throughout: nothing is rounded anywhere (the engine's numbers)."""

    decimals: int | None = None

    def worked(self, x: Matrix) -> Matrix:
        """A number written down inside one operation, before it is used again."""
        return x

    def table(self, x: Matrix) -> Matrix:
        """A result the reader sees as a matrix of its own."""
        return x

    def matmul(self, a: Matrix, b: Matrix) -> Matrix:
        """a·b: (n, k) · (k, m) -> (n, m)."""
        out: Matrix = a @ b
        return out

    def divisor(self, scale: float) -> float:
        """What the scores are divided by."""
        return scale

    def logits(self, scaled: Matrix, bias: Matrix | None) -> Matrix:
        """The softmax's input before the mask, from the scaled scores and the ALiBi bias (both as kept)."""
        return scaled if bias is None else scaled + bias

    def mean_square(self, centred: Matrix) -> Matrix:
        """Each row's mean of squares, (n,): overflow-safe (see norm.mean_square)."""
        return mean_square(centred)

    def statistic(self, x: Matrix, table: bool) -> Matrix:
        """A norm's row statistic (its mean square or variance: ``table``; its root: not) as it is kept."""
        return self.table(x) if table else self.worked(x)

    def stepped(self, stepped: Matrix) -> Matrix:
        """The scaled scores after a part's step on them (the soft-cap's c·tanh(s/c)), from the scaled scores as
        kept."""
        return stepped


class ByHand(Exact):
    """Pen and paper: every product, sum, quotient and exponential rounded to ``decimals`` before it is reused.

    The numbers drift from the exact ones the way hand-worked examples do (the seed page's
    e^2.887 ≈ 17.940 comes from the rounded 2.887; the exact e^(5/√3) is 17.935).
    """

    def __init__(self, decimals: int) -> None:
        self.decimals = self.places = decimals

    def worked(self, x: Matrix) -> Matrix:
        return round_to(x, self.places)

    def table(self, x: Matrix) -> Matrix:
        return round_to(x, self.places)

    def matmul(self, a: Matrix, b: Matrix) -> Matrix:
        """Each product written down rounded, then each sum (a dot product worked term by term)."""
        return hand_matmul(a, b, self.places)

    def divisor(self, scale: float) -> float:
        """A person divides by the written-down root (√3 ≈ 1.732), never by a rounded 0."""
        return float(round_to(np.array(scale), self.places)) or scale

    def logits(self, scaled: Matrix, bias: Matrix | None) -> Matrix:
        """The scaled scores are already written down as a line of their own; only a sum with the bias is new."""
        return scaled if bias is None else round_to(scaled + bias, self.places)

    def stepped(self, stepped: Matrix) -> Matrix:
        """c·tanh(s/c) is keyed into a calculator as one line and its result written down rounded, as the
        logits are: rounding s/c or its tanh on the way (0.02828 → 0.028) would lose a logit's digits to the
        cap's factor 50 (1.414 → 1.400), an error no hand computation of it makes."""
        return round_to(stepped, self.places)

    def mean_square(self, centred: Matrix) -> Matrix:
        """Each square written down rounded, then their sum over the row's count; a row whose mean square is below
        0.1 keeps the places of its first two significant digits (statistic_places), squares included.

        A square of 1.5e154 is past float64 though the row's mean square is not: such squares are
        whole numbers that rounding leaves as they are, so there the exact mean square is taken,
        the overflow-safe way."""
        exact = mean_square(centred)  # (n,)
        places = statistic_places(exact, self.places)  # (n,)
        with np.errstate(over="ignore"):
            squares = centred * centred
            spread: Matrix = round_to(squares, self.places).sum(axis=1) / centred.shape[1]
            for i in np.flatnonzero(places != self.places):
                spread[i] = round_to(squares[i], int(places[i])).sum() / centred.shape[1]
        return np.where(np.isfinite(spread), spread, exact)

    def statistic(self, x: Matrix, table: bool) -> Matrix:
        """Written down at the hand's places, and with two significant digits at least below 0.1."""
        return round_statistic(x, self.places)


class PrintedPage(Exact):
    """A worksheet's page: each table computed exactly from its operands as printed, then rounded to ``decimals``.

    Nothing inside one operation is rounded (a student with a calculator keys in the printed
    operands), so ``worked`` keeps every digit; only the printed tables lose them. The scale is
    the exact one, and scaled + slope·(j − i) is one printed table, rounded once.
    """

    def __init__(self, decimals: int) -> None:
        self.decimals = self.places = decimals

    def table(self, x: Matrix) -> Matrix:
        return round_to(x, self.places)

    def logits(self, scaled: Matrix, bias: Matrix | None) -> Matrix:
        """The page prints one "scaled" table, scores / scale + slope·(j − i): the sum is rounded, not its terms."""
        return round_to(scaled if bias is None else scaled + bias, self.places)

    def stepped(self, stepped: Matrix) -> Matrix:
        """The page prints the capped table, each cell from the printed scaled one, rounded once."""
        return round_to(stepped, self.places)


Policy = Exact  # a policy is the exact one with some sites overridden: what a forward pass accepts
EXACT = Exact()
