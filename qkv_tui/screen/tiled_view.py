"""The tiled (FlashAttention) view as plain data: panes and explanation for one operation of one head."""

from __future__ import annotations

import math

import numpy as np

from qkv_tui.core.fmt import is_integral
from qkv_tui.core.scenario import Matrix
from qkv_tui.screen.view import Explanation, PaneSpec, column_widths
from qkv_tui.teach.arith import fit
from qkv_tui.teach.tiled import PHASE_NAMES, PHASES, TiledHead, TileOp, memory_line

MAX_ROWS = 4  # the explanation works this many query rows of a block; the panes hold the rest

MEANING = {
    "scores": "Only this tile's scores exist: the block's Queries against the tile's Keys. The full score matrix"
              " is never formed, so memory stays one tile wide however long the sequence.",
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
                 " because Õ and ℓ carry the same e^(−m) factor, which cancels.",
}


def _divisor(th: TiledHead) -> tuple[str, float]:
    hr = th.comp.heads[th.head]
    return (f"√{hr.d_k}", math.sqrt(hr.d_k)) if hr.scale_is_default else (f"{hr.scale:g}", hr.scale)


def _names(labels: tuple[str, ...], span: range) -> str:
    """``I..love`` for a range of tokens; one token alone."""
    return labels[span.start] if len(span) == 1 else f"{labels[span.start]}..{labels[span.stop - 1]}"


def op_first_tile(th: TiledHead, qblock: int) -> int:
    """The first tile a query block visits (tiles the mask forbids entirely are skipped)."""
    return int(np.flatnonzero(th.needed[qblock])[0])


