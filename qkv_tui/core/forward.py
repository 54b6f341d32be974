"""The one forward driver: every head of a scenario under a numeric policy (kernels/policy.py).

The engine runs it exactly (core/engine.py iter_heads, which adds the overflow checks), the by-hand page
runs it under ByHand (teach/handcalc.py compute_hand). What holds across heads lives here once: query heads
that read the same K/V head share its K and V; each head's variants are parts (core/head_parts.py) that the
one head forward (kernels/attention.py head_forward) runs at their hooks; a table that builds the heads itself
runs them in the driver's place (its ``runs_heads``: [mla]'s heads expand one shared latent, core/mla_part.py).
``result_of`` is the one place a head's result is assembled.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

from qkv_tui.core import part_questions as ask
from qkv_tui.core.head import HeadResult, parts_of
from qkv_tui.core.head_parts import Run, head_parts
from qkv_tui.core.part_masks import narrowed
from qkv_tui.core.scenario import Head, Matrix, Scenario
from qkv_tui.core.variants.common import face
from qkv_tui.kernels.attention import Attended, head_forward
from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.sharing import same_kv_weights

__all__ = ["HeadResult", "result_of", "run_heads"]


def run_heads(sc: Scenario, X_in: Matrix, policy: Policy = EXACT, *,
              exact: Sequence[HeadResult] | None = None) -> Iterator[HeadResult]:
    """Each head of ``sc`` in turn under ``policy``, from ``X_in`` (what the Query projection reads, normalised
    where the scenario says so). ``exact`` are the exact heads a by-hand run works again: each hand head divides
    by its exact head's divisor, adds its exact ALiBi bias (written down by the policy), and works its own K
    and V; without it, query heads that share a K/V head reuse its K and V (kept until the last head reading it)."""
    run = Run(sc, X_in, sc.X_kv if sc.is_cross else X_in, policy, exact)
    own = ask.scenario_says(sc, "runs_heads")  # a table that builds the heads itself runs them ([mla]'s latent)
    if own is not None:
        yield from face(own)(run)
        return
    parts_of_head = head_parts(run)
    kv_done: dict[int, HeadResult] = {}  # K/V head -> the first query head that computed it
    last_reader = {sc.kv_head(h): h for h in range(len(sc.heads))}  # a K/V head -> the last query head reading it
    for h, head in enumerate(sc.heads):
        kv = sc.kv_head(h)
        first = kv_done.get(kv)
        shared = first if first is not None and same_kv_weights(first, head) else None
        with run.quiet():
            parts = parts_of_head(h)
            scale = scale_of(run, h, math.sqrt(head.d_k))
            # a part that chooses the keys (the indexer's selection) narrows the mask and keeps its record first
            allow, chosen = narrowed(sc.allow, parts)
            f = head_forward(X_in, run.X_kv, head.W_Q, head.W_K, head.W_V, head.b_Q, head.b_K, head.b_V, allow,
                             scale, parts, shared=shared, policy=policy)
        # a part that divides by no scale at all (linear attention's 1.0 is no √d_k) says so
        result = result_of(head, f.Q, f.K, f.V, f.attended, chosen + f.records, kv_head=kv,
                           scale_is_default=sc.scale is None and all(part.keeps_scale for part in parts))
        if exact is None and last_reader[kv] > h:  # kept only while a later query head still reads it
            kv_done.setdefault(kv, result)
        else:
            kv_done.pop(kv, None)
        yield result


def scale_of(run: Run, h: int, default: float) -> float:
    """Head h's divisor: the scenario's (√d_k by default), or, worked again by hand, its exact head's."""
    if run.exact is not None:
        return run.exact[h].scale
    return default if run.sc.scale is None else run.sc.scale


def result_of(head: Head, Q: Matrix, K: Matrix, V: Matrix, a: Attended, records: tuple[object, ...], *,
              kv_head: int, scale_is_default: bool, biases: bool = True) -> HeadResult:
    """The one record of a head's forward pass: what every head has, and the record of each of its parts."""
    soft = a.softmax
    return HeadResult(
        name=head.name, d_k=head.d_k, d_v=head.d_v, scale=a.divisor, scale_is_default=scale_is_default,
        W_Q=head.W_Q, W_K=head.W_K, W_V=head.W_V, Q=Q, K=K, V=V, scores=a.scores, scaled=a.scaled,
        masked=a.masked, row_max=soft.row_max, exps=soft.exps, row_sum=soft.row_sum, weights=soft.weights,
        output=a.output, kv_head=kv_head, parts=parts_of(records),
        **({"b_Q": head.b_Q, "b_K": head.b_K, "b_V": head.b_V} if biases else {}),
    )
