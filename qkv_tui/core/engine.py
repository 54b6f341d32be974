"""Every matrix of softmax(Q Kᵀ / scale + bias) V for a scenario, in plain NumPy.

Follows docs/scenario-format.md, "What is computed", line by line: X is normalised first where the
scenario has a [norm]; per head Q = X W_Q + b_Q, K = X_kv W_K + b_K, V = X_kv W_V + b_V;
[qk_norm] normalises each query and key vector; RoPE rotates Q and K by position;
scores = Q Kᵀ, scaled = scores / scale; the softmax's input is scaled + ALiBi bias with -inf where
the mask forbids; weights = stable row softmax (with an attention sink joining each row's sum),
output = weights V; then concat, W_O + b_O.
Query heads that share a K/V head (grouped-query attention) share its K and V arrays.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from qkv_tui.base.fixed import fixed
from qkv_tui.base.values import escaped
from qkv_tui.core import part_questions as ask
from qkv_tui.core.forward import HeadResult as HeadResult
from qkv_tui.core.forward import run_heads
from qkv_tui.core.part_masks import attended
from qkv_tui.core.scenario import BoolMatrix, Matrix, Scenario, ScenarioError
from qkv_tui.core.variants import Norm, Vector
from qkv_tui.kernels.attention import frozen as _frozen
from qkv_tui.kernels.norm import normalise
from qkv_tui.kernels.policy import EXACT, Policy


@fixed
class NormResult:
    """X normalised row by row, with the per-token statistics the trace shows."""

    X_norm: Matrix  # (n, d_model)
    mean: Matrix  # (n,) mean of the row (layer), or 0 (rms)
    spread: Matrix  # (n,) mean of squares (rms) or population variance (layer)
    root: Matrix  # (n,) √(spread + eps), what each centred cell is divided by


@fixed(repr=True)
class Computation:
    """The whole computation of a scenario (the JSON export is its plain-data form)."""

    scenario: Scenario
    heads: tuple[HeadResult, ...]
    concat: Matrix  # (n, sum d_v)
    W_O: Matrix | None  # (sum d_v, d_out)
    output: Matrix  # (n, d_out) = concat W_O + b_O, or concat
    hand_decimals: int | None = None  # set when every intermediate was rounded (handcalc), else exact
    norm: NormResult | None = None  # set when the scenario has a [norm]
    b_O: Vector | None = None  # (d_out,)

    @property
    def allow(self) -> BoolMatrix:
        """The keys the heads attend: the scenario's mask, narrowed where a part chooses keys (the indexer)."""
        return attended(self.heads, self.scenario.allow)

    @property
    def X_in(self) -> Matrix:
        """What the Query projection reads: X, normalised where the scenario says so."""
        return self.scenario.X if self.norm is None else self.norm.X_norm

    @property
    def X_kv_in(self) -> Matrix:
        """What the Key and Value projections read: the context as given, or X_in."""
        return self.scenario.X_kv if self.scenario.is_cross else self.X_in


def normalize(norm: Norm, X: Matrix, policy: Policy = EXACT) -> NormResult:
    """RMSNorm x / √(mean(x²) + eps) · γ, or LayerNorm (x − mean) / √(var + eps) · γ + β (kernels/norm.py)."""
    done = normalise(policy, norm.kind, X, norm.gamma[None, :], None if norm.beta is None else norm.beta[None, :],
                     norm.eps)
    return NormResult(*(_frozen(a) for a in (done.X_norm, done.mean, done.spread, done.root)))


# --- the one overflow rule ---------------------------------------------------------------------
#
# Every command (--check, each --export, the app, its edits and reloads) gets its numbers from
# norm_of, iter_heads and combine below, so this is the one place that decides what float64 can
# compute: a matrix with an infinite or undefined entry is refused with a line that names it, the
# row where it first happens and what to change. What it lets through is finite everywhere (masked
# cells are −∞ by design, and only there), so every export and every arithmetic line can show it.

class ComputeError(ScenarioError):
    """The rule's refusal, with what went past float64 (``fact``: the matrix and its row) apart from what to
    change (``hint``): a caller that knows more of where the numbers came from (a training step) names the
    input to change in the hint's place."""

    def __init__(self, source: str, fact: str, hint: str) -> None:
        super().__init__(source, f"{fact}; {hint}")
        self.fact, self.hint = escaped(fact), escaped(hint)


