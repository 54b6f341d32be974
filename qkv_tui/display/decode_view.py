"""The KV-cache view as plain data: prefill, chunked prefill and decode steps over a paged cache."""

from __future__ import annotations

import importlib
import weakref
from dataclasses import replace
from types import ModuleType
from typing import Any

import numpy as np

from qkv_tui.core import part_questions as ask
from qkv_tui.core.engine import Computation
from qkv_tui.core.fmt import is_integral, vector
from qkv_tui.core.scenario import Matrix
from qkv_tui.display import side_views
from qkv_tui.display.frame import Frame
from qkv_tui.display.modes import Modes
from qkv_tui.display.side_view import Sources
from qkv_tui.display.state_view import carries_state, state_frame
from qkv_tui.display.view import Explanation, PaneSpec, matrix_pane
from qkv_tui.kernels.softmax import masked_logits, softmax_rows
from qkv_tui.teach.arith import fit
from qkv_tui.teach.decode import SCHEDULE_NAMES, SCHEDULES, Decode, DecodeStep, decode
from qkv_tui.teach.stages.printed import exact

MAX_STAGES = 7  # more steps than this are not all named in the stage bar
MAX_TERMS = 4  # a weighted sum of more Value rows than this is summarised, not written out
DECODE_MEANING = (
    "Prefill runs the prompt at once (a causal block); decode adds one token a step: in a model, the token it"
    " has just produced; here the sentence's next word stands in for it. Queries are computed fresh"
    " and never cached; Key and Value rows are written once and read back. Rows live in blocks of a pool, found"
    " through the block table (@p.s: physical block p, slot s). Yellow: computed now; blue: read from the cache."
)
CROSS_MEANING = (
    "Cross-attention: Queries come from the tokens being processed, Keys and Values from the context, computed"
    " once at the first step and only read after that: nothing is added to that cache. It is paged like any"
    " cache (@p.s: physical block p, slot s)."
)


def _pane(key: str, title: str, values: Matrix, rows: tuple[str, ...], cols: tuple[str, ...], decimals: int,
          current_row: int | None = None, reused: frozenset[int] = frozenset(), heat: bool = False,
          subtitle: str = "", allow: np.ndarray | None = None) -> PaneSpec:
    return matrix_pane(key, title, values, rows, cols, decimals, subtitle=subtitle, heat=heat, allow=allow,
                       current=None if current_row is None else (current_row, None), block=reused)


_FACES: weakref.WeakKeyDictionary[Computation, str | None] = weakref.WeakKeyDictionary()


def cache_face(comp: Computation) -> ModuleType | None:
    """The display module that shows what the cache keeps of a head's parts where that is not each head's K and
    V (latent attention's latent rows, display/mla_cache.py), as the parts name it; None for a plain cache.
    Asked once per computation: every operation of the view reads it, and asking walks every head."""
    if comp not in _FACES:
        _FACES[comp] = ask.face(comp.heads, "cache")
    name = _FACES[comp]
    return None if name is None else importlib.import_module(f"qkv_tui.display.{name}")


def _span(labels: tuple[str, ...], start: int, stop: int) -> str:
    return labels[start] if stop - start == 1 else f"{labels[start]}..{labels[stop - 1]}"


def step_title(dec: Decode, step: DecodeStep) -> str:
    """``prefill I..love``, ``chunk 2: AI``, ``decode AI``: the tokens being processed, never "generating"."""
    tokens = dec.comp.scenario.labels
    return f"{step.kind} {_span(tokens, step.start, step.stop)}"


