"""FlashAttention-2's backward in the tiles view (t), where the scenario has [backward]: its operations follow
the forward's, as plain data (teach/tiled_backward.py computes them). Every line is checkable on a calculator:
its result recomputes from the operands it shows."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from qkv_tui.core import part_questions as ask
from qkv_tui.core.scenario import Matrix
from qkv_tui.display.view import Explanation, PaneSpec
from qkv_tui.display.view import matrix_pane as _pane
from qkv_tui.kernels.softmax import from_logsumexp
from qkv_tui.teach.arith import fit
from qkv_tui.teach.tiled_backward import ORDER, PHASE_NAMES, BackOp, Pair, TiledBackward

MAX_ROWS = 4  # the explanation works this many rows of a block (or keys of a tile); the panes hold the rest

MEANING = {
    "L": "The forward kept only O and L = m + log ℓ per row, never the n×m weights. From L alone each weight comes"
         " back exactly: P = e^(S − m)/ℓ = e^(S − L). One number per row is the backward's whole memory of the"
         " softmax.",
    "D": "D is the softmax Jacobian's shared term, Σⱼ Pᵢⱼ·dPᵢⱼ, and it equals rowsum(dO ⊙ O): one dot product per row"
         " from what is already there, worked once before the loop, so no tile needs the whole row of dP.",
    "P": "The outer loop walks the tiles of keys, the inner one the blocks of queries: this tile's scores are"
         " computed again (cheaper than storing them) and turned back into weights with the saved L.",
    "dV": "V[j] reached every output row i with weight Pᵢⱼ, so its gradient gathers Pᵢⱼ·dO[i]: this block's share"
          " joins the tile's dV, kept on chip while the blocks go by.",
    "dP": "How the loss would change with each weight: dO[i]·V[j], a dot product per cell of the tile.",
    "dS": "The softmax's Jacobian, one cell at a time: dS = P ⊙ (dP − D). A masked cell has P = 0, so its gradient"
          " is exactly 0: the mask lets nothing through, either way.",
    "dQ": "Scores are Q·Kᵀ/scale, so a Query row's gradient gathers dS·K/scale over the keys: each tile adds its share"
          " to the block's dQ (FlashAttention-2 adds it to dQ in main memory, the one write it cannot keep on chip).",
    "dK": "The same product read the other way: each key's gradient gathers dSᵀ·Q/scale over the query rows; the"
          " tile's dK and dV are written once, after its last block.",
    "check": "The tiled dQ, dK and dV are sums of the same terms as the Backward stages' dQ = dS·K/scale,"
             " dK = dSᵀ·Q/scale and dV = Pᵀ·dO, gathered in another order: equal up to float64 rounding.",
}

def _stepper(tb: TiledBackward) -> Any:
    """The part whose step the scores took (the soft-cap), which dQ and dK gather the gradient back through."""
    return ask.stepper(tb.th.comp.heads[tb.head])


def _ds(tb: TiledBackward) -> str:
    """What dQ and dK gather: dS back through a part's step (dscaled through a soft-cap), dS itself without one."""
    stepper = _stepper(tb)
    return "dS" if stepper is None else str(stepper.gathered)


def meaning(tb: TiledBackward, phase: str) -> str:
    """The phase's meaning, as a part that steps the scores says it where it changes it (the soft-cap's slope)."""
    said = ask.said(tb.th.comp.heads[tb.head], f"tiles.back.meaning.{phase}", plain=MEANING[phase])
    return said[0] if said else MEANING[phase]


def phase_name(tb: TiledBackward, phase: str) -> str:
    """The formula bar's name of a phase, what dQ and dK gather for dS where a part steps the scores (dscaled)."""
    name = PHASE_NAMES[phase]
    return name.replace("dS", _ds(tb)) if phase in ("dQ", "dK") else name