_NORM_HINTS = {
    "mean": "expected values whose sum stays within float64 (about ±1.8e308)",
    "mean square": "expected values below about 1.3e154 in size, whose squares float64 can hold",
    "variance": "expected values closer together (their distances from the mean square past float64)",
    "root": "expected a smaller eps (the mean square plus eps is past float64)",
    "X_norm": "expected a smaller gamma or beta",
}
_HEAD_HINTS = {
    "Q": "expected smaller X, W_Q or b_Q", "K": "expected smaller X, W_K or b_K",
    "V": "expected smaller X, W_V or b_V",
    "scores": "expected smaller Q and K, so that every product stays finite",
    "scaled": "expected a larger scale or smaller scores",
    "masked": "expected a smaller ALiBi slope or smaller scaled scores (the softmax reads their sum)",
    "weights": "expected smaller scores",
    "output": "expected smaller V",
}


def first_bad(array: Matrix, where: BoolMatrix | None = None) -> tuple[int, ...] | None:
    """The index of the first entry that is not finite (among ``where``), or None."""
    bad = ~np.isfinite(array)
    if where is not None:
        bad &= where
    if not bad.any():
        return None
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), bad.shape))


def _at(labels: tuple[str, ...], i: int) -> str:
    return f'row {i + 1} ("{labels[i]}")'


def norm_of(scenario: Scenario) -> NormResult | None:
    """The scenario's [norm] applied to X; raises ScenarioError where a statistic or X_norm overflows."""
    if scenario.norm is None:
        return None
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        norm = normalize(scenario.norm, scenario.X)
    spread = "mean square" if scenario.norm.kind == "rms" else "variance"
    for what, array in (("mean", norm.mean), (spread, norm.spread), ("root", norm.root), ("X_norm", norm.X_norm)):
        if (bad := first_bad(array)) is not None:
            raise ComputeError(scenario.source, f"[norm]: the {what} of X {_at(scenario.tokens, bad[0])} overflows float64",
                           _NORM_HINTS[what])
    return norm


class Where:
    """Where a value past float64 sits, for the parts that check their own matrices (core/part_questions.py,
    ``overflow``): the scenario, the head's index and name, and each row's words as the messages write them."""

    def __init__(self, sc: Scenario, h: int, head: str) -> None:
        self.sc, self.h, self.head = sc, h, head

    def row(self, i: int, keys: bool = False) -> str:
        """``row 2 ("b")``: a query row, or a key row with ``keys``."""
        return _at(self.sc.key_tokens if keys else self.sc.tokens, i)

    def first(self, array: Matrix | None, keys: bool = False, key_col: bool = False,
              allow: BoolMatrix | None = None) -> str | None:
        """Where the first entry of ``array`` (among ``allow``) past float64 is; None where every one is finite.
        ``keys``: its rows are the keys'; ``key_col``: it has a column per key, which the place names too."""
        if array is None or (bad := first_bad(array, allow)) is None:
            return None
        where = self.row(bad[0], keys)
        return where + f', key "{self.sc.key_tokens[bad[1]]}"' if key_col else where

    def named(self, checks: Iterable[tuple[str, Matrix | None, bool, bool, str]]) -> tuple[str, str, str] | None:
        """The first of a part's matrices past float64, each (name, array, keys, key_col, hint), as a part's
        ``overflow`` answers: (name, ``head: values in name overflow float64 at …``, hint); None where all are finite."""
        for name, array, keys, key_col, hint in checks:
            if (where := self.first(array, keys, key_col)) is not None:
                return name, f"{self.head}: values in {name} overflow float64 at {where}", hint
        return None


def check_head(sc: Scenario, result: HeadResult, h: int) -> None:
    """Refuse head h with a value float64 cannot hold: ScenarioError naming the matrix, row and remedy.
    Matrices are looked at in the order they are computed, so the one named is the first past float64 and
    its hint names the inputs it is made of (a later matrix would blame inputs that did nothing wrong). The
    parts check their own matrices where they are computed (core/part_questions.overflow), and the scenario's
    tables say where the hint of a shared matrix names their inputs (``overflow_hint``, ``overflow_cause``)."""
    at = Where(sc, h, result.name)
    _check_parts(result, "latent", at)  # a layer the heads' Q, K and V are made from
    _check_matrices(sc, result, (("Q", False, False), ("K", True, False), ("V", True, False)))
    _check_parts(result, "turned", at)  # Q and K as a part normalises or turns them
    _check_parts(result, "state", at)  # before the weights: a zero denominator would read as an overflow of them
    _check_matrices(sc, result, (("scores", False, True), ("scaled", False, True)))
    _check_parts(result, "stepped", at)  # a step on the scaled scores
    _check_parts(result, "term", at)  # a term added to them
    _check_matrices(sc, result, (("masked", False, True), ("weights", False, True), ("output", False, False)))
    _check_parts(result, "after", at)  # what acts on each row after the map