def decode_panes(dec: Decode, index: int, head: int, decimals: int) -> tuple[list[PaneSpec], list[PaneSpec]]:
    """(focus panes, context panes) at one step of a head."""
    sc = dec.comp.scenario
    step = dec.steps[head][index]
    paging = dec.paging[index]
    keys = sc.key_labels if sc.is_cross else sc.labels
    lo = step.first  # a sliding window's rolling buffer keeps tokens lo … S − 1 only
    S = lo + step.K_cache.shape[0]
    cached = tuple(f"{keys[t]} @{a.physical}.{a.slot}" for t, a in ((t, paging.table.address(t)) for t in range(lo, S)))
    queries = sc.labels[step.start:step.stop]
    dims_k = tuple(str(c) for c in range(step.K_cache.shape[1]))
    dims_v = tuple(str(c) for c in range(step.V_cache.shape[1]))
    name = dec.comp.heads[head].name if len(dec.comp.heads) > 1 else ""
    one = step.width == 1
    if sc.is_cross:
        cache = "K (context, computed once)" if index == 0 else "K cache (context, read)"
        current, reused = None, frozenset(range(sc.m)) if index else frozenset()
    else:
        cache = "K rolling buffer" if sc.mask_kind == "sliding" else "K cache"
        current = step.start - lo if one else None
        reused = frozenset(range(step.start - lo))
    focus = [
        _pane("dq", f"q = {_projection(dec, head, 'Q')} (fresh)", step.q, queries, dims_k, decimals,
              current_row=0 if one else None,
              subtitle=name),
        _pane("dK", cache, step.K_cache, cached, dims_k, decimals, current, reused, subtitle=name),
        _pane("dV", cache.replace("K", "V", 1), step.V_cache, cached, dims_v, decimals, current, reused,
              subtitle=name),
        _pane("dtable", "block table", np.array([paging.table.physical], dtype=float), ("physical",),
              tuple(str(i) for i in range(len(paging.table.physical))), decimals, subtitle=name),
    ]
    shown = cache_face(dec.comp)
    if shown is not None:  # what the cache really keeps: one latent row per token for every head
        latent = shown.latent_rows(dec.comp)[lo:S]
        for i in (1, 2):  # K and V are the head's, expanded from the cached rows at every step
            focus[i] = replace(focus[i], title=shown.expanded_title(focus[i].title))
        focus.insert(1, _pane("dlat", shown.latent_title(dec.comp), latent, cached, shown.latent_cols(dec.comp),
                              decimals, current, reused, subtitle=name))
    masked = masked_logits(step.scaled if step.stepped is None else step.stepped, step.allowed)
    divisor = dec.comp.heads[head].scale
    scale = f"√{dec.comp.heads[head].d_k}" if dec.comp.heads[head].scale_is_default else f"{divisor:g}"
    stepper = ask.stepper(dec.comp.heads[head])
    if step.stepped is not None and stepper is not None:  # the pane shows what the softmax reads: the stepped scores
        scale = f"{scale}→{stepper.symbol(exact)}"
    outputs = dec.outputs(head, index)
    context = [
        _pane("dS", f"q·Kᵀ/{scale} + mask", masked, queries, keys[lo:S], decimals, subtitle=name),
        _pane("dw", "weights", step.weights, queries, keys[lo:S], decimals, heat=True, subtitle=name,
              allow=step.allowed),
        _pane("dout", "outputs so far", outputs, sc.labels[: step.stop], dims_v, decimals,
              current_row=step.start if one else None, reused=frozenset(range(step.start, step.stop)) if not one
              else frozenset(), subtitle=name),
        _pane("dref", "no cache, all at once" if not dec.own_mask else "Mix stage", dec.reference[head],
              sc.labels, dims_v, decimals, reused=frozenset(range(step.start, step.stop)), subtitle=name),
    ]
    if not dec.own_mask:
        context.append(_pane("dmix", f"Mix stage (mask {sc.mask_kind})", dec.comp.heads[head].output, sc.labels,
                             dims_v, decimals, reused=frozenset(range(step.start, step.stop)), subtitle=name))
    return focus, context


def mask_note(dec: Decode) -> str:
    """Says when decoding cannot follow the scenario's mask, and what that changes."""
    sc = dec.comp.scenario
    if dec.own_mask:
        if sc.is_cross:
            return ""
        return f"Its {sc.mask_kind} mask is one a cache keeps: outputs equal the Mix stage."
    rows = dec.differs_from_trace()
    names = ", ".join(sc.labels[i] for i in rows[:6]) + (", …" if len(rows) > 6 else "")
    kept = {"none": "", "causal": "", "padding": " (its padding is kept)",
            "custom": " (its past part is kept)"}.get(sc.mask_kind, " (what it allows in the past is kept)")
    what = "The scenario has no mask, which" if sc.mask_kind == "none" else f"The scenario's {sc.mask_kind} mask{kept}"
    return (f"Decoding with a cache is causal: a token attends only to tokens already in the cache. {what}"
            f" lets tokens see later ones, so the outputs of {names} differ from the Mix stage.")


