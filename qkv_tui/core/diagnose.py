"""A learner's numbers held against the right ones, stage by stage, and the known mistake that explains them.

``compare`` finds the first cell that differs, in the app's order (every stage of head 1, then of head 2,
row-major inside a stage, then the output). ``diagnose`` recomputes the attention with each known mistake
applied exactly — the right computation with that one thing done wrong — and names every mistake whose
numbers the learner's reproduce at the tolerance; where none alone does, every pair. A mistake that
changes nothing here (no scale when d_k = 1, a mask mistake without a mask) is never named: it cannot be
told from the right answer. Pure NumPy: the command line and the app both read what it returns.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import numpy.typing as npt

from qkv_tui.core import part_questions as ask
from qkv_tui.core import variants as registry
from qkv_tui.core.scenario import Head, Scenario
from qkv_tui.core.tolerances import ATOL, RTOL
from qkv_tui.kernels.softmax import from_logsumexp, softmax_rows

Matrix = npt.NDArray[np.float64]
BoolMatrix = npt.NDArray[np.bool_]

MASKED_AT_MOST = -1e4  # a learner's masked score may hold −1e9, finfo.min or −∞: all count as masked

# the names the JSON report and the docs use, in the order the report lists them: the mistakes in a table's step on
# Q and K (its faces') after head_order
MISTAKES = ("no_scale", "scale_d_model", "scale_d_k", "softmax_axis", "mask_after_softmax", "mask_fill_zero",
            "causal_off_by_one", "k_not_transposed", "head_order",
            *(name for t in registry.TABLES if t.faces is not None for name in t.faces.mistakes),
            "weight_transposed", "k_v_swapped", "softmax_overflow")
STAGE_NAMES = {"scores": "Score", "scaled": "Scale", "weights": "Softmax", "mix": "Mix",
               "dV": "dMix", "dP": "dMix", "dS": "dSoftmax", "dQ": "dScore", "dK": "dScore"}
GRADIENTS = ("dV", "dP", "dS", "dQ", "dK")  # in the app's order: dMix, dSoftmax, dScore
_EXCLUSIVE = ({"no_scale", "scale_d_model", "scale_d_k"}, {"mask_after_softmax", "mask_fill_zero"})


@dataclass(frozen=True)
class Problem:
    """The right computation's inputs, in x·W form: what every mistake is applied to."""

    X: Matrix  # (n, d_model)
    X_kv: Matrix  # (m, d_in)
    W_Q: Matrix  # (d_model, H·d_k): head h's columns h·d_k … (h+1)·d_k − 1
    W_K: Matrix
    W_V: Matrix  # (d_in, H·d_v)
    W_O: Matrix | None  # (H·d_v, d_out)
    heads: int
    allow: BoolMatrix  # (n, m)
    scale: float | None  # the divisor the scenario sets; None: √d_k
    # the tables' steps on each head's Q and K before the scores (a rotation by position), in the format's order:
    # ``compared_step(M, mistakes)`` with the mistakes of its own among them, which it names (``compared_mistakes``)
    qk_steps: tuple[Any, ...] = ()
    direct: bool = False  # Q, K, V given: the projections are selectors, not a learner's weights
    per_head_weights: bool = False  # the learner's weights had a head axis: a transposed weight is per head
    dtype: str = "float64"  # the learner's: where a softmax without the max subtraction overflows

    @property
    def d_k(self) -> int:
        return int(self.W_Q.shape[1]) // self.heads

    @property
    def d_v(self) -> int:
        return int(self.W_V.shape[1]) // self.heads

    @property
    def causal(self) -> bool:
        n, m = self.allow.shape
        return n == m and n > 1 and bool(np.array_equal(self.allow, np.tril(np.ones((n, n), dtype=bool))))


@dataclass
class Stages:
    """One computation's numbers: (H, n, m) scores, scaled, weights; (H, n, d_v) mix; (n, d_out) final."""

    scores: Matrix
    scaled: Matrix
    weights: Matrix
    mix: Matrix
    final: Matrix
    allow: BoolMatrix  # the mask this computation used (a mistake may move it)
    fill_zero: bool = False
    grads: dict[str, Matrix] = field(default_factory=dict)  # dV, dP, dS, dQ, dK with a head axis, where computed

    def get(self, key: str) -> Matrix:
        if key in GRADIENTS:
            return self.grads[key]
        return self.final if key == "final" else getattr(self, key)