def op_lines(th: TiledHead, op: TileOp, decimals: int) -> list[str]:
    """The operation's arithmetic, one line per query row, each checkable on a calculator."""
    sc = th.comp.scenario
    tokens, keys = sc.labels, sc.key_labels
    lines: list[str] = []
    visit, end = op.visit, op.end
    rows = end.rows
    shown = list(rows)[:MAX_ROWS]
    divisor_text, div = _divisor(th)
    hr = th.comp.heads[th.head]
    for r, i in enumerate(shown):
        tok = tokens[i]
        if op.phase == "normalise":
            (acc, ell), out = fit(lambda a, b: a / b, [end.O_acc[r], float(end.ell[r])], end.out[r], decimals)
            lines.append(f"O[{tok}] = Õ/ℓ = {acc}/{ell} = {out}")
            continue
        assert visit is not None
        tile = _names(keys, visit.cols)
        allowed = visit.allowed[r]
        S = visit.S[r]
        if op.phase in ("exps", "accumulate") and not allowed.any():
            sign = "p = 0 for every key" if op.phase == "exps" else "Õ unchanged"
            lines.append(f"{sign} of this tile for {tok}: the mask allows {tok} none of {tile}")
            continue
        if op.phase == "scores":
            dots = visit.dots[r]
            q_name, k_name = ("Q_rot", "K_rot") if hr.Q_rot is not None else ("Q", "K")
            exact = hr.scale_is_default  # √d_k is written as such; a scenario's own scale is a number
            symbolic = f"{q_name}[{tok}]·{k_name}[{tile}]ᵀ/{divisor_text if exact else 'scale'}"
            bias = None if hr.bias is None else hr.bias[i, visit.cols.start:visit.cols.stop]
            operands: list[float | Matrix] = [dots] + ([] if exact else [div]) + ([] if bias is None else [bias])

            def scaled(*v: float | Matrix, exact: bool = exact, has_bias: bool = bias is not None) -> Matrix:
                k = div if exact else v[1]
                out = np.asarray(v[0]) / k
                return out + np.asarray(v[-1]) if has_bias else out

            texts, s = fit(scaled, operands, dots / div + (0 if bias is None else bias), decimals)
            written = f"{texts[0]}/{divisor_text if exact else texts[1]}" + (f" + {texts[-1]}" if bias is not None else "")
            arithmetic = f"{symbolic}{' + bias' if bias is not None else ''} = {written} = {s}"
            masked = ""
            if not allowed.all():
                hidden = ", ".join(keys[j] for j, a in zip(visit.cols, allowed) if not a)
                after = "[" + ", ".join("−∞" if not a else t for t, a in zip(s.strip("[]").split(", "), allowed)) + "]"
                masked = f"; with the mask: {after} ({hidden} not allowed)"
            lines.append(f"S[{tok}] = {arithmetic}{masked}")
            if hr.sink is not None and r == 0 and visit.ktile == op_first_tile(th, op.qblock):
                lines.append(f"    the sink joins as a column with no Value: m starts at its logit {hr.sink:g},"
                             f" ℓ at e^({hr.sink:g} − {hr.sink:g}) = 1, Õ at 0")
        elif op.phase == "tile_max":
            ops, res = fit(lambda *v: max(v), [float(v) for v in S], float(visit.tile_max[r]), decimals)
            lines.append(f"m̃[{tok}] = max({', '.join(ops)}) = {res}")
        elif op.phase == "new_max":
            ops, res = fit(max, [float(visit.m_old[r]), float(visit.tile_max[r])], float(visit.m_new[r]), decimals)
            lines.append(f"m[{tok}] = max(m_old, m̃) = max({ops[0]}, {ops[1]}) = {res}")
        elif op.phase == "rescale":
            m_old, m_new, alpha = float(visit.m_old[r]), float(visit.m_new[r]), float(visit.alpha[r])
            if math.isinf(m_new):
                lines.append(f"α[{tok}]: nothing to rescale, no key allowed to {tok} so far")
                continue
            if math.isinf(m_old):
                lines.append(f"α[{tok}] = e^(m_old − m) = e^(−∞) = 0; nothing gathered yet: ℓ and Õ are still 0")
                continue
            (a, b), res = fit(lambda x, y: math.exp(x - y), [m_old, m_new], alpha, decimals, alpha == 1.0)
            note = "; the max did not move: nothing to undo" if m_old == m_new else ""
            lines.append(f"α[{tok}] = e^(m_old − m) = e^({a} − {b}) = {res}{note}")
            (al, lo), ls = fit(lambda x, y: x * y, [alpha, float(visit.l_old[r])], float(visit.l_scaled[r]), decimals)
            lines.append(f"ℓ[{tok}] = α·ℓ = {al}·{lo} = {ls}")
            (al2, oo), os_ = fit(lambda x, y: x * y, [alpha, visit.O_old[r]], visit.O_scaled[r], decimals)
            lines.append(f"Õ[{tok}] = α·Õ = {al2}·{oo} = {os_}")
        elif op.phase == "exps":
            m_new = float(visit.m_new[r])
            (srow, mm), prow = fit(lambda s, m: np.where(np.isinf(s), 0.0, np.exp(s - m)), [S, m_new], visit.P[r],
                                   decimals)
            lines.append(f"p[{tok}] = e^(S − m) = e^({srow} − {mm}) = {prow}")
            terms = [float(visit.l_scaled[r]), *(float(p) for p, a in zip(visit.P[r], allowed) if a)]
            ops, res = fit(lambda *v: sum(v), terms, float(visit.l_new[r]), decimals, plain_sum=True)
            lines.append(f"ℓ[{tok}] = ℓ + Σp = {' + '.join(ops)} = {res}")
        elif op.phase == "accumulate":
            V = hr.V[visit.cols.start:visit.cols.stop]
            live = [(float(p), V[c]) for c, (p, a) in enumerate(zip(visit.P[r], allowed)) if a]
            operands = [visit.O_scaled[r]]
            for p, v in live:
                operands += [p, v]

            def weighted(acc: Matrix, *pv: float | Matrix) -> Matrix:
                total = np.array(acc, dtype=float)
                for k in range(0, len(pv), 2):
                    total = total + np.asarray(pv[k]) * np.asarray(pv[k + 1])
                return total

            ops, res = fit(weighted, operands, visit.O_new[r], decimals)
            pieces = " + ".join(f"{ops[k]}·{ops[k + 1]}" for k in range(1, len(ops), 2))
            lines.append(f"Õ[{tok}] = Õ + p·V[{tile}] = {ops[0]} + {pieces} = {res}")
    if len(rows) > len(shown):
        lines.append(f"(and {len(rows) - len(shown)} more rows of this block: see the panes)")
    return lines