def _divisor(tb: TiledBackward) -> str:
    hr = tb.th.comp.heads[tb.head]
    return f"√{hr.d_k}" if hr.scale_is_default else f"{hr.scale:g}"


def _names(labels: tuple[str, ...], span: range) -> str:
    return labels[span.start] if len(span) == 1 else f"{labels[span.start]}..{labels[span.stop - 1]}"


def _sum_terms(weights: Matrix, vectors: Matrix, keep: np.ndarray) -> tuple[list[float | Matrix], list[int]]:
    """The operands of Σ w·v over the kept terms, and which they are."""
    idx = [int(t) for t in np.flatnonzero(keep)]
    ops: list[float | Matrix] = []
    for t in idx:
        ops += [float(weights[t]), np.asarray(vectors[t])]
    return ops, idx


def _accumulate(name: str, label: str, old: Matrix, weights: Matrix, vectors: Matrix, keep: np.ndarray,
                divisor: float | None, divisor_text: str, new: Matrix, decimals: int, read: str) -> str:
    """``dV[love] = dV + Pᵀ·dO = [0, 0] + 0.518·[1, 0] + … = [0.518, 0]`` (``/√3`` where the scale divides)."""
    ops, idx = _sum_terms(weights, vectors, keep)
    if not idx:
        return f"{name}[{label}] unchanged: the mask allows no cell of this block for {label}"

    def fn(o: Matrix, *xs: float | Matrix) -> Matrix:
        total = sum((np.asarray(xs[2 * t]) * np.asarray(xs[2 * t + 1]) for t in range(len(idx))), np.zeros_like(o))
        return np.asarray(o + (total if divisor is None else total / divisor))

    texts, result = fit(fn, [np.asarray(old), *ops], new, decimals)
    terms = " + ".join(f"{texts[1 + 2 * t]}·{texts[2 + 2 * t]}" for t in range(len(idx)))
    terms = terms if divisor is None else f"({terms})/{divisor_text}"
    return f"{name}[{label}] = {name} + {read} = {texts[0]} + {terms} = {result}"


def back_lines(tb: TiledBackward, op: BackOp, decimals: int) -> list[str]:
    sc = tb.th.comp.scenario
    hr = tb.th.comp.heads[tb.head]
    tokens = sc.labels
    div_text = _divisor(tb)
    lines: list[str] = []
    if op.phase == "L":
        m, ell, _, _ = tb.th.finals
        for i in range(min(sc.n, MAX_ROWS)):
            if not math.isfinite(float(tb.L[i])):
                lines.append(f"L[{tokens[i]}] = −∞: the mask allows {tokens[i]} no key, so no weight to recompute")
                continue
            texts, res = fit(lambda a, b: a + math.log(b), [float(m[i]), float(ell[i])], float(tb.L[i]), decimals)
            lines.append(f"L[{tokens[i]}] = m + log ℓ = {texts[0]} + log({texts[1]}) = {res}")
    elif op.phase == "D":
        d = hr.d_v
        for i in range(min(sc.n, MAX_ROWS)):
            texts, res = fit(lambda *x: sum(x[t] * x[d + t] for t in range(d)), [*tb.dO[i], *hr.output[i]],
                             float(tb.D[i]), decimals)
            terms = " + ".join(f"{texts[t]}·{texts[d + t]}" for t in range(d))
            lines.append(f"D[{tokens[i]}] = Σ dO[{tokens[i]}] ⊙ O[{tokens[i]}] = {terms} = {res}")
    elif op.phase == "check":
        ok, worst = tb.check()
        lines.append(f"dQ, dK, dV of every row, tile by tile, against the Backward stages: largest difference"
                     f" {worst:.1e}")
        ds = _ds(tb)
        lines.append(f"{'✓ equal to' if ok else '✗ DIFFERENT from'} the Backward stages"
                     f" (dQ = {ds}·K/scale, dK = {ds}ᵀ·Q/scale, dV = Pᵀ·dO)")
    else:
        assert op.ktile is not None and op.qblock is not None
        lines += _pair_lines(tb, op, tb.pair(op.ktile, op.qblock), decimals, div_text)
    if op.phase in ("L", "D") and sc.n > MAX_ROWS:
        lines.append(f"(and {sc.n - MAX_ROWS} more rows: see the panes)")
    return lines