# --- the computation, right or with mistakes ---------------------------------------------------


def variants(p: Problem) -> list[str]:
    """Every single mistake that can be applied to this problem (a name, ``:`` and where, for the
    mistakes that can sit in more than one place)."""
    out = ["no_scale", "scale_d_k", "softmax_axis", "softmax_overflow"]
    d_model = p.X.shape[1]
    if not p.direct and d_model != p.d_k:
        out.append("scale_d_model")
    if not p.allow.all():
        out += ["mask_after_softmax", "mask_fill_zero"]
    if p.causal:
        out.append("causal_off_by_one")
    if p.d_k == p.allow.shape[1]:
        out.append("k_not_transposed")
    if p.heads > 1:
        out += (["head_order:merge"] if p.direct else ["head_order:both", "head_order:split", "head_order:merge"])
    for step in p.qk_steps:
        out += step.compared_mistakes
    if not p.direct:
        square = [name for name in ("W_Q", "W_K", "W_V", "W_O")
                  if getattr(p, name) is not None and _transposable(p, getattr(p, name))]
        out += [f"weight_transposed:{name}" for name in square]
        # a learner who writes x @ W for one weight usually writes it for every one
        if {"W_Q", "W_K", "W_V"} <= set(square):
            out.append("weight_transposed:W_Q,W_K,W_V")
            if "W_O" in square:
                out.append("weight_transposed:W_Q,W_K,W_V,W_O")
    if p.d_k == p.d_v:
        out.append("k_v_swapped")
    return out


def _transposable(p: Problem, w: Matrix) -> bool:
    if p.per_head_weights and w is not p.W_O:
        return all(block.shape[0] == block.shape[1] for block in _head_blocks(w, p.heads))
    return bool(w.shape[0] == w.shape[1])


def _head_blocks(w: Matrix, heads: int) -> list[Matrix]:
    width = w.shape[1] // heads
    return [w[:, h * width:(h + 1) * width] for h in range(heads)]


def name_of(variant: str) -> str:
    return variant.split(":")[0]


def forward(p: Problem, mistakes: frozenset[str] = frozenset(), only_head: int | None = None) -> Stages:
    """The attention of ``p`` with ``mistakes`` (variants) applied; raises ValueError where shapes refuse one.
    A mistake may overflow (that is how softmax_overflow shows) or divide 0 by 0: its numbers are what they
    are, never an error, whatever the caller's arithmetic rule."""
    with np.errstate(all="ignore"):
        return _forward(p, mistakes, only_head)