def _projection(dec: Decode, head: int, role: str, token: str | None = None, t: int | None = None) -> str:
    """What the step's q (or a cached k) is: ``X[I]·W_Q``, from X̂ after a norm, plus a bias, rotated by RoPE.

    Without a token, the symbol for all rows: ``RoPE(X̂·W_Q)``.
    """
    comp = dec.comp
    shown = cache_face(comp)
    if shown is not None:  # expanded from the cached latent
        return str(shown.projection(comp, role, token))
    hr = comp.heads[head]
    x = "X̂" if comp.norm is not None and (role == "Q" or not comp.scenario.is_cross) else "X"
    bias = f" + b_{role}" if getattr(hr, f"b_{role}") is not None else ""
    if token is None:  # a part that turns the projection by position says how it is written (RoPE)
        text = f"{x}·W_{role}{bias}"
        return next(iter(ask.said(hr, f"cache.{role}", text=text)), text)
    text = f"{x}[{token}]·W_{role}{bias}"
    positions = comp.scenario.positions
    if positions is not None and t is not None:
        text = next(iter(ask.said(hr, f"cache.{role}.at", text=text, position=positions[t])), text)
    return text


def reference_name(dec: Decode) -> str:
    """What the cache view checks its outputs against: full attention under the mask decoding uses.

    Without a cache every query sees every key at once; under a mask a cache cannot keep (none, a custom
    one that looks ahead) that is causal attention, not the Mix stage's.
    """
    sc = dec.comp.scenario
    if sc.is_cross:
        return "cross-attention over the whole context at once"
    if dec.own_mask:
        return "attention over all tokens at once (no cache)"
    if sc.mask_kind == "none":
        return "causal attention over all tokens at once (no cache; not the Mix stage, which has no mask)"
    return (f"attention over all tokens at once under the past part of the {sc.mask_kind} mask"
            " (no cache; not the Mix stage)")


def _vec(values: Matrix, decimals: int) -> str:
    return vector(values, is_integral(values), decimals)