def _pair_lines(tb: TiledBackward, op: BackOp, pr: Pair, decimals: int, div_text: str) -> list[str]:
    sc = tb.th.comp.scenario
    hr = tb.th.comp.heads[tb.head]
    tokens, keys = sc.labels, sc.key_labels
    tile = _names(keys, pr.cols)
    lines: list[str] = []
    shown_rows = list(range(len(pr.rows)))[:MAX_ROWS]
    shown_keys = list(range(len(pr.cols)))[:MAX_ROWS]
    for r in shown_rows if op.phase in ("P", "dP", "dS", "dQ") else shown_keys:
        if op.phase in ("P", "dP", "dS", "dQ"):
            i = pr.rows[r]
            tok = tokens[i]
            allowed = pr.allowed[r]
        else:
            c = r
            key = keys[pr.cols[c]]
        if op.phase == "P":
            if not allowed.any():
                lines.append(f"P[{tok}, {tile}] = 0: the mask allows {tok} none of {tile}")
                continue
            s = pr.S[r][allowed]
            texts, res = fit(from_logsumexp, [s, float(tb.L[i])], pr.P[r][allowed], decimals)
            masked = "" if allowed.all() else (
                f"; {', '.join(keys[j] for j, a in zip(pr.cols, allowed) if not a)} masked: P = 0")
            lines.append(f"P[{tok}, {tile}] = e^(S − L) = e^({texts[0]} − {texts[1]}) = {res}{masked}")
        elif op.phase == "dP":
            d, c_n = hr.d_v, len(pr.cols)
            flat = [*tb.dO[i], *(float(x) for j in pr.cols for x in hr.V[j])]

            def cells(*x: float, d: int = d, c_n: int = c_n) -> Matrix:
                return np.array([sum(x[t] * x[d + c * d + t] for t in range(d)) for c in range(c_n)])

            texts, res = fit(cells, flat, pr.dP[r], decimals)
            dots = ", ".join(" + ".join(f"{texts[t]}·{texts[d + c * d + t]}" for t in range(d)) for c in range(c_n))
            lines.append(f"dP[{tok}, {tile}] = dO[{tok}]·V[{tile}]ᵀ = [{dots}] = {res}")
        elif op.phase == "dS":
            texts, res = fit(lambda p, dp, d: p * (dp - d), [pr.P[r], pr.dP[r], float(tb.D[i])], pr.dS[r], decimals)
            lines.append(f"dS[{tok}, {tile}] = P ⊙ (dP − D) = {texts[0]} ⊙ ({texts[1]} − {texts[2]}) = {res}")
            stepper = _stepper(tb)
            if pr.factor is not None and stepper is not None:  # back through the part's step, as it writes it
                t_texts, t_res = fit(stepper.back_step, [pr.dS[r], pr.factor[r]], pr.dscaled[r], decimals)
                lines += ask.said(hr, "tiles.back.step", ds=t_texts[0], factor=t_texts[1], result=t_res)
        elif op.phase == "dQ":
            K_tile = hr.K_used[pr.cols.start:pr.cols.stop]
            lines.append(_accumulate("dQ", tok, pr.dQ_old[r], pr.dscaled[r], K_tile, pr.allowed[r],
                                     hr.scale, div_text, pr.dQ_new[r], decimals, f"{_ds(tb)}·K[{tile}]/{div_text}"))
        elif op.phase == "dV":
            dO_block = tb.dO[pr.rows.start:pr.rows.stop]
            lines.append(_accumulate("dV", key, pr.dV_old[c], pr.P[:, c], dO_block, pr.allowed[:, c], None,
                                     div_text, pr.dV_new[c], decimals, f"Pᵀ·dO[{_names(tokens, pr.rows)}]"))
        elif op.phase == "dK":
            Q_block = hr.Q_used[pr.rows.start:pr.rows.stop]
            lines.append(_accumulate("dK", key, pr.dK_old[c], pr.dscaled[:, c], Q_block, pr.allowed[:, c],
                                     hr.scale, div_text, pr.dK_new[c], decimals,
                                     f"{_ds(tb)}ᵀ·Q[{_names(tokens, pr.rows)}]/{div_text}"))
    count = len(pr.rows) if op.phase in ("P", "dP", "dS", "dQ") else len(pr.cols)
    if count > MAX_ROWS:
        lines.append(f"(and {count - MAX_ROWS} more: see the panes)")
    if op.phase == "dS":  # a column beside the map (a sink) says where its share goes
        lines += ask.said(hr, "tiles.back.dS")
    return lines