def _check_parts(result: HeadResult, stage: str, at: Where) -> None:
    for record in ask.answering(result, "overflow"):
        said = record.overflow(stage, at)
        if said is not None:
            name, fact, hint = said
            raise ComputeError(at.sc.source, fact, hint_for(at.sc, name, hint))


def hint_for(sc: Scenario, name: str, hint: str) -> str:
    """The hint for a matrix ``name`` past float64, as the scenario's tables say it: one may name what the matrix is
    made of in its place (``overflow_hint``), one may name a cause of its own first (``overflow_cause``)."""
    for table in ask.tables(sc):
        own = getattr(table, "overflow_hint", None)
        if own is not None and (said := own(name)) is not None:
            hint = said
    for table in ask.tables(sc):
        cause = getattr(table, "overflow_cause", None)
        if cause is not None and (said := cause(name)) is not None:
            hint = f"expected {said} or " + hint.removeprefix("expected ")
    return hint


def _check_matrices(sc: Scenario, result: HeadResult, names: tuple[tuple[str, bool, bool], ...]) -> None:
    """The matrices every head has, each with whether its rows are the keys' and whether it has a column per key."""
    at = Where(sc, -1, result.name)
    for name, keys, key_col in names:
        # masked cells of the softmax's input are −∞ by design; an infinity where the mask allows is an overflow
        where = at.first(getattr(result, name), keys, key_col, attended([result], sc.allow) if name == "masked" else None)
        if where is not None:
            raise ComputeError(sc.source, f"{result.name}: values in {name} overflow float64 at {where}",
                               hint_for(sc, name, _HEAD_HINTS[name]))


def check_inputs(sc: Scenario, X_in: Matrix) -> None:
    """What a scenario's table computes from the normalised X for every head at once (the gates' inputs of a
    state that replaces the softmax), refused where float64 cannot hold it (``overflow_inputs``)."""
    at = Where(sc, -1, "")
    for table in ask.tables(sc):
        check = getattr(table, "overflow_inputs", None)
        if check is not None and (said := check(X_in, at)) is not None:
            raise ComputeError(sc.source, *said)


def iter_heads(scenario: Scenario, norm: NormResult | None = None) -> Iterator[HeadResult]:
    """Each head's computation in turn (core/forward.py), so a caller can hold one head at a time (the
    streaming JSON export); raises ScenarioError on the first head that overflows."""
    sc = scenario
    if norm is None:
        norm = norm_of(sc)
    X_in = sc.X if norm is None else norm.X_norm
    check_inputs(sc, X_in)
    for h, result in enumerate(run_heads(sc, X_in)):
        check_head(sc, result, h)
        yield result


def combine(scenario: Scenario, outputs: Sequence[Matrix]) -> tuple[Matrix, Matrix]:
    """(concat, final output) from the heads' outputs; raises ScenarioError on overflow."""
    with np.errstate(over="ignore", invalid="ignore"):
        concat = np.concatenate(outputs, axis=1)  # (n, sum d_v)
        output = concat @ scenario.W_O if scenario.W_O is not None else concat  # (n, d_out)
        if scenario.b_O is not None:
            output = output + scenario.b_O[None, :]
    if (bad := first_bad(output)) is not None:
        raise ComputeError(scenario.source, f"the final output overflows float64 at {_at(scenario.tokens, bad[0])}",
                       "expected smaller W_O or b_O")
    return _frozen(concat), _frozen(output)


def compute(scenario: Scenario) -> Computation:
    """Every matrix of the scenario; raises ScenarioError if a value overflows."""
    norm = norm_of(scenario)
    heads = tuple(iter_heads(scenario, norm))
    concat, output = combine(scenario, [h.joined for h in heads])
    return Computation(scenario, heads, concat, scenario.W_O, output, norm=norm, b_O=scenario.b_O)
