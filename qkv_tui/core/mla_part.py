"""[mla]'s heads in the forward driver's place (core/forward.py asks the table's ``runs_heads``): every head expands
one shared latent (kernels/mla.py), and runs its parts from the scores on as any head does."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from qkv_tui.core.forward import result_of, scale_of
from qkv_tui.core.head import HeadResult
from qkv_tui.core.head_parts import Run, head_parts
from qkv_tui.core.part_masks import narrowed
from qkv_tui.core.scenario import Matrix, Scenario
from qkv_tui.kernels.policy import EXACT, Policy


def mla_heads(run: Run) -> Iterator[HeadResult]:
    """Every head of an [mla] scenario (kernels/mla.py): Q = [q_C | q_R] and K = [k_C | k_R] as scored,
    V = v_C, so the stages from Score on read them as any head's."""
    from qkv_tui.kernels.mla import mla_head, mla_shared

    sc, policy = run.sc, run.policy
    mla = sc.mla
    assert mla is not None
    w = mla.weights()
    rotary = mla.rotation(sc.positions, policy)
    with np.errstate(over="ignore", invalid="ignore"):
        shared = mla_shared(run.X_in, w, rotary, policy)
        parts_of_head = head_parts(run)  # a head's parts from the scores on (a bias, a soft-cap, a selection)
    for h, head in enumerate(sc.heads):
        with np.errstate(over="ignore", invalid="ignore"):
            parts = parts_of_head(h)
            allow, chosen = narrowed(sc.allow, parts)
            # √d_qk, over DeepSeek's YaRN m² where its [rope.scaling] gives mscale_all_dim
            m = mla_head(shared, w, h, allow, scale_of(run, h, mla.divisor), rotary, X=run.X_in, parts=parts,
                         policy=policy)
        # the latent layer's heads have no biases of their own
        yield result_of(head, m.Q, m.K, m.v_C, m.attended, (*chosen, *m.records, m), kv_head=h,
                        scale_is_default=sc.scale is None and mla.softmax_mscale is None, biases=False)


def mla_results(sc: Scenario, X_in: Matrix, policy: Policy = EXACT) -> list[HeadResult]:
    """Every head of an [mla] scenario, exactly or by hand (the JSON export's latent parts read them)."""
    return list(mla_heads(Run(sc, X_in, sc.X_kv if sc.is_cross else X_in, policy, None)))
