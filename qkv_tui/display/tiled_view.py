"""The tiled (FlashAttention) view as plain data: panes and explanation for one operation of one head."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from qkv_tui.core import part_questions as ask
from qkv_tui.core.engine import Computation
from qkv_tui.core.fmt import fmt, is_integral, operand, vector
from qkv_tui.core.scenario import Matrix
from qkv_tui.display import side_views
from qkv_tui.display.frame import Frame
from qkv_tui.display.fused_view import fused_explanation, fused_panes
from qkv_tui.display.modes import Modes
from qkv_tui.display.side_view import Sources
from qkv_tui.display.state_view import carries_state, no_tiles_frame
from qkv_tui.display.tiled_back_view import back_explanation, back_panes
from qkv_tui.display.view import Explanation, PaneSpec
from qkv_tui.display.view import matrix_pane as _pane
from qkv_tui.teach.arith import fit
from qkv_tui.teach.fused import PAGES, Fused, fused
from qkv_tui.teach.stages.printed import exact as exact_text
from qkv_tui.teach.tiled import PHASE_NAMES, PHASES, TiledHead, TileOp, memory_line, tiled
from qkv_tui.teach.tiled_backward import TiledBackward, tiled_backward

MAX_ROWS = 4  # the explanation works this many query rows of a block; the panes hold the rest

MEANING = {
    "scores": "Only this tile's scores exist: the block's Queries against the tile's Keys, in fast on-chip memory."
              " The full score matrix is never formed, so it is never written to the GPU's main memory (HBM) and"
              " read back: FlashAttention's win is that traffic. Its extra memory still grows with the sequence:"
              " m and ℓ for every row, O(N). One size B here stands for both B_r (query rows per block) and B_c"
              " (keys per tile); the kernels choose them apart, from the on-chip memory and the head size.",
    "tile_max": "The largest score of each row within this tile: the running max may have to move up to it.",
    "new_max": "The running max m is the largest score seen so far in the row. Exponentials are taken against it,"
               " so none overflows.",
    "rescale": "What α undoes: ℓ and Õ were sums of e^(s − m_old). Multiplying by α = e^(m_old − m_new) turns each"
               " term into e^(s − m_new), as if the new max had been known from the start. When the max did not"
               " move, α = 1 and nothing changes; before the first tile there is nothing to rescale.",
    "exps": "The tile's exponentials against the running max join the running sum ℓ: the softmax denominator,"
            " built a tile at a time.",
    "accumulate": "The tile's Value rows, weighted by the same exponentials, join the output accumulator Õ: the"
                  " numerator of softmax·V, not yet divided.",
    "normalise": "After the block's last tile, one division per row: O = Õ / ℓ. It equals softmax(scores)·V,"
                 " because Õ and ℓ carry the same e^(−m) factor, which cancels. This is FlashAttention-2's order:"
                 " FlashAttention-1 divided its O by ℓ after every tile (and rescaled it back at the next);"
                 " FlashAttention-2 divides once, here, and keeps only L = m + log ℓ per row for the backward pass.",
}


def after_notes(comp: Computation, head: int) -> list[str]:
    """Where a part that acts after the map (the output gate) meets the tiles, as the part says: after them, on
    the final O; ``x`` is what the Query projection reads."""
    return ask.said(comp.heads[head], "tiles.after", x="X̂" if comp.norm is not None else "X")


def _divisor(th: TiledHead) -> tuple[str, float]:
    hr = th.comp.heads[th.head]
    return (f"√{hr.d_k}", math.sqrt(hr.d_k)) if hr.scale_is_default else (f"{hr.scale:g}", hr.scale)


def _names(labels: tuple[str, ...], span: range) -> str:
    """``I..love`` for a range of tokens; one token alone."""
    return labels[span.start] if len(span) == 1 else f"{labels[span.start]}..{labels[span.stop - 1]}"


def op_first_tile(th: TiledHead, qblock: int) -> int:
    """The first tile a query block visits (tiles the mask forbids entirely are skipped)."""
    return int(np.flatnonzero(th.needed[qblock])[0])


def _num(x: float, places: int) -> str:
    """A worked number inside a line: ``0.562``, ``(-1.155)``, ``−∞``, ``0`` for a masked key's e^−∞."""
    return operand(x, False, places)