def _forward(p: Problem, mistakes: frozenset[str], only_head: int | None) -> Stages:
    """With ``only_head``, that head's stages alone (a head axis of 1) and no final output: a quick first
    test of a mistake on a model-sized problem, where most candidates already differ in head 1."""
    W: dict[str, Matrix | None] = {"W_Q": p.W_Q, "W_K": p.W_K, "W_V": p.W_V, "W_O": p.W_O}
    transposed = {name for v in mistakes if v.startswith("weight_transposed:") for name in v.split(":")[1].split(",")}
    for name in ("W_Q", "W_K", "W_V", "W_O"):
        if name in transposed:
            w = W[name]
            assert w is not None
            if p.per_head_weights and name != "W_O":
                W[name] = np.concatenate([b.T for b in _head_blocks(w, p.heads)], axis=1)
            else:
                W[name] = w.T
    H, d_k = p.heads, p.d_k
    split_wrong = bool({"head_order:both", "head_order:split"} & mistakes)
    merge_wrong = bool({"head_order:both", "head_order:merge"} & mistakes)
    W_Q, W_K, W_V = W["W_Q"], W["W_K"], W["W_V"]
    assert W_Q is not None and W_K is not None and W_V is not None
    Q_all, K_all, V_all = p.X @ W_Q, p.X_kv @ W_K, p.X_kv @ W_V
    if "k_v_swapped" in mistakes:
        K_all, V_all = V_all, K_all
    allow = p.allow
    if "causal_off_by_one" in mistakes:
        allow = np.tril(np.ones(allow.shape, dtype=bool), 1)
    scores, scaled, weights, mix = [], [], [], []
    for h in range(H) if only_head is None else (only_head,):
        Q, K, V = (_split(M, H, h, split_wrong) for M in (Q_all, K_all, V_all))
        for step in p.qk_steps:
            Q, K = step.compared_step(Q, mistakes), step.compared_step(K, mistakes)
        if "k_not_transposed" in mistakes:
            if K.shape[0] != K.shape[1] or Q.shape[1] != K.shape[0]:
                raise ValueError("K is not square")
            S = Q @ K
        else:
            S = Q @ K.T
        divisor = p.scale if p.scale is not None else math.sqrt(d_k)
        if "no_scale" in mistakes:
            divisor = 1.0
        elif "scale_d_k" in mistakes:
            divisor = float(d_k)
        elif "scale_d_model" in mistakes:
            divisor = math.sqrt(p.X.shape[1])
        T = S / divisor
        A = _softmax(T, allow, mistakes, p.dtype)
        scores.append(S)
        scaled.append(T)
        weights.append(A)
        mix.append(A @ V)
    heads_out = np.stack(mix)
    if only_head is not None:
        return Stages(np.stack(scores), np.stack(scaled), np.stack(weights), heads_out, np.zeros((0, 0)), allow,
                      "mask_fill_zero" in mistakes)
    # merged wrongly, (d h): column j·H + h holds head h's column j
    concat = np.stack(mix, axis=-1).reshape(p.X.shape[0], -1) if merge_wrong else np.concatenate(mix, axis=1)
    final = concat if W["W_O"] is None else concat @ W["W_O"]
    return Stages(np.stack(scores), np.stack(scaled), np.stack(weights), heads_out, final, allow,
                  "mask_fill_zero" in mistakes)


def _split(M: Matrix, heads: int, h: int, wrong: bool) -> Matrix:
    width = M.shape[1] // heads
    if wrong:  # (d h): head h takes every heads-th column from h
        return M[:, h::heads]
    return M[:, h * width:(h + 1) * width]


def _softmax(T: Matrix, allow: BoolMatrix, mistakes: frozenset[str], dtype: str) -> Matrix:
    axis = -2 if "softmax_axis" in mistakes else -1
    if "mask_after_softmax" in mistakes:
        masked = T
    elif "mask_fill_zero" in mistakes:
        masked = np.where(allow, T, 0.0)
    else:
        masked = np.where(allow, T, -np.inf)
    if "softmax_overflow" in mistakes:  # e^s straight away, in the learner's own precision: e^s / Σ e^s
        e = from_logsumexp(masked.astype(dtype), 0.0)
        A = (e / e.sum(axis=axis, keepdims=True)).astype(np.float64)
    elif axis == -1:
        A = softmax_rows(masked).weights
    else:  # over the queries: the rows of the transpose
        A = softmax_rows(masked.T).weights.T
    if "mask_after_softmax" in mistakes:
        A = np.where(allow, A, 0.0)
    return np.asarray(A, dtype=np.float64)


# --- comparing ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    stage: str  # as the stage bar names it
    head: int  # 0-based
    row: int
    col: int
    yours: float
    correct: float
    key: str = ""  # which array: scores, scaled, weights, mix, final, dV, dP, dS, dQ, dK


@dataclass
class Report:
    agree: bool
    first: Cell | None
    diagnosis: list[str]
    stages: list[tuple[str, int, bool]] = field(default_factory=list)  # (stage, head, agrees), in the app's order
    note: str = ""  # why no diagnosis was tried, where one was not

    def as_json(self) -> dict[str, object]:
        first = None if self.first is None else {
            "stage": self.first.stage, "head": self.first.head, "row": self.first.row, "col": self.first.col,
            "yours": _number(self.first.yours), "correct": _number(self.first.correct),
            "array": {"mix": "output", "final": "output"}.get(self.first.key, self.first.key)}
        out: dict[str, object] = {"agree": self.agree, "first": first, "diagnosis": list(self.diagnosis),
                                  "stages": [{"stage": s, "head": h, "agree": a} for s, h, a in self.stages]}
        if self.note:
            out["note"] = self.note
        return out