def tiled_explanation(th: TiledHead, index: int, decimals: int) -> Explanation:
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
        err = float(np.abs(op.end.out - hr.output[rows.start:rows.stop]).max())
        mark = "✓" if np.allclose(op.end.out, hr.output[rows.start:rows.stop], rtol=1e-9, atol=1e-12) else "✗"
        scope = "equal to the Mix stage" if last else f"rows {_names(sc.labels, rows)} equal to the Mix stage"
        if last:
            mark = "✓" if th.matches else "✗"
            err = th.max_error
        details.append(f"{mark} {scope} (max |diff| {err:.1e})")
    name = hr.name
    heads = len(th.comp.heads)
    formula = (("m=max(m,m̃)", op.phase in ("tile_max", "new_max")), (" ", False),
               ("α=e^(m_old−m)", op.phase == "rescale"), (" ", False),
               ("ℓ=α·ℓ+Σp", op.phase in ("rescale", "exps")), (" ", False),
               ("Õ=α·Õ+p·V", op.phase in ("rescale", "accumulate")), (" ", False),
               ("O=Õ/ℓ", op.phase == "normalise"))
    stages = tuple((PHASE_NAMES[p], "current" if p == op.phase else "todo") for p in (*PHASES, "normalise"))
    return Explanation(
        stage_label=f"op {index + 1}/{len(th)}",
        counter=f"block {op.qblock + 1}/{blocks} · {where}",
        head_label=f"{name} ({th.head + 1}/{heads})" if heads > 1 else "",
        arithmetic=lines[0] if lines else PHASE_NAMES[op.phase],
        details=tuple(details),
        meaning=MEANING[op.phase],
        formula=formula,
        stages=stages,
    )


def _pane(key: str, title: str, values: Matrix, rows: tuple[str, ...], cols: tuple[str, ...], decimals: int,
          filled: int | None = None, current: tuple[int, int | None] | None = None,
          block: frozenset[int] = frozenset(), heat: bool = False, row_max: bool = False,
          subtitle: str = "") -> PaneSpec:
    # its own array: a pane knows a new state by its source, and two blocks' slices of Q share theirs
    values = np.array(np.atleast_2d(values))
    integral = not heat and is_integral(values)
    return PaneSpec(
        key=key, title=f"{title}  {values.shape[0]}×{values.shape[1]}", subtitle=subtitle, values=values,
        row_labels=rows, col_labels=cols, integral=integral,
        col_widths=column_widths(values, integral, decimals, cols),
        filled=values.size if filled is None else filled, current=current, rows=block, heat=heat,
        mark_row_max=row_max, decimals=decimals,
    )


def _running(th: TiledHead, op: TileOp) -> tuple[Matrix, Matrix, Matrix]:
    """(m, ℓ, Õ) of the current block's rows as they stand after this operation."""
    v, end = op.visit, op.end
    if v is None:
        return end.m, end.ell, end.O_acc
    phase = PHASES.index(op.phase)
    m = v.m_old if phase < PHASES.index("new_max") else v.m_new
    ell = v.l_old if phase < PHASES.index("rescale") else (v.l_scaled if phase < PHASES.index("exps") else v.l_new)
    acc = v.O_old if phase < PHASES.index("rescale") else (v.O_scaled if op.phase != "accumulate" else v.O_new)
    return m, ell, acc