def decode_lines(dec: Decode, index: int, head: int, decimals: int) -> list[str]:
    """The step's arithmetic and checks, for its last query row; every line checkable on a calculator."""
    sc = dec.comp.scenario
    step = dec.steps[head][index]
    paging = dec.paging[index]
    hr = dec.comp.heads[head]
    keys = sc.key_labels if sc.is_cross else sc.labels
    r = step.width - 1  # the step's last query row: the newest token
    token = sc.labels[step.t]
    lines = []
    if step.width == 1:
        lines.append(f"q[{token}] = {_projection(dec, head, 'Q', token, step.t)} = {_vec(step.q[0], decimals)}"
                     "   (fresh: Queries are never cached)")
    else:
        lines.append(f"Q[{_span(sc.labels, step.start, step.stop)}] = {_projection(dec, head, 'Q')}:"
                     f" {step.width} rows at once, fresh"
                     f" (the q pane); worked below for the last, {token}")
    if sc.is_cross:
        if index == 0:
            lines.append(f"context K and V computed once now: {sc.m} rows each ({', '.join(keys[:8])}"
                         f"{', …' if sc.m > 8 else ''}), written to blocks {list(paging.table.physical)}")
        else:
            lines.append(f"context K and V: all {sc.m} rows read from the cache, nothing recomputed or added")
    else:
        writes = "; ".join(a.text(keys[a.token]) for a in paging.writes[:2])
        more = f"; … {len(paging.writes) - 2} more" if len(paging.writes) > 2 else ""
        if step.width == 1:
            turned = ask.scored_word(hr)  # what a part did to the Keys before they were cached
            lines.append(f"appended to the cache: K[{token}] = {_vec(step.K_cache[step.start - step.first], decimals)}"
                         f"{f' ({turned})' if turned is not None else ''},"
                         f" V[{token}] = {_vec(step.V_cache[step.start - step.first], decimals)}: {writes}")
        else:
            lines.append(f"written to the cache: {writes}{more}")
    if step.evicted:
        gone = ", ".join(keys[t] for t in step.evicted)
        back = f"; physical {', '.join(map(str, paging.freed))} back to the pool" if paging.freed else ""
        lines.append(f"rolling buffer (window {sc.window}): K/V of {gone} left the cache, outside every"
                     f" query's window from now on{back}")
    if paging.allocated:
        full = " (the last block was full)" if step.start and step.start % dec.block_size == 0 and not sc.is_cross else ""
        lines.append(f"new block{'s' if len(paging.allocated) > 1 else ''}: physical"
                     f" {', '.join(map(str, paging.allocated))} from the pool{full}; {len(paging.table.free)} of"
                     f" {paging.pool} free")
    lines.append(f"read via block_table = {list(paging.table.physical)}: key j at block_table[j // {dec.block_size}],"
                 f" slot j % {dec.block_size}{' (−1: freed)' if -1 in paging.table.physical else ''}")
    scores = step.scores[r]
    allowed = step.allowed[r]
    divisor = hr.scale
    scale = f"√{hr.d_k}" if hr.scale_is_default else f"{divisor:g}"
    exact = hr.scale_is_default  # √d_k is written as such; a scenario's own scale is a number
    lo, S = step.first, step.first + step.K_cache.shape[0]
    added = ask.term(hr, step.t, slice(lo, S))  # a part's term (ALiBi's bias) joins after the division
    plus = f" + {ask.term_name(hr)}" if added is not None else ""
    operands: list[float | Matrix] = [scores] + ([] if exact else [divisor]) + ([] if added is None else [added])

    stepper = ask.stepper(hr)
    if stepper is not None:  # a part's step (the soft-cap) comes between the division and the term: a line for each
        lines += _stepped_lines(step, r, token, scale, exact, divisor, added, plus, stepper, decimals)
    else:
        def scaled_row(*v: float | Matrix) -> Matrix:
            out = np.asarray(v[0]) / (divisor if exact else v[1])
            return out + np.asarray(v[-1]) if added is not None else out

        texts, scaled = fit(scaled_row, operands, scores / divisor + (0 if added is None else added), decimals)
        written = f"{texts[0]}/{scale if exact else texts[1]}" + (f" + {texts[-1]}" if added is not None else "")
        name = "logits" if added is not None else "scaled"
        lines.append(f"{name}[{token}] = q·K_cacheᵀ/{scale if exact else 'scale'}{plus}"
                     f" = {written} = {scaled}")
    if not allowed.all():
        hidden = [keys[lo + j] for j in np.flatnonzero(~allowed)]
        lines.append(f"masked for {token}: {', '.join(hidden[:6])}{', …' if len(hidden) > 6 else ''} (−∞, weight 0)")
    live = np.flatnonzero(allowed)
    base = step.scaled[r] if step.stepped is None else step.stepped[r]
    logits = base if added is None else base + added
    kept = logits[live]
    # a column beside the map (a sink) joins the sum as one more column, then is dropped: its part says so
    beside = ask.beside(hr)
    (kept_text,), weights = fit(lambda v: softmax_rows(np.asarray(v)[None, :], beside).weights[0], [kept],
                                step.weights[r][live], decimals)
    softmax = next(iter(ask.said(hr, "cache.softmax", kept=kept_text)), f"softmax({kept_text})")
    lines.append(f"weights[{token}] = {softmax} = {weights}"
                 + (f"   (over {', '.join(keys[lo + j] for j in live[:6])}{', …' if live.size > 6 else ''})"
                    if not allowed.all() else ""))
    out = step.output[r]
    if live.size <= MAX_TERMS:
        operands = []
        for j in live:
            operands += [float(step.weights[r][j]), step.V_cache[j]]

        def mix(*wv: float | Matrix) -> Matrix:
            return sum((np.asarray(wv[k]) * np.asarray(wv[k + 1]) for k in range(0, len(wv), 2)), np.zeros(out.size))

        ops, res = fit(mix, operands, out, decimals)
        terms = " + ".join(f"{ops[k]}·{ops[k + 1]}" for k in range(0, len(ops), 2))
        lines.append(f"out[{token}] = weights·V_cache = {terms} = {res}")
    else:
        lines.append(f"out[{token}] = weights·V_cache, {live.size} rows weighted and summed = {_vec(out, decimals)}")
    for part in step.after:  # a part after the map (the output gate), computed for the step's own tokens
        lines += after_lines(dec, part, step, r, token, decimals)
    what = reference_name(dec)
    ok, check = step.check
    paged_ok, paged_check = step.paged_check
    paged = "✓ equal to a contiguous cache" if paged_ok else f"✗ DIFFERENT from a contiguous cache: {paged_check}"
    lines.append(f"{'✓ equal to' if ok else '✗ DIFFERENT from'} {what} {check}; paging changes nothing:"
                 f" {paged}")
    rows = [i for i in dec.differs_from_trace() if step.start <= i < step.stop]
    if rows:
        i = rows[-1]
        mask = "no mask" if sc.mask_kind == "none" else f"its {sc.mask_kind} mask"
        lines.append(f"the Mix stage ({mask}) had out[{sc.labels[i]}] = {_vec(hr.output[i], decimals)}: it let"
                     f" {sc.labels[i]} see later tokens, which a cache does not hold yet")
    if not sc.is_cross:
        held = step.stop - step.first  # S: the keys this step reads
        offset = held - step.width
        if step.width < held:
            column = "token" if not step.first else "key column"
            lines.append(f"mask aligned bottom-right, as FlashAttention ≥ 2.1 and vLLM align it (PyTorch:"
                         f" causal_lower_right): query row r is {column} {offset} + r (offset S − L ="
                         f" {held} − {step.width} = {offset}). Aligned top-left, as PyTorch's is_causal=True"
                         f" (causal_upper_left) does with fewer queries than keys, row 0 would see only key 0:"
                         f" this query would attend to \"{keys[step.first]}\" alone")
        else:
            lines.append(f"a {step.width}×{step.width} causal block: queries and keys are the same tokens,"
                         " so bottom-right and top-left alignment agree")
    computed, reused_rows = dec.rows_computed(head, index), dec.rows_reused(head, index)
    without = dec.rows_without_cache(index)
    lines.append(f"Key/Value rows so far: computed {computed}, reused {reused_rows}; without a cache: {without}"
                 f" computed (the cache saves {without - computed})")
    shown = cache_face(dec.comp)
    if shown is not None:
        lines.append(shown.cache_line(dec.comp))
    return lines