def _number(x: float) -> float | str | None:
    if math.isnan(x):
        return "nan"  # JSON has no NaN; the learner's NaN is the most useful thing to report
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def close(yours: Matrix, correct: Matrix, rtol: float = RTOL, atol: float = ATOL, *,
          allow: BoolMatrix | None = None, fill_zero: bool = False, nan_equal: bool = False) -> npt.NDArray[np.bool_]:
    """Cell by cell: within atol + rtol·|correct|. With ``allow`` (scores and scaled), a cell the mask
    forbids also agrees when it holds −∞ or anything ≤ −1e4 (0 too where the mask fills with 0)."""
    with np.errstate(invalid="ignore", over="ignore"):
        ok = np.abs(yours - correct) <= atol + rtol * np.abs(correct)
        ok |= (yours == correct) & np.isinf(correct)
        if nan_equal:
            ok |= np.isnan(yours) & np.isnan(correct)
        if allow is not None:
            blocked = ~np.broadcast_to(allow, yours.shape)
            lenient = (yours <= MASKED_AT_MOST) | (fill_zero & (yours == 0))
            ok |= blocked & lenient
    return np.asarray(ok & ~(np.isnan(yours) & ~(nan_equal & np.isnan(correct))))


def _order(given: Mapping[str, Matrix], heads: int) -> Iterator[tuple[str, int]]:
    for h in range(heads):
        for key in ("scores", "scaled", "weights", "mix"):
            if key in given:
                yield key, h
    if "final" in given:
        yield "final", 0
    for h in range(heads):
        for key in GRADIENTS:
            if key in given:
                yield key, h


def matches(given: Mapping[str, Matrix], stages: Stages, rtol: float, atol: float, *, nan_equal: bool) -> bool:
    for key, arr in given.items():
        want = stages.get(key)
        if arr.shape != want.shape:
            return False
        masked = key in ("scores", "scaled")
        if not close(arr, want, rtol, atol, allow=stages.allow if masked else None, fill_zero=stages.fill_zero,
                     nan_equal=nan_equal).all():
            return False
    return True


def compare(given: Mapping[str, Matrix], correct: Stages, heads: int, final_name: str,
            rtol: float = RTOL, atol: float = ATOL) -> Report:
    """The learner's arrays (keys scores, scaled, weights, mix with a head axis; final) against ``correct``."""
    first = None
    agreed: dict[tuple[str, int], bool] = {}  # dMix holds dV and dP, dScore dQ and dK: one entry each
    for key, h in _order(given, heads):
        yours = given[key] if key == "final" else given[key][h]
        right = correct.final if key == "final" else correct.get(key)[h]
        ok = close(yours, right, rtol, atol, allow=correct.allow if key in ("scores", "scaled") else None)
        name = final_name if key == "final" else STAGE_NAMES[key]
        agreed[name, h] = agreed.get((name, h), True) and bool(ok.all())
        if first is None and not ok.all():
            r, c = (int(i) for i in np.argwhere(~ok)[0])
            first = Cell(name, h, r, c, float(yours[r, c]), float(right[r, c]), key)
    stages = [(name, h, ok) for (name, h), ok in agreed.items()]
    return Report(first is None, first, [], stages)


def diagnose(p: Problem, given: Mapping[str, Matrix], rtol: float = RTOL, atol: float = ATOL) -> list[str]:
    """The mistakes (names, MISTAKES' order) whose exact computation the learner's numbers reproduce;
    single mistakes first, then pairs where no single one does; [] when nothing matched."""
    given = {k: v for k, v in given.items() if k not in GRADIENTS}  # the mistakes are tried on the forward pass
    right = forward(p)
    found = _search(p, given, right, [frozenset({v}) for v in variants(p)], rtol, atol)
    if not found:
        pairs = [frozenset(pair) for pair in itertools.combinations(variants(p), 2) if _compatible(*pair)]
        found = _search(p, given, right, pairs, rtol, atol)
    names = {name_of(v) for combo in found for v in combo}
    return [name for name in MISTAKES if name in names]