def tiled_panes(th: TiledHead, index: int, decimals: int) -> tuple[list[PaneSpec], list[PaneSpec]]:
    """(focus panes, context panes) at one operation of the tiled view."""
    sc = th.comp.scenario
    hr = th.comp.heads[th.head]
    op = th.op(index)
    rows = op.end.rows
    tokens, keys = sc.labels, sc.key_labels
    block_labels = tokens[rows.start:rows.stop]
    name = hr.name if len(th.comp.heads) > 1 else ""
    m_fin, l_fin, acc_fin, out_fin = th.finals
    m, ell, acc = _running(th, op)
    state = np.column_stack([m_fin, l_fin])  # (n, 2) earlier blocks final, this block as it stands
    state[rows.start:rows.stop] = np.column_stack([m, ell])
    acc_all = acc_fin.copy()
    acc_all[rows.start:rows.stop] = acc
    col = {"new_max": 0, "rescale": 1, "exps": 1, "normalise": 1}.get(op.phase)
    in_block = frozenset(rows)
    state_pane = _pane("t_ml", "running m, ℓ", state, tokens, ("m", "ℓ"), decimals, filled=rows.stop * 2,
                       current=(rows.start, col) if col is not None else None, block=in_block, subtitle=name)
    changed_acc = op.phase in ("rescale", "accumulate")
    acc_pane = _pane("t_acc", "Õ (not yet divided)", acc_all, tokens, tuple(str(c) for c in range(hr.d_v)), decimals,
                     filled=rows.stop * hr.d_v, current=(rows.start, None) if changed_acc else None, block=in_block,
                     subtitle=name)
    done = rows.stop if op.phase == "normalise" else rows.start
    out_pane = _pane("t_out", "O = Õ/ℓ", out_fin, tokens, tuple(str(c) for c in range(hr.d_v)), decimals,
                     filled=done * hr.d_v, current=(rows.start, None) if op.phase == "normalise" else None,
                     subtitle=name)
    mix_pane = _pane("t_mix", "Mix stage output", hr.output, tokens, tuple(str(c) for c in range(hr.d_v)), decimals,
                     block=in_block if op.phase == "normalise" else frozenset(), subtitle=name)
    v = op.visit
    if v is None:
        return [state_pane, acc_pane, out_pane], [mix_pane]
    tile_keys = keys[v.cols.start:v.cols.stop]
    phase = PHASES.index(op.phase)
    s_pane = _pane("t_S", "S, tile only", v.S, block_labels,
                   tile_keys, decimals, row_max=True,
                   current=(0, None) if op.phase == "scores" else None, subtitle=name)
    p_pane = _pane("t_P", "p = e^(S − m)", v.P, block_labels, tile_keys, decimals,
                   filled=v.P.size if phase >= PHASES.index("exps") else 0, heat=True,
                   current=(0, None) if op.phase == "exps" else None, subtitle=name)
    V_tile = hr.V[v.cols.start:v.cols.stop]
    v_pane = _pane("t_V", "V tile", V_tile, tile_keys, tuple(str(c) for c in range(hr.d_v)), decimals,
                   block=frozenset(range(len(v.cols))) if op.phase == "accumulate" else frozenset(), subtitle=name)
    q_pane = _pane("t_Q", "Q block", hr.Q[rows.start:rows.stop], block_labels,
                   tuple(str(c) for c in range(hr.d_k)), decimals, subtitle=name)
    k_pane = _pane("t_K", "K tile", hr.K[v.cols.start:v.cols.stop], tile_keys, tuple(str(c) for c in range(hr.d_k)),
                   decimals, subtitle=name)
    if op.phase in ("exps", "accumulate"):
        focus = [s_pane, p_pane, v_pane, state_pane, acc_pane]
        context = [q_pane, k_pane, out_pane, mix_pane]
    else:
        focus = [s_pane, state_pane, acc_pane]
        context = [q_pane, k_pane, p_pane, v_pane, out_pane, mix_pane]
    return focus, context