def after_lines(dec: Decode, part: Any, step: DecodeStep, r: int, token: str, decimals: int) -> list[str]:
    """A part that acts on each row after the map (the output gate) at a decode step, computed for the new token
    from its own x̂ (no cache): its factor, then the output times it, cell by cell, in the part's words."""
    x = "X̂" if dec.comp.norm is not None else "X"
    factor, out = part.factor[r], step.output[r]
    (ot, ft), joined = fit(lambda a, b: np.asarray(a) * np.asarray(b), [out, factor], part.joined[r], decimals)
    said = (ask.said_of(part, "cache.after", token=token, x=x, factor=_vec(factor, decimals)),
            ask.said_of(part, "cache.joined", token=token, out=ot, factor=ft, joined=joined))
    return [line for line in said if line is not None]


def step_stages(dec: Decode, index: int) -> tuple[tuple[str, str], ...]:
    """The stage bar: every step when there are few; else the first, the current with its
    neighbours, and the last, with … for the steps between (1,025 steps would push the title off)."""
    count = dec.count
    shown = list(range(count)) if count <= MAX_STAGES else sorted(
        {0, count - 1} | {i for i in range(index - 1, index + 2) if 0 <= i < count})
    stages: list[tuple[str, str]] = []
    for k, i in enumerate(shown):
        if k and i > shown[k - 1] + 1:
            stages.append(("…", "done" if i <= index else "todo"))
        rng = dec.ranges[i]
        kind = dec.kind(i)
        text = dec.comp.scenario.labels[rng.start] if len(rng) == 1 and kind == "decode" else f"{kind} ×{len(rng)}"
        stages.append((f"{i + 1} {text}", "current" if i == index else ("done" if i < index else "todo")))
    return tuple(stages)