def back_explanation(tb: TiledBackward, index: int, forward: int, decimals: int) -> Explanation:
    """The operation ``index`` of the backward (0-based); ``forward`` operations came before it."""
    sc = tb.th.comp.scenario
    op = tb.op(index)
    lines = back_lines(tb, op, decimals)
    heads = len(tb.th.comp.heads)
    where = ("before the loop" if op.ktile is None and op.phase != "check" else "after every tile"
             if op.ktile is None else f"key tile {op.ktile + 1}/{len(tb.th.tiles)} · block "
             f"{(op.qblock or 0) + 1}/{len(tb.th.blocks)}")
    details = list(lines[1:])
    if op.phase == "P":
        block, tile = _names(sc.labels, tb.th.blocks[op.qblock or 0]), _names(sc.key_labels, tb.th.tiles[op.ktile or 0])
        details.append(f"S[{block}, {tile}] is the forward's tile again: Q·Kᵀ/scale"
                       " (capped, plus the bias where the scenario has them)")
    formula = tuple((phase_name(tb, p) + ("" if p == "check" else " "), p == op.phase) for p in ORDER if p != "check")
    stages = tuple((phase_name(tb, p), "current" if p == op.phase else "todo") for p in ORDER)
    return Explanation(
        stage_label=f"op {forward + index + 1}/{forward + len(tb)} · backward",
        counter=where,
        head_label=f"{sc.heads[tb.head].name} ({tb.head + 1}/{heads})" if heads > 1 else "",
        arithmetic=lines[0] if lines else phase_name(tb, op.phase),
        details=tuple(details),
        meaning=meaning(tb, op.phase),
        formula=formula,
        stages=stages,
    )


