"""What the learner has after the last operation: where each token looked, and the checks that hold.

The summary is computed from the finished computation, not from the trace's text: it
names, per query token, the key it weighs most (or says the row is spread evenly), and
it re-checks the two invariants a student can rely on — weight rows sum to 1 (with a
sink, weights plus the sink's share) and masked weights are exactly 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from qkv_tui.core import part_questions as ask
from qkv_tui.core.engine import Computation, HeadResult
from qkv_tui.core.fmt import fmt
from qkv_tui.core.part_masks import masked_as
from qkv_tui.core.scenario import BoolMatrix, Scenario

if TYPE_CHECKING:  # [backward]'s module loads with the first file that has the table
    from qkv_tui.core.variants.backward import Backward

MAX_ROWS = 8  # tokens listed by name; longer sentences list their first ones and point to the map


def closing_summary(comp: Computation, head: int, operations: int, decimals: int) -> tuple[str, ...]:
    """The lines shown once every operation is done, about the head in view."""
    sc = comp.scenario
    hr = comp.heads[head]
    heads = len(comp.heads)
    route = _route(hr)
    if heads > 1:
        route += f" in each of the {heads} heads, joined by Concat"
    if comp.W_O is not None:
        route += " and mixed by W_O"
    lines = [f"✓ Done: all {operations} operations. Each token's output is {route}."]
    if sc.backward is not None:  # the walk ended on the backward stages: say what they computed
        lines.append(backward_line(sc.backward))
    who = f"{hr.name} ({head + 1}/{heads})" if heads > 1 else "this head"
    allow = comp.allow  # the keys the heads attend: a part's own mask (the indexer's selection) narrows it
    looks = [looked_at(hr, allow[i], sc.labels[i], sc.key_labels, i, decimals)
             for i in range(min(sc.n, MAX_ROWS))]
    more = f"; … {sc.n - MAX_ROWS} more tokens (m shows every row)" if sc.n > MAX_ROWS else ""
    lines.append(f"{looks_heading(sc)}, {who}{weights_note(sc)}: " + "; ".join(looks) + more)
    also = masked_as(comp.heads)
    lines.append(checks(hr, allow, None if also is None else (int((sc.allow & ~allow).sum()), also)))
    return tuple(lines)


def backward_line(bw: Backward) -> str:
    """What the backward stages after the forward pass computed, and for which weights."""
    start = ("∂loss/∂output, loss = the mean of −ln p[next] through W_U," if bw.cross_entropy
             else "the given dO = ∂loss/∂output" if bw.target is None
             else "∂loss/∂output, loss = ½·Σ (output − target)²,")
    weights = (f"the gradient ∂loss/∂W of each weight [backward] trains ({', '.join(bw.train)})" if bw.train
               else "the gradients of the values in between ([backward] trains no weight)")
    return f"Backward: the stages after the forward pass carried {start} back through it, to {weights}."


def looks_heading(sc: Scenario) -> str:
    """What a row of :func:`looked_at` readings names: where a softmax head looks, or, for a head whose weights
    are no distribution, what its largest weight multiplies (the corrections δ, or V unnormalised), as the variant
    whose map it is says (its ``looks_heading``)."""
    return ask.scenario_says(sc, "looks_heading") or "Where each token looks"


def weights_note(sc: Scenario) -> str:
    """What the readings' numbers are when they are no distribution ("" for a softmax head's weights), as the
    variant whose map it is says (its ``weights_note``)."""
    return ask.scenario_says(sc, "weights_note") or ""


def looked_at(hr: HeadResult, allow: BoolMatrix, token: str, keys: tuple[str, ...], row: int,
              decimals: int) -> str:
    """``I → love 0.707``; a row whose shown weights are all alike reads ``love → 3 keys evenly at 0.333``."""
    weights = hr.weights[row]
    shown = [fmt(float(w), False, decimals) for w in weights]
    allowed = [j for j in range(len(keys)) if allow[j]]
    # over the allowed keys only: without a softmax ([linear] not normalised) a kept weight may be below a masked 0
    top = shown[max(allowed, key=lambda j: float(weights[j]))] if allowed else shown[int(np.argmax(weights))]
    best = [j for j in allowed if shown[j] == top]  # ties as the student reads them, at these decimals
    # no-break spaces around the arrow: a wrapped line never starts "→ love", away from its token
    if len(best) == len(allowed) and len(allowed) > 1:
        return f"{token}\u00a0→\u00a0{len(allowed)} keys evenly at {top}"
    if len(best) > 1:
        return f"{token}\u00a0→\u00a0{' and '.join(keys[j] for j in best)} at {top} each"
    return f"{token}\u00a0→\u00a0{keys[best[0]]} {top}"


def _route(hr: HeadResult) -> str:
    """How a token's output is made from the weights the summary names: a part that makes it otherwise says how
    (its ``route``)."""
    return next((route for part in hr.parts.values() if (route := getattr(part, "route", None))), "weights·V")


def _distribution(hr: HeadResult) -> bool:
    """Whether the head's weights are a distribution: the softmax's are; a part whose map replaces it says
    (its ``distribution``)."""
    return all(getattr(part, "distribution", True) for part in hr.parts.values())


def checks(hr: HeadResult, allow: BoolMatrix, own: tuple[int, str] | None = None) -> str:
    """The invariants, re-checked on the numbers computed (not assumed). Weights that are no distribution
    (the gated delta rule's, or linear attention's not normalised) have no row sum to check. ``own``: how many
    of the masked cells a part masked of its own, and what they are ("not selected by the indexer")."""
    masked = ~allow
    parts = []
    if _distribution(hr):
        total = hr.weights.sum(axis=1)
        share = ask.beside_share(hr)  # a column beside the map (a sink) takes its share of each row
        if share is not None:
            total = total + share
        # a map whose rows add up to other than 1 (differential attention's 1 − λ) is checked against its own total:
        # against 1 it read "every weight row sums to 1 (to within 2e-01)", which no row did
        target = ask.row_total(hr)
        said = "every weight row sums to 1" if target == 1.0 else f"every weight row sums to 1 − λ = {target:.6g}"
        what = next(iter(ask.said(hr, "summary.rows")), said)
        error = float(np.abs(total - target).max())
        exact = "exactly" if error == 0 else f"to within {error:.0e}"
        parts.append(f"{what} ({exact})")
    line = "Checks: " + "; ".join(parts)
    if masked.any():
        zero = bool((hr.weights[masked] == 0).all())
        count = int(masked.sum())
        which = "" if own is None else f" ({own[0]} of them {own[1]})"
        line += ("; " if parts else "") + f"the {count} masked weights{which} are {'exactly 0' if zero else 'NOT all 0'}"
    for promise in ask.checked(hr):  # what a part promises of its numbers (the soft-cap: within ±c)
        line += f"; {promise}"
    return line + "."