def _row(values: Matrix, places: int, masked_zero: Matrix | None = None) -> str:
    """``[0.099, 1.000]``; a masked key's exponential is the bare 0 the trace writes."""
    texts = [fmt(float(v), False, places) for v in values]
    if masked_zero is not None:
        texts = ["0" if not a else s for s, a in zip(texts, masked_zero)]
    return "[" + ", ".join(texts) + "]"


def op_lines(th: TiledHead, op: TileOp, decimals: int) -> list[str]:
    """The operation's arithmetic, one line per query row, each checkable on a calculator.

    The scores are the exact ones (a result, as in the trace's Scale stage); from there on every
    number is worked from the ones shown before it, at the places of the row's softmax in the trace.
    """
    sc = th.comp.scenario
    tokens, keys = sc.labels, sc.key_labels
    lines: list[str] = []
    visit, end = op.visit, op.end
    rows = end.rows
    shown = list(rows)[:MAX_ROWS]
    divisor_text, div = _divisor(th)
    hr = th.comp.heads[th.head]
    worked = th.worked(op.qblock, decimals)
    over = f"/{1 << th.shift}" if th.shift else ""  # Õ sums V/2^k when V is near float64's largest number
    for r, i in enumerate(shown):
        tok = tokens[i]
        row = worked[r]
        p = row.places
        if op.phase == "normalise":
            factor = f"·{1 << th.shift}" if th.shift else ""
            lines.append(f"O[{tok}] = Õ/ℓ{factor} = {_row(row.O_acc, p)}/{_num(row.ell, p)}{factor}"
                         f" = {vector(row.out, False, decimals)}")
            continue
        assert visit is not None
        w = row.visits[op.number]
        tile = _names(keys, visit.cols)
        allowed = visit.allowed[r]
        if op.phase in ("exps", "accumulate") and not allowed.any():
            sign = "p = 0 for every key" if op.phase == "exps" else "Õ unchanged"
            lines.append(f"{sign} of this tile for {tok}: the mask allows {tok} none of {tile}")
            continue
        if op.phase == "scores":
            dots = visit.dots[r]
            suffix = ask.scored_suffix(hr)  # the Queries and Keys as scored: rotated, or normalised
            exact = hr.scale_is_default  # √d_k is written as such; a scenario's own scale is a number
            symbolic = f"Q{suffix}[{tok}]·K{suffix}[{tile}]ᵀ/{divisor_text if exact else 'scale'}"
            added = ask.term(hr, i, slice(visit.cols.start, visit.cols.stop))
            operands: list[float | Matrix] = [dots] + ([] if exact else [div]) + ([] if added is None else [added])

            # the tile's scores stepped (soft-capped) before the term (the bias), as the trace's cells
            step, stepper = ask.step(hr), ask.stepper(hr)

            def scaled(*v: float | Matrix, exact: bool = exact, has_term: bool = added is not None,
                       step: Callable[[Matrix], Matrix] = step) -> Matrix:
                k = div if exact else v[1]
                out = step(np.asarray(v[0]) / k)
                return out + np.asarray(v[-1]) if has_term else out

            texts, s = fit(scaled, operands, step(dots / div) + (0 if added is None else added), decimals)
            written = f"{texts[0]}/{divisor_text if exact else texts[1]}"
            if stepper is not None:
                written, symbolic = stepper.written(written, exact_text), stepper.written(symbolic, exact_text)
            written += f" + {texts[-1]}" if added is not None else ""
            arithmetic = f"{symbolic}{f' + {ask.term_name(hr)}' if added is not None else ''} = {written} = {s}"
            masked = ""
            if not allowed.all():
                hidden = ", ".join(keys[j] for j, a in zip(visit.cols, allowed) if not a)
                after = "[" + ", ".join("−∞" if not a else t for t, a in zip(s.strip("[]").split(", "), allowed)) + "]"
                masked = f"; with the mask: {after} ({hidden} not allowed)"
            lines.append(f"S[{tok}] = {arithmetic}{masked}")
            if r == 0 and visit.ktile == op_first_tile(th, op.qblock):  # a column beside the map (a sink) joins
                lines += ask.said(hr, "tiles.start")
        elif op.phase == "tile_max":
            live = [fmt(float(s), False, p) for s in w.S]
            lines.append(f"m̃[{tok}] = max({', '.join(live)}) = {fmt(w.tile_max, False, p)}")
        elif op.phase == "new_max":
            lines.append(f"m[{tok}] = max(m_old, m̃) = max({_num(w.m_old, p)}, {_num(w.tile_max, p)})"
                         f" = {fmt(w.m_new, False, p)}")
        elif op.phase == "rescale":
            if math.isinf(w.m_new):
                lines.append(f"α[{tok}]: nothing to rescale, no key allowed to {tok} so far")
                continue
            if w.alpha_shift is None:
                lines.append(f"α[{tok}] = e^(m_old − m) = e^(−∞) = 0; nothing gathered yet: ℓ and Õ are still 0")
                continue
            note = "; the max did not move: nothing to undo" if w.m_old == w.m_new else ""
            lines.append(f"α[{tok}] = e^(m_old − m) = e^({_num(w.m_old, p)} − {_num(w.m_new, p)})"
                         f" = e^{fmt(w.alpha_shift, False, p)} = {fmt(w.alpha, False, p)}{note}")
            lines.append(f"ℓ[{tok}] = α·ℓ = {_num(w.alpha, p)}·{_num(w.l_old, p)} = {fmt(w.l_scaled, False, p)}")
            lines.append(f"Õ[{tok}] = α·Õ = {_num(w.alpha, p)}·{_row(w.O_old, p)} = {_row(w.O_scaled, p)}")
        elif op.phase == "exps":
            lines.append(f"p[{tok}] = e^(S − m) = e^({_row(w.S, p)} − {_num(w.m_new, p)})"
                         f" = e^{_row(w.shifted, p)} = {_row(w.P, p, allowed)}")
            terms = [_num(w.l_scaled, p), *(_num(float(x), p) for x, a in zip(w.P, allowed) if a)]
            lines.append(f"ℓ[{tok}] = ℓ + Σp = {' + '.join(terms)} = {fmt(w.l_new, False, p)}")
        elif op.phase == "accumulate":
            v_int = is_integral(hr.V)
            pieces = " + ".join(f"{_num(float(x), p)}·{vector(w.V[c], v_int, p)}{over}"
                                for c, (x, a) in enumerate(zip(w.P, allowed)) if a)
            lines.append(f"Õ[{tok}] = Õ + p·V[{tile}]{over} = {_row(w.O_scaled, p)} + {pieces} = {_row(w.O_new, p)}")
    if len(rows) > len(shown):
        lines.append(f"(and {len(rows) - len(shown)} more rows of this block: see the panes)")
    return lines