def back_panes(tb: TiledBackward, index: int, decimals: int) -> tuple[list[PaneSpec], list[PaneSpec]]:
    sc = tb.th.comp.scenario
    hr = tb.th.comp.heads[tb.head]
    op = tb.op(index)
    name = hr.name if len(tb.th.comp.heads) > 1 else ""
    tokens, keys = sc.labels, sc.key_labels
    dims_k = tuple(str(c) for c in range(hr.d_k))
    dims_v = tuple(str(c) for c in range(hr.d_v))
    dO = _pane("tb_dO", "dO", tb.dO, tokens, dims_v, decimals, subtitle=name)
    L_D = _pane("tb_LD", "L, D per row", np.column_stack([tb.L, tb.D]), tokens, ("L", "D"), decimals,
                subtitle=name, filled=2 * sc.n if op.phase != "L" else sc.n * 2,
                current=(0, 0 if op.phase == "L" else 1) if op.phase in ("L", "D") else None)
    dQ = _pane("tb_dQ", "dQ, so far", tb.dQ_at(index), tokens, dims_k, decimals, subtitle=name,
               block=frozenset(tb.th.blocks[op.qblock]) if op.phase == "dQ" and op.qblock is not None else frozenset())
    if op.phase in ("L", "D"):
        out = _pane("tb_O", "O (the forward's)", hr.output, tokens, dims_v, decimals, subtitle=name)
        return [L_D, dO, out], [dQ]
    if op.phase == "check":
        ab = tb.grads.heads[tb.head].attend
        got_q, got_k, got_v = tb.finals
        return ([_pane("tb_dQ_all", "dQ, tiled", got_q, tokens, dims_k, decimals, subtitle=name),
                 _pane("tb_dQ_exact", "dQ, Backward stages", ab.dQ_used, tokens, dims_k, decimals, subtitle=name),
                 _pane("tb_dK_all", "dK, tiled", got_k, keys, dims_k, decimals, subtitle=name),
                 _pane("tb_dK_exact", "dK, Backward stages", ab.dK_used, keys, dims_k, decimals, subtitle=name)],
                [_pane("tb_dV_all", "dV, tiled", got_v, keys, dims_v, decimals, subtitle=name),
                 _pane("tb_dV_exact", "dV, Backward stages", ab.dV, keys, dims_v, decimals, subtitle=name)])
    assert op.ktile is not None and op.qblock is not None
    pr = tb.pair(op.ktile, op.qblock)
    blk = tokens[pr.rows.start:pr.rows.stop]
    til = keys[pr.cols.start:pr.cols.stop]
    after = ORDER.index(op.phase)
    P = _pane("tb_P", "P = e^(S − L), tile", pr.P, blk, til, decimals, subtitle=name, heat=True,
              current=(0, None) if op.phase == "P" else None)
    dP = _pane("tb_dP", "dP = dO·Vᵀ, tile", pr.dP, blk, til, decimals, subtitle=name,
               filled=pr.dP.size if after >= ORDER.index("dP") else 0, current=(0, None) if op.phase == "dP" else None)
    dS = _pane("tb_dS", "dS = P⊙(dP−D), tile", pr.dscaled if op.phase != "dS" else pr.dS, blk, til, decimals,
               subtitle=name, filled=pr.dS.size if after >= ORDER.index("dS") else 0,
               current=(0, None) if op.phase == "dS" else None)
    dV = _pane("tb_dV", "dV, this tile's keys", pr.dV_new if after >= ORDER.index("dV") else pr.dV_old, til,
               dims_v, decimals, subtitle=name, current=(0, None) if op.phase == "dV" else None)
    dK = _pane("tb_dK", "dK, this tile's keys", pr.dK_new if after >= ORDER.index("dK") else pr.dK_old, til,
               dims_k, decimals, subtitle=name, current=(0, None) if op.phase == "dK" else None)
    V = _pane("tb_V", "V tile", hr.V[pr.cols.start:pr.cols.stop], til, dims_v, decimals, subtitle=name)
    K = _pane("tb_K", "K tile", hr.K_used[pr.cols.start:pr.cols.stop], til, dims_k, decimals, subtitle=name)
    Q = _pane("tb_Q", "Q block", hr.Q_used[pr.rows.start:pr.rows.stop], blk, dims_k, decimals, subtitle=name)
    dO_b = _pane("tb_dO_b", "dO block", tb.dO[pr.rows.start:pr.rows.stop], blk, dims_v, decimals, subtitle=name)
    focus = {
        "P": [P, L_D], "dV": [P, dO_b, dV], "dP": [dO_b, V, dP], "dS": [P, dP, dS],
        "dQ": [dS, K, dQ], "dK": [dS, Q, dK],
    }[op.phase]
    rest = [p for p in (P, dP, dS, dV, dK, dQ, Q, K, V, dO_b, L_D) if p not in focus]
    return focus, rest


def fa2_lines(tb: TiledBackward, decimals: int) -> list[str]:
    """Every line of every operation (the calculator tests read them)."""
    return [line for k in range(len(tb)) for line in back_lines(tb, tb.op(k), decimals)]

