"""The KV-cache decode view as plain data: panes and explanation for one step of one head."""

from __future__ import annotations

import numpy as np

from qkv_tui.core.fmt import is_integral, vector
from qkv_tui.core.scenario import Matrix
from qkv_tui.screen.view import Explanation, PaneSpec, column_widths
from qkv_tui.teach.decode import Decode

DECODE_MEANING = (
    "Generation appends one token at a time. Its Query is computed fresh; its Key and Value rows are"
    " appended to the cache, and the rows of earlier tokens are reused, not recomputed. Q is never"
    " cached: no later token needs it. Yellow: computed at this step; blue: read back from the cache."
)


def _pane(key: str, title: str, values: Matrix, rows: tuple[str, ...], cols: tuple[str, ...], decimals: int,
          current_row: int | None = None, reused: frozenset[int] = frozenset(), heat: bool = False,
          subtitle: str = "") -> PaneSpec:
    values = np.atleast_2d(values)
    integral = not heat and is_integral(values)
    widths = column_widths(values, integral, decimals, cols)
    return PaneSpec(
        key=key, title=f"{title}  {values.shape[0]}×{values.shape[1]}", subtitle=subtitle, values=values,
        row_labels=rows, col_labels=cols, integral=integral, col_widths=widths, filled=values.size,
        current=None if current_row is None else (current_row, None), rows=reused, heat=heat, decimals=decimals,
    )


def decode_panes(dec: Decode, t: int, head: int, decimals: int) -> tuple[list[PaneSpec], list[PaneSpec]]:
    """(focus panes, context panes) at decode step t of a head."""
    sc = dec.comp.scenario
    step = dec.steps[head][t]
    keys = sc.key_tokens if sc.is_cross else sc.tokens[: t + 1]
    token = sc.tokens[t]
    dims_k = tuple(str(c) for c in range(step.K_cache.shape[1]))
    dims_v = tuple(str(c) for c in range(step.V_cache.shape[1]))
    name = dec.comp.heads[head].name if len(dec.comp.heads) > 1 else ""
    if sc.is_cross:
        # the context's Keys and Values are computed at the first step and only read afterwards
        cache = "K (context, computed once)" if t == 0 else "K cache (context)"
        current, reused = None, frozenset(range(sc.m)) if t else frozenset()
    else:
        cache, current, reused = "K cache", t, frozenset(range(t))
    focus = [
        _pane("dq", "q = X[t]·W_Q (fresh)", step.q, (token,), dims_k, decimals, current_row=0, subtitle=name),
        _pane("dK", cache, step.K_cache, keys, dims_k, decimals, current, reused, subtitle=name),
        _pane("dV", cache.replace("K", "V", 1), step.V_cache, keys, dims_v, decimals, current, reused, subtitle=name),
    ]
    outputs = np.array([s.output for s in dec.steps[head][: t + 1]])
    context = [
        _pane("dw", "weights = softmax(q·Kᵀ/√dₖ)", step.weights, (token,), keys, decimals, heat=True, subtitle=name),
        _pane("dout", "decoded outputs", outputs, sc.tokens[: t + 1], dims_v, decimals, current_row=t, subtitle=name),
        _pane("dref", "full causal attention" if not sc.is_cross else "full cross-attention", dec.reference[head],
              sc.tokens, dims_v, decimals, reused=frozenset({t}), subtitle=name),
    ]
    return focus, context


def decode_explanation(dec: Decode, t: int, head: int, decimals: int) -> Explanation:
    """What happens at decode step t, with its numbers and the check against full attention."""
    sc = dec.comp.scenario
    step = dec.steps[head][t]
    token = sc.tokens[t]
    keys = sc.key_tokens if sc.is_cross else sc.tokens[: t + 1]

    def vec(values: Matrix, integral: bool = False) -> str:
        return vector(values, integral, decimals)

    q_int = is_integral(step.q)
    lines = [f"q[{token}] = X[{token}]·W_Q = {vec(step.q, q_int)}   (fresh: Queries are never cached)"]
    if sc.is_cross:
        if t == 0:
            lines.append(f"context K and V computed once now: {sc.m} rows each ({', '.join(keys)})")
        else:
            lines.append(f"context K and V: all {sc.m} rows reused from step 1, nothing recomputed")
    else:
        k_int, v_int = is_integral(step.K_cache), is_integral(step.V_cache)
        reused_rows = f"; reused: {t} row{'s' if t != 1 else ''} each ({', '.join(keys[:t])})" if t else ""
        lines.append(f"appended to the cache: K[{token}] = {vec(step.K_cache[t], k_int)},"
                     f" V[{token}] = {vec(step.V_cache[t], v_int)}{reused_rows}")
    s_int = is_integral(step.scores)
    lines.append(f"scores = q·K_cacheᵀ = {vec(step.scores, s_int)}; scaled = {vec(step.scaled)}; weights = {vec(step.weights)}")
    check = "✓ equal" if step.matches else "✗ DIFFERENT"
    lines.append(f"out[{token}] = weights·V_cache = {vec(step.output)}  =  row {token} of full"
                 f" {'cross' if sc.is_cross else 'causal'} attention {vec(step.reference)}"
                 f"  {check} (max |diff| {step.max_error:.1e})")
    computed, reused = dec.rows_computed(head, t), dec.rows_reused(head, t)
    without = dec.rows_without_cache(t)
    lines.append(f"Key/Value rows so far: computed {computed}, reused {reused}; without a cache: {without} computed"
                 f" (the cache saves {without - computed})")
    name = dec.comp.heads[head].name
    heads = len(dec.comp.heads)
    return Explanation(
        stage_label=f"KV-cache decode, step {t + 1}/{dec.n}",
        counter=f'generating "{token}"',
        head_label=f"{name} ({head + 1}/{heads})" if heads > 1 else "",
        arithmetic=lines[0],
        details=tuple(lines[1:]),
        meaning=DECODE_MEANING,
        formula=(("softmax(", False), ("q_t", True), ("·", False), ("K_cacheᵀ", True), ("/√dₖ)", False),
                 ("·", False), ("V_cache", True)),
        stages=tuple((f"t{i + 1} {sc.tokens[i]}", "current" if i == t else ("done" if i < t else "todo"))
                     for i in range(dec.n)),
    )