def tiled_explanation(th: TiledHead, index: int, decimals: int, total: int | None = None) -> Explanation:
    """Operation ``index`` of the tiled forward; ``total`` is every step of the view (the fused kernel's pages and
    the backward after the forward), so every page counts out of the same number."""
    sc = th.comp.scenario
    op = th.op(index)
    lines = op_lines(th, op, decimals)
    blocks, tiles = len(th.blocks), len(th.tiles)
    hr = th.comp.heads[th.head]
    details = lines[1:]
    if op.visit is not None:
        where = f"tile {op.visit.ktile + 1}/{tiles}"
        skipped = th.skipped_before(op.qblock, op.visit.ktile)
    else:
        where = "O = Õ/ℓ"
        skipped = th.skipped_before(op.qblock, tiles - 1)
    last = index == len(th) - 1
    if th.skipped and op.phase in ("scores", "normalise"):
        details.append(f"tiles skipped: {skipped} so far, {th.skipped} of {th.total_tiles} in all"
                       " (the mask forbids every cell: never loaded, never computed)")
    if op.phase == "scores" or last:
        details.append(memory_line(sc.n, sc.m, th.tile, hr.d_v))
    if op.phase == "normalise":
        rows = op.end.rows
        ok, check = th.check() if last else th.check(rows, op.end.out)
        scope = "the Mix stage" if last else f"the Mix stage in rows {_names(sc.labels, rows)}"
        details.append(f"{'✓ equal to' if ok else '✗ DIFFERENT from'} {scope} {check}")
        details += after_notes(th.comp, th.head)
    if th.shift and op.phase in ("accumulate", "normalise"):
        factor = 1 << th.shift
        details.append(f"Õ sums V/{factor} (2^{th.shift}): these Values are so near float64's largest number that Õ,"
                       f" a sum of up to ℓ of them, would overflow; O = Õ/ℓ·{factor}, and a power of two changes"
                       " no digit")
    name = hr.name
    heads = len(th.comp.heads)
    formula = (("m=max(m,m̃)", op.phase in ("tile_max", "new_max")), (" ", False),
               ("α=e^(m_old−m)", op.phase == "rescale"), (" ", False),
               ("ℓ=α·ℓ+Σp", op.phase in ("rescale", "exps")), (" ", False),
               ("Õ=α·Õ+p·V", op.phase in ("rescale", "accumulate")), (" ", False),
               ("O=Õ/ℓ", op.phase == "normalise"))
    stages = tuple((PHASE_NAMES[p], "current" if p == op.phase else "todo") for p in (*PHASES, "normalise"))
    return Explanation(
        stage_label=f"op {index + 1}/{len(th) if total is None else total}",
        counter=f"block {op.qblock + 1}/{blocks} · {where}",
        head_label=f"{name} ({th.head + 1}/{heads})" if heads > 1 else "",
        arithmetic=lines[0] if lines else PHASE_NAMES[op.phase],
        details=tuple(details),
        meaning=MEANING[op.phase],
        formula=formula,
        stages=stages,
    )