def decode_explanation(dec: Decode, index: int, head: int, decimals: int) -> Explanation:
    """What happens at one step, with its numbers and the checks against full attention."""
    sc = dec.comp.scenario
    step = dec.steps[head][index]
    lines = decode_lines(dec, index, head, decimals)
    name = dec.comp.heads[head].name
    heads = len(dec.comp.heads)
    count = dec.count
    label = {"prefill": "prefill", "chunk": "chunked prefill", "decode": "decode"}[step.kind]
    stages = step_stages(dec, index)
    return Explanation(
        stage_label=f"{label} step {index + 1}/{count}",
        counter=f'processing "{_span(sc.labels, step.start, step.stop)}"',
        head_label=f"{name} ({head + 1}/{heads})" if heads > 1 else "",
        arithmetic=lines[0],
        details=tuple(lines[1:]),
        meaning=" ".join(filter(None, (f"{SCHEDULE_NAMES[dec.mode].capitalize()} (c changes it).", mask_note(dec),
                                       CROSS_MEANING if sc.is_cross else DECODE_MEANING))),
        formula=(("softmax(", False), ("q", True), ("·", False), ("K_cacheᵀ", True), ("/√dₖ + mask)", False),
                 ("·", False), ("V_cache", True)),
        stages=tuple(stages),
    )


def _decoding(sources: Sources, schedule: str) -> Decode:
    return sources.kept(("cache", schedule), lambda: decode(sources.comp, schedule))


def _frame(sources: Sources, modes: Modes, step: int, head: int) -> Frame:
    if carries_state(sources.comp):  # [linear], [deltanet]: a state is carried, not a cache
        return state_frame(sources.comp, step, head, modes.decimals)
    dec = _decoding(sources, modes.schedule)
    focus, extra = decode_panes(dec, step, head, modes.decimals)
    return Frame(decode_explanation(dec, step, head, modes.decimals), focus, extra, (), "")


def _next_schedule(modes: Modes) -> Modes:
    following = SCHEDULES[(SCHEDULES.index(modes.schedule) + 1) % len(SCHEDULES)]  # prefill → chunked → tokens
    return replace(modes, schedule=following, side_step=0)


def _steps(sources: Sources, modes: Modes, head: int) -> int:
    return sources.comp.scenario.n if carries_state(sources.comp) else _decoding(sources, modes.schedule).count


VIEW = side_views.BY_NAME["cache"]  # declared there (its key, words and help); its behaviour is here


def _stepped_lines(step: DecodeStep, r: int, token: str, scale: str, exact_scale: bool, divisor: float,
                   added: Matrix | None, plus: str, stepper: Any, decimals: int) -> list[str]:
    """``scaled[AI] = q·K_cacheᵀ/√3 = …``, then the part's step written as it says, plus any term:
    ``capped[AI] = 50·tanh(scaled/50) = 50·tanh([…]/50) = […]``."""
    scores = step.scores[r]
    texts, scaled = fit(lambda *v: np.asarray(v[0]) / (divisor if exact_scale else v[1]),
                        [scores] + ([] if exact_scale else [divisor]), scores / divisor, decimals)
    out = [f"scaled[{token}] = q·K_cacheᵀ/{scale if exact_scale else 'scale'}"
           f" = {texts[0]}/{scale if exact_scale else texts[1]} = {scaled}"]
    kept = step.scaled[r]
    operands: list[float | Matrix] = [kept] + ([] if added is None else [added])

    def stepped_row(*v: float | Matrix) -> Matrix:
        out = stepper.scores_step(np.asarray(v[0], dtype=float))
        return out + np.asarray(v[-1]) if added is not None else out  # type: ignore[no-any-return]

    assert step.stepped is not None
    texts, stepped = fit(stepped_row, operands, step.stepped[r] + (0 if added is None else added), decimals)
    name = "logits" if added is not None else stepper.stepped_name
    with_term = f" + {texts[-1]}" if added is not None else ""
    out.append(f"{name}[{token}] = {stepper.written('scaled', exact)}{plus}"
               f" = {stepper.written(texts[0], exact)}{with_term} = {stepped}")
    return out