def _compatible(a: str, b: str) -> bool:
    na, nb = name_of(a), name_of(b)
    if na == nb and na != "weight_transposed":
        return False
    return not any(na in group and nb in group for group in _EXCLUSIVE)


def _search(p: Problem, given: Mapping[str, Matrix], right: Stages, combos: list[frozenset[str]],
            rtol: float, atol: float) -> list[frozenset[str]]:
    head_one = {k: v[:1] for k, v in given.items() if k != "final"}
    found = []
    for combo in combos:
        try:
            if head_one and p.heads > 1 and not matches(head_one, forward(p, combo, only_head=0), rtol, atol,
                                                        nan_equal=True):
                continue  # already wrong in head 1: the other heads need not be computed
            stages = forward(p, combo)
        except ValueError:
            continue
        if not matches(given, stages, rtol, atol, nan_equal=True):
            continue
        if matches({k: stages.get(k) for k in given}, right, rtol, atol, nan_equal=False):
            continue  # the same numbers as the right computation here: nothing to tell apart
        found.append(combo)
    return found


# --- from a scenario -----------------------------------------------------------------------


def refused(sc: Scenario) -> str | None:
    """The line that says why a learner's numbers are not held against this scenario's: a part it holds (a table
    registered with its faces) whose faces do not say how --compare models it; None where every part is modelled.
    What is compared is one map per head (scores, scaled, weights, output): a part that makes the map otherwise
    (differential attention's two maps, a state space model's L ∘ C·Bᵀ) would be compared with the wrong numbers."""
    from qkv_tui.core import variants

    faces = {t.key: t.faces for t in variants.TABLES if t.faces is not None}
    for key in sc.parts:
        said = faces.get(key)
        if said is not None and said.compared is None:
            modelled = ", ".join(f"[{k}] ({f.compared})" for k, f in faces.items() if f.compared is not None)
            return (f"--compare does not model [{key}]: it holds your scores, scaled, weights and output against one"
                    f" softmax map per head, for plain heads and with {modelled}; use --export json for [{key}]'s"
                    " own numbers")
    return None


def problem_of(sc: Scenario, *, direct: bool = False, per_head_weights: bool = False,
               dtype: str = "float64", allow: BoolMatrix | None = None) -> Problem | str:
    """The scenario as a Problem, or why its mistakes are not tried (a part the list of mistakes is not about).
    ``allow``: the mask the heads attend with where a part narrows the scenario's (the indexer's selection: the
    mistakes are then tried with it as the mask, as the heads of the layer attend)."""
    # the scenario's tables and a head's keys say what they make other than plain (``not_plain``)
    parts = [str(label) for table in ask.tables(sc) if (label := getattr(table, "not_plain", None)) is not None]
    parts += [name for name, present in (("b_O", sc.b_O is not None), ("shared K/V heads", sc.num_kv_heads is not None))
              if present]
    # and a table's setting the mistakes are not tried with (``not_compared``)
    parts += [str(label) for table in ask.tables(sc) if (label := getattr(table, "not_compared", None)) is not None]
    said = [(f.name, f.metadata["not_plain"]) for f in fields(Head) if "not_plain" in f.metadata]
    for head in sc.heads:
        for attr, label in said:
            if getattr(head, attr) is not None and label not in parts:
                parts.append(label)
    if len({(h.d_k, h.d_v) for h in sc.heads}) != 1:
        parts.append("heads of different widths")
    if parts:
        return f"the mistakes are tried on plain attention; this scenario has {', '.join(parts)}"
    steps = tuple(table for table in ask.tables(sc) if callable(getattr(table, "compared_step", None)))
    wide = {name: np.concatenate([getattr(h, name) for h in sc.heads], axis=1) for name in ("W_Q", "W_K", "W_V")}
    return Problem(sc.X, sc.X_kv, wide["W_Q"], wide["W_K"], wide["W_V"], sc.W_O, len(sc.heads),
                   sc.allow if allow is None else allow,
                   sc.scale, steps, direct, per_head_weights, dtype)