def _running(th: TiledHead, op: TileOp, decimals: int) -> tuple[Matrix, Matrix, Matrix]:
    """(m, ℓ, Õ) of the current block's rows as they stand after this operation, as the lines work them."""
    worked = th.worked(op.qblock, decimals)
    if op.visit is None:
        return (np.array([w.m for w in worked]), np.array([w.ell for w in worked]),
                np.array([w.O_acc for w in worked]))
    phase = PHASES.index(op.phase)
    visits = [w.visits[op.number] for w in worked]
    m = [v.m_old if phase < PHASES.index("new_max") else v.m_new for v in visits]
    ell = [v.l_old if phase < PHASES.index("rescale") else (v.l_scaled if phase < PHASES.index("exps") else v.l_new)
           for v in visits]
    acc = [v.O_old if phase < PHASES.index("rescale") else (v.O_scaled if op.phase != "accumulate" else v.O_new)
           for v in visits]
    return np.array(m), np.array(ell), np.array(acc)


def tiled_panes(th: TiledHead, index: int, decimals: int) -> tuple[list[PaneSpec], list[PaneSpec]]:
    """(focus panes, context panes) at one operation of the tiled view.

    m, ℓ and Õ are the current block's only: FlashAttention keeps them on chip for the block's
    rows and drops them once O is written. O fills in block by block.
    """
    sc = th.comp.scenario
    hr = th.comp.heads[th.head]
    op = th.op(index)
    rows = op.end.rows
    tokens, keys = sc.labels, sc.key_labels
    block_labels = tokens[rows.start:rows.stop]
    name = hr.name if len(th.comp.heads) > 1 else ""
    out_fin = th.output
    m, ell, acc = _running(th, op, decimals)
    dims_v = tuple(str(c) for c in range(hr.d_v))
    col = {"new_max": 0, "rescale": 1, "exps": 1, "normalise": 1}.get(op.phase)
    state_pane = _pane("t_ml", "running m, ℓ", np.column_stack([m, ell]), block_labels, ("m", "ℓ"), decimals,
                       current=(0, col) if col is not None else None, subtitle=name, worked=True)
    changed_acc = op.phase in ("rescale", "accumulate")
    title = "Õ (not yet divided)" if not th.shift else f"Õ (V/{1 << th.shift}, not yet divided)"
    acc_pane = _pane("t_acc", title, acc, block_labels, dims_v, decimals,
                     current=(0, None) if changed_acc else None, subtitle=name, worked=True)
    done = rows.stop if op.phase == "normalise" else rows.start
    out_pane = _pane("t_out", "O = Õ/ℓ", out_fin, tokens, dims_v, decimals,
                     filled=done * hr.d_v, current=(rows.start, None) if op.phase == "normalise" else None,
                     subtitle=name)
    mix_pane = _pane("t_mix", "Mix stage output", hr.output, tokens, dims_v, decimals,
                     block=frozenset(rows) if op.phase == "normalise" else frozenset(), subtitle=name)
    v = op.visit
    if v is None:
        return [state_pane, acc_pane, out_pane], [mix_pane]
    tile_keys = keys[v.cols.start:v.cols.stop]
    phase = PHASES.index(op.phase)
    s_pane = _pane("t_S", "S, tile only", v.S, block_labels,
                   tile_keys, decimals, row_max=True,
                   current=(0, None) if op.phase == "scores" else None, subtitle=name)
    P = np.array([w.visits[op.number].P for w in th.worked(op.qblock, decimals)])  # as the lines work them
    p_pane = _pane("t_P", "p = e^(S − m)", P, block_labels, tile_keys, decimals,
                   filled=P.size if phase >= PHASES.index("exps") else 0, heat=True,
                   current=(0, None) if op.phase == "exps" else None, subtitle=name)
    V_tile = hr.V[v.cols.start:v.cols.stop]
    v_pane = _pane("t_V", "V tile", V_tile, tile_keys, dims_v, decimals,
                   block=frozenset(range(len(v.cols))) if op.phase == "accumulate" else frozenset(), subtitle=name)
    # the scores are those of the Queries and Keys as scored: rotated, or normalised, where the scenario says so
    scored = ask.scored_suffix(hr)
    q_pane = _pane("t_Q", f"Q{scored} block", hr.Q_used[rows.start:rows.stop], block_labels,
                   tuple(str(c) for c in range(hr.d_k)), decimals, subtitle=name)
    k_pane = _pane("t_K", f"K{scored} tile", hr.K_used[v.cols.start:v.cols.stop], tile_keys,
                   tuple(str(c) for c in range(hr.d_k)), decimals, subtitle=name)
    if op.phase in ("exps", "accumulate"):
        focus = [s_pane, p_pane, v_pane, state_pane, acc_pane]
        context = [q_pane, k_pane, out_pane, mix_pane]
    else:
        focus = [s_pane, state_pane, acc_pane]
        context = [q_pane, k_pane, p_pane, v_pane, out_pane, mix_pane]
    return focus, context


