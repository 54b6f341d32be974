"""Differential attention by hand (kernels/differential.py under policy.ByHand) against a rounded loop written here.

The loop is a person with a pencil: every product, sum, quotient and exponential written down rounded with
Python's correctly rounded ``round`` (as tests/test_one_forward.py's Keep). Each of the kernel's tables is checked
against the loop worked from the kernel's own kept operands: it is written at the page's decimals, and within one
unit of the last place of the loop's number (the check is local, so a digit that flips at a tie
moves one unit of the last place and not the rest of the page): the projections, the turned halves, both maps'
scores, scaled scores and softmax rows, the dot products and exponentials of λ, λ·p₂ and the map, map·V, the
sub-norm's mean square, root and rows, (1 − λ_init) and the output.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv_tui.kernels.attention import Turn
from qkv_tui.kernels.differential import DiffHead, diff_forward
from qkv_tui.kernels.differential_backward import diff_backward
from qkv_tui.kernels.policy import ByHand, PrintedPage
from qkv_tui.kernels.rope import RopeSpec, angles, pairs


def _each_half(turn: Turn | None, W_Q: np.ndarray) -> tuple[RopeSpec, ...]:
    """RoPE's part turning each half of a head (width d = W_Q's columns / 2) on its own, as the head's pass runs it."""
    return () if turn is None else (RopeSpec(turn, W_Q.shape[1] // 2),)



def _within(kept: object, loop: object, d: int, zero_kept_exact: bool = False) -> None:
    """Written down at d decimals, and within one unit of the last place of the loop's number; with
    ``zero_kept_exact`` a number that rounds to 0 is kept as it is (a root is never divided by as a rounded 0)."""
    x, y = np.asarray(kept, dtype=float), np.asarray(loop, dtype=float)
    assert x.shape == y.shape
    assert np.array_equal(np.isfinite(x), np.isfinite(y)), (x, y)
    ok = np.isfinite(y)
    assert all(round(v, d) == v or (zero_kept_exact and round(v, d) == 0) for v in x[ok].tolist()), (x, d)
    assert np.all(np.abs(x[ok] - y[ok]) <= 1.000001 * 10.0**-d), (x, y)


def _first_digit(x: float) -> int:
    """The places at which x's first two significant digits are written: 0.00015 → 5."""
    return 1 - math.floor(math.log10(abs(x)))


def _within_places(kept: object, loop: object, d: int) -> None:
    """As _within, where a statistic below 0.1 keeps two significant digits at least."""
    x, y = np.asarray(kept, dtype=float), np.asarray(loop, dtype=float)
    assert x.shape == y.shape
    for v, w in zip(x.tolist(), y.tolist(), strict=True):
        q = d if not 0 < abs(w) < 0.1 else max(d, _first_digit(w))
        assert round(v, q) == v and abs(v - w) <= 1.000001 * 10.0**-q, (x, y, d)


class Pencil:
    def __init__(self, d: int) -> None:
        self.d = d

    def k(self, x: float) -> float:
        return round(x, self.d) if math.isfinite(x) else x

    def dot(self, a, b) -> float:
        total = 0.0
        for x, y in zip(a, b, strict=True):
            total += self.k(float(x) * float(y))
        return self.k(total)

    def matmul(self, A, B) -> list[list[float]]:
        return [[self.dot(row, [B[r][c] for r in range(len(B))]) for c in range(len(B[0]))] for row in A]

    def turn(self, M, cos, sin, turned) -> list[list[float]]:
        out = [list(map(float, row)) for row in M]
        for r, row in enumerate(M):
            for i, (a, b) in enumerate(turned):
                c, s = self.k(float(cos[r][i])), self.k(float(sin[r][i]))
                out[r][a] = self.k(self.k(row[a] * c) - self.k(row[b] * s))
                out[r][b] = self.k(self.k(row[a] * s) + self.k(row[b] * c))
        return out

    def exps(self, masked) -> tuple[list[float], list[list[float]]]:
        """Each row's max, and e^ of each logit less it (the row sum and the weights are checked from the kept ones)."""
        row_max, exps = [], []
        for row in masked:
            top = max(row)
            row_max.append(top)
            exps.append([0.0 if x == -math.inf else self.k(self.k(math.exp(self.k(x - top)))) for x in row])
        return row_max, exps


@st.composite
def cases(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n, half, d_model = draw(st.integers(1, 4)), draw(st.sampled_from([1, 2, 4])), draw(st.integers(1, 3))
    dec = draw(st.integers(2, 4))
    r = lambda *shape: np.round(rng.normal(size=shape), 2)  # the numbers a worked example starts from
    allow = np.tril(np.ones((n, n), dtype=bool)) if draw(st.booleans()) else np.ones((n, n), dtype=bool)
    head = DiffHead(*(np.round(rng.normal(scale=0.4, size=half), 2) for _ in range(4)),
                    lambda_init=float(draw(st.sampled_from([0.2, 0.35550, 0.8]))), eps=1e-5,
                    gamma=r(2 * half) if draw(st.booleans()) else None)
    turn = None
    if half % 2 == 0 and draw(st.booleans()):
        a = angles(10000.0, half, range(n))
        turn = Turn(np.cos(a), np.sin(a), pairs("half", half))
    bias = (r(2 * half), r(2 * half), r(2 * half)) if draw(st.booleans()) else (None, None, None)
    return dec, r(n, d_model), [r(d_model, 2 * half) for _ in range(3)], bias, allow, head, turn


@settings(max_examples=30, deadline=None)  # the quick tier: each test about a second on the shared machine
@given(cases())
def test_every_table_is_worked_from_its_rounded_operands(case) -> None:
    dec, X, (W_Q, W_K, W_V), (b_Q, b_K, b_V), allow, head, turn = case
    f = diff_forward(X, X, W_Q, W_K, W_V, b_Q, b_K, b_V, allow, head, parts=_each_half(turn, W_Q), policy=ByHand(dec))
    p = Pencil(dec)
    for M, W, b in ((f.Q, W_Q, b_Q), (f.K, W_K, b_K), (f.V, W_V, b_V)):
        loop = p.matmul(X, W)
        if b is not None:
            loop = [[p.k(x + float(b[c])) for c, x in enumerate(row)] for row in loop]
        _within(M, loop, dec)
    d = f.d
    if turn is not None:
        assert f.moved
        for turned, raw in ((f.Q_used, f.Q), (f.K_used, f.K)):
            for cols in (slice(0, d), slice(d, 2 * d)):
                _within(turned[:, cols], p.turn(raw[:, cols], turn.cos, turn.sin, turn.pairs), dec)
    divisor = p.k(math.sqrt(d))
    assert f.divisor == divisor
    for half, mp in ((1, f.map_1), (2, f.map_2)):
        Q_used, K_used = f.used(half)
        _within(mp.scores, p.matmul(Q_used, K_used.T), dec)
        _within(mp.scaled, [[p.k(float(s) / divisor) for s in row] for row in mp.scores], dec)
        _within(mp.masked, np.where(allow, mp.scaled, -np.inf), dec)
        row_max, exps = p.exps(mp.masked.tolist())
        _within(mp.softmax.row_max, row_max, dec)
        _within(mp.softmax.exps, exps, dec)
        _within(mp.softmax.row_sum, [p.k(sum(map(float, row))) for row in mp.softmax.exps], dec)
        _within(mp.softmax.weights, [[p.k(float(e) / float(s)) for e in row]
                                     for row, s in zip(mp.softmax.exps, mp.softmax.row_sum, strict=True)], dec)
    lam = f.lam
    _within(lam.dot_1, p.dot(head.lambda_q1, head.lambda_k1), dec)
    _within(lam.dot_2, p.dot(head.lambda_q2, head.lambda_k2), dec)
    _within(lam.lambda_1, p.k(math.exp(lam.dot_1)), dec)
    _within(lam.lambda_2, p.k(math.exp(lam.dot_2)), dec)
    assert lam.lambda_init == p.k(head.lambda_init)
    _within(lam.value, p.k(lam.lambda_1 - lam.lambda_2 + lam.lambda_init), dec)
    P1, P2 = f.map_1.weights, f.map_2.weights
    _within(f.lam_p2, [[p.k(lam.value * float(x)) for x in row] for row in P2], dec)
    _within(f.weights, [[p.k(float(a) - float(b)) for a, b in zip(r1, r2, strict=True)]
                        for r1, r2 in zip(P1, f.lam_p2, strict=True)], dec)
    _within(f.mixed, p.matmul(f.weights, f.V), dec)
    gamma = [1.0] * (2 * d) if head.gamma is None else list(map(float, head.gamma))
    # a statistic below 0.1 keeps two significant digits at least
    spread = []
    for row in f.mixed:
        exact = sum(float(x) * float(x) for x in row) / (2 * d)
        q = dec if not 0 < exact < 0.1 else max(dec, _first_digit(exact))
        spread.append(round(sum(round(float(x) * float(x), q) for x in row) / (2 * d), q))
    _within_places(f.norm.spread, spread, dec)
    root = [round(r, dec if r >= 0.1 else max(dec, _first_digit(r)))
            for r in (math.sqrt(float(s) + head.eps) for s in f.norm.spread)]
    _within_places(f.norm.root, root, dec)
    _within(f.normed, [[p.k(p.k(float(x) / float(rt) * g)) for x, g in zip(row, gamma, strict=True)]
                       for row, rt in zip(f.mixed, f.norm.root, strict=True)], dec)
    assert f.factor == p.k(1.0 - lam.lambda_init)
    _within(f.output, [[p.k(f.factor * float(x)) for x in row] for row in f.normed], dec)


@settings(max_examples=25, deadline=None)
@given(cases())
def test_backward_by_hand_is_worked_from_its_rounded_operands(case) -> None:
    """The backward under the same policy: each table from the kernel's own kept operands, as the loop works it
    (the sub-norm's own rows are kernels/norm_backward.py's, checked with the other norms)."""
    dec, X, (W_Q, W_K, W_V), (b_Q, b_K, b_V), allow, head, turn = case
    policy = ByHand(dec)
    f = diff_forward(X, X, W_Q, W_K, W_V, b_Q, b_K, b_V, allow, head, parts=_each_half(turn, W_Q), policy=policy)
    dY = np.round(np.random.default_rng(int(abs(X).sum() * 100)).normal(size=f.output.shape), 2)
    b = diff_backward(dY, X, X, W_Q, W_K, W_V, f, head, allow, biases=(b_Q is not None,) * 3, policy=policy)
    p = Pencil(dec)
    _within(b.d_normed, [[p.k(f.factor * float(x)) for x in row] for row in dY], dec)
    _within(b.dweights, p.matmul(b.dmixed, f.V.T), dec)
    _within(b.dV, p.matmul(f.weights.T, b.dmixed), dec)
    _within(-b.dlambda, p.dot(b.dweights.reshape(-1), f.map_2.weights.reshape(-1)), dec)
    _within(b.map_2.dP, [[p.k(-f.lam.value * float(x)) for x in row] for row in b.dweights], dec)
    for half, mp, mb in ((1, f.map_1, b.map_1), (2, f.map_2, b.map_2)):
        Q_used, K_used = f.used(half)
        _within(mb.D, [p.dot(P, dP) for P, dP in zip(mp.weights, mb.dP, strict=True)], dec)
        _within(mb.dS, [[p.k(float(P) * (float(dP) - float(D))) if ok else 0.0
                         for P, dP, ok in zip(Pr, dPr, okr, strict=True)]
                        for Pr, dPr, D, okr in zip(mp.weights, mb.dP, mb.D, allow, strict=True)], dec)
        _within(mb.dscores, [[p.k(float(s) / f.divisor) for s in row] for row in mb.dscaled], dec)
        _within(mb.dQ_used, p.matmul(mb.dscores, K_used), dec)
        _within(mb.dK_used, p.matmul(mb.dscores.T, Q_used), dec)
    lam = f.lam
    _within(b.ddot_1, p.k(b.dlambda * lam.lambda_1), dec)
    _within(b.ddot_2, p.k(-b.dlambda * lam.lambda_2), dec)
    g1, g2 = b.ddot_1, b.ddot_2
    _within(b.dlambda_q1, [p.k(g1 * float(x)) for x in head.lambda_k1], dec)
    _within(b.dlambda_k1, [p.k(g1 * float(x)) for x in head.lambda_q1], dec)
    _within(b.dlambda_q2, [p.k(g2 * float(x)) for x in head.lambda_k2], dec)
    _within(b.dlambda_k2, [p.k(g2 * float(x)) for x in head.lambda_q2], dec)
    if turn is not None:
        assert b.dQ_rot is not None
        back = (-turn.sin).tolist()
        for cols in (slice(0, f.d), slice(f.d, 2 * f.d)):
            _within(b.dQ[:, cols], p.turn(b.dQ_rot[:, cols], turn.cos, back, turn.pairs), dec)
    _within(b.dW_Q, p.matmul(X.T, b.dQ), dec)
    _within(b.dW_V, p.matmul(X.T, b.dV), dec)
    if b_Q is not None:
        assert b.db_K is not None
        _within(b.db_K, [p.k(sum(map(float, col))) for col in b.dK.T], dec)
    _within(b.dX_q, p.matmul(b.dQ, W_Q.T), dec)


@settings(max_examples=40, deadline=None)
@given(cases())
def test_printed_page_rounds_each_table_once_from_its_printed_operands(case) -> None:
    """A worksheet's page (policy.PrintedPage): λ's numbers, the map, map·V and the output are each the exact
    result of the numbers printed before them, rounded once; nothing inside one operation is rounded."""
    dec, X, (W_Q, W_K, W_V), (b_Q, b_K, b_V), allow, head, turn = case
    f = diff_forward(X, X, W_Q, W_K, W_V, b_Q, b_K, b_V, allow, head, parts=_each_half(turn, W_Q), policy=PrintedPage(dec))
    once = lambda x: np.vectorize(lambda v: round(float(v), dec))(x)
    lam = f.lam
    _within(lam.dot_1, once(head.lambda_q1 @ head.lambda_k1), dec)
    _within(lam.lambda_1, once(math.exp(lam.dot_1)), dec)
    _within(lam.lambda_2, once(math.exp(lam.dot_2)), dec)
    _within(lam.value, once(lam.lambda_1 - lam.lambda_2 + lam.lambda_init), dec)
    np.testing.assert_array_equal(f.lam_p2, np.where(allow, lam.value * f.map_2.weights, 0.0))  # not rounded: inside
    _within(f.weights, once(f.map_1.weights - lam.value * f.map_2.weights), dec)
    _within(f.mixed, once(f.weights @ f.V), dec)
    _within(f.output, once(f.factor * f.normed), dec)