def _tiling(sources: Sources, head: int) -> TiledHead:
    return sources.kept(("tiles", head), lambda: tiled(sources.comp, head))


def _backward(sources: Sources, head: int) -> TiledBackward | None:
    """FlashAttention-2's backward after the forward's operations, where the scenario has [backward]."""
    if sources.comp.scenario.backward is None:
        return None
    return sources.kept(("tiles-backward", head), lambda: tiled_backward(_tiling(sources, head)))


def _fused(sources: Sources, head: int) -> Fused:
    return sources.kept(("tiles-fused", head), lambda: fused(_tiling(sources, head)))


def _steps(sources: Sources, modes: Modes, head: int) -> int:
    if carries_state(sources.comp):  # [linear], [deltanet]: one frame that says there are no tiles
        return 1
    back = _backward(sources, head)
    return len(_tiling(sources, head)) + len(PAGES) + (0 if back is None else len(back))


def _frame(sources: Sources, modes: Modes, step: int, head: int) -> Frame:
    if carries_state(sources.comp):  # [linear], [deltanet]: no n × n matrix to tile
        return no_tiles_frame(sources.comp, head)
    th = _tiling(sources, head)
    back = _backward(sources, head)
    forward = len(th) + len(PAGES)  # the forward's operations, then what a fused kernel keeps and P rebuilt from it
    if back is not None and step >= forward:
        focus, extra = back_panes(back, step - forward, modes.decimals)
        return Frame(back_explanation(back, step - forward, forward, modes.decimals), focus, extra, (), "")
    total = forward + (0 if back is None else len(back))
    if step >= len(th):
        page = step - len(th)
        focus, extra = fused_panes(_fused(sources, head), page, modes.decimals)
        return Frame(fused_explanation(_fused(sources, head), page, len(th), total, modes.decimals), focus, extra,
                     (), "")
    focus, extra = tiled_panes(th, step, modes.decimals)
    return Frame(tiled_explanation(th, step, modes.decimals, total), focus, extra, (), "")


VIEW = side_views.BY_NAME["tiles"]  # declared there (its key, words and help); its behaviour is here
