"""[differential]'s worksheet tables (contracts §14): each map's scores, scaled scores and softmax, the λ vectors and
λ, the difference map, Mix, the sub-norm and the (1 − λ_init) factor, each worked from the tables printed before it
(teach/stages/printed.py) and rounded as the page prints; and the answer key's line for every cell.

Project prints each head's 2d-wide Q, K and V as for any head; the maps read their halves. The page leaves out
what a differential head would need tables of its own for: RoPE turning each half, the soft-cap, the ALiBi bias
(kernels/differential.py's record refuses those pages in one line), and the backward tables (left out, said so).
"""

from __future__ import annotations

import math

import numpy as np

from qkv_tui.core.fmt import fmt
from qkv_tui.core.variants.differential import TABLE
from qkv_tui.kernels.attention import project
from qkv_tui.kernels.norm import normalise
from qkv_tui.kernels.softmax import masked_logits, softmax_rows
from qkv_tui.teach.stages.printed import PrintedCells, PrintedChain, Table, exact, idx

SUB = {1: "₁", 2: "₂"}
LAMBDA_ROWS = ("λ_q1", "λ_k1", "λ_q2", "λ_k2")
LAMBDA_COLS = ("λ_q1·λ_k1", "e^(λ_q1·λ_k1)", "λ_q2·λ_k2", "e^(λ_q2·λ_k2)", "λ")


def _half(d: int, a: int) -> slice:
    return slice(0, d) if a == 1 else slice(d, 2 * d)


def _d(chain_or_cells: PrintedChain | PrintedCells, h: int) -> int:
    return int(chain_or_cells.sc.heads[h].W_Q.shape[1]) // 2


def _divisor(chain_or_cells: PrintedChain | PrintedCells, h: int) -> str:
    sc = chain_or_cells.sc
    return f"√{_d(chain_or_cells, h)}" if sc.scale is None else exact(sc.scale)


def tables(key: str, chain: PrintedChain, h: int) -> list[Table]:
    """The tables of the stage ``key`` for head ``h``."""
    sc, page, g = chain.sc, chain.page, chain.owners[h]
    d = _d(chain, h)
    stage, a = key.rsplit("_", 1) if key[-1].isdigit() else (key, "0")
    half = int(a)
    if stage == "diff_score":
        cols = _half(d, half)
        Q, K = chain.values(f"Q.{h}")[:, cols], chain.values(f"K.{g}")[:, cols]
        raw = Q @ K.T  # (n, m) from the printed halves
        whole = chain.printed[f"Q.{h}"].whole and chain.printed[f"K.{g}"].whole and bool(np.all(raw == np.round(raw)))
        s = SUB[half]
        return [Table(f"scores_{half}.{h}", f"scores{s}", f"scores{s} = Q{s}·K{s}ᵀ (Q{s}, K{s}: columns"
                      f" {cols.start}…{cols.stop - 1} of Q and K)", key, h, page.table(raw), sc.labels, sc.key_labels,
                      False, True, whole=whole)]
    if stage == "diff_scale":
        scores = chain.printed[f"scores_{half}.{h}"]
        divisor = math.sqrt(d) if sc.scale is None else sc.scale
        quotient = page.worked(scores.values / page.divisor(divisor))
        scaled = masked_logits(quotient, sc.allow, None, page)  # (n, m) −∞ where masked
        s = SUB[half]
        whole = scores.whole and bool(np.all(np.where(sc.allow, quotient == np.round(quotient), True)))
        return [Table(f"scaled_{half}.{h}", f"scaled{s}", f"scaled{s} = scores{s} / {_divisor(chain, h)}, masked", key, h,
                      scaled, sc.labels, sc.key_labels, False, True, sc.allow, whole=whole)]
    if stage == "diff_softmax":
        weights = softmax_rows(chain.values(f"scaled_{half}.{h}"), None, page).weights
        s = SUB[half]
        return [Table(f"weights_{half}.{h}", f"p{s}", f"p{s} = softmax(scaled{s}), row by row", key, h, weights,
                      sc.labels, sc.key_labels, False, True, sc.allow)]
    if stage == "diff_lambda":
        df = TABLE.of(sc)
        assert df is not None
        vectors = np.stack([getattr(df, k)[h] for k in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2")])  # (4, d)
        given = Table(f"lambda_vectors.{h}", "λ vectors", "the λ vectors (this head's rows of [differential])", key, h,
                      vectors, LAMBDA_ROWS, idx(d), True, False)
        dot_1 = float(page.table(np.array(vectors[0] @ vectors[1])))
        dot_2 = float(page.table(np.array(vectors[2] @ vectors[3])))
        e_1, e_2 = (float(page.table(np.array(math.exp(x)))) for x in (dot_1, dot_2))
        lam = float(page.table(np.array(e_1 - e_2 + df.lambda_init)))
        values = np.array([[dot_1, e_1, dot_2, e_2, lam]])
        return [given, Table(f"lambda.{h}", "λ", f"λ = e^(λ_q1·λ_k1) − e^(λ_q2·λ_k2) + λ_init, λ_init ="
                             f" {exact(df.lambda_init)}", key, h, values, ("λ",), LAMBDA_COLS, False, True)]
    if stage == "diff_subtract":
        p1, p2 = chain.values(f"weights_1.{h}"), chain.values(f"weights_2.{h}")
        lam = float(chain.values(f"lambda.{h}")[0, 4])
        weights = np.where(sc.allow, page.table(p1 - lam * p2), 0.0)
        return [Table(f"weights.{h}", "weights", "weights = p₁ − λ·p₂, cell by cell (rows sum to 1 − λ)", key, h,
                      weights, sc.labels, sc.key_labels, False, True, sc.allow)]
    if stage == "diff_mix":
        mixed = project(chain.values(f"weights.{h}"), chain.values(f"V.{g}"), None, page)
        return [Table(f"mixed.{h}", "mixed", "mixed = weights·V", key, h, mixed, sc.labels, idx(2 * d), False, True)]
    if stage == "diff_subnorm":
        df = TABLE.of(sc)
        assert df is not None
        out = []
        gamma = np.ones(2 * d) if df.gamma is None else df.gamma
        if df.gamma is not None and h == 0:  # the heads share the gains: printed once, in the first head's section
            out.append(Table("gamma_sub", "γ", "γ (the sub-norm's gains, every head's)", key, None, df.gamma[None, :],
                             ("γ",), idx(2 * d), True, False))
        normed = normalise(page, "rms", chain.values(f"mixed.{h}"), gamma[None, :], None, df.eps)
        return [*out,
                Table(f"ms.{h}", "ms", "each row of mixed: ms = the mean of its squares", key, h, normed.spread[:, None],
                      sc.labels, ("ms",), False, True),
                Table(f"normed.{h}", "normed", "normed = RMSNorm(mixed), row by row"
                      + (", times γ" if df.gamma is not None else ""), key, h, normed.X_norm, sc.labels, idx(2 * d), False,
                      True)]
    assert stage == "diff_factor"
    df = TABLE.of(sc)
    assert df is not None
    factor = float(page.table(np.array(1.0 - df.lambda_init)))
    output = page.table(factor * chain.values(f"normed.{h}"))
    return [Table(f"output.{h}", "output", f"output = (1 − λ_init)·normed = {fmt(factor, False, chain.d)}·normed",
                  key, h, output, sc.labels, idx(2 * d), False, True)]


def line(key: str, cells: PrintedCells, table: Table, row: int, col: int, answer: str) -> str:
    """The answer key's line for one cell of a table of the stage ``key``: the printed numbers, then the answer (its
    name says what it is; the table's heading the formula)."""
    h = table.head
    assert h is not None or table.key == "gamma_sub"
    sc = cells.sc
    h = 0 if h is None else h
    g, d = cells.owners[h], _d(cells, h)
    q = sc.labels[row]
    k = sc.key_labels[col] if col < len(sc.key_labels) else str(col)
    base = table.key.split(".")[0]
    if base.startswith("scores_"):
        half = int(base[-1])
        terms = " + ".join(f"{cells.txt(f'Q.{h}', row, c)}·{cells.txt(f'K.{g}', col, c)}" for c in range(*_half(d, half)
                                                                                                   .indices(2 * d)))
        return f"{table.name}[{q},{k}] = {terms} = {answer}"
    if base.startswith("scaled_"):
        half = int(base[-1])
        return f"{table.name}[{q},{k}] = {cells.txt(f'scores_{half}.{h}', row, col)} / {_divisor(cells, h)} = {answer}"
    if base.startswith("weights_"):
        return _softmax_line(cells, table, f"scaled_{base[-1]}.{h}", row, col, answer)
    if base == "lambda":
        lam = f"lambda_vectors.{h}"
        if col in (0, 2):
            a, b = (0, 1) if col == 0 else (2, 3)
            terms = " + ".join(f"{cells.txt(lam, a, c)}·{cells.txt(lam, b, c)}" for c in range(d))
            return f"{LAMBDA_COLS[col]} = {terms} = {answer}"
        if col in (1, 3):
            return f"{LAMBDA_COLS[col]} = e^({cells.txt(f'lambda.{h}', 0, col - 1)}) = {answer}"
        df = TABLE.of(sc)
        assert df is not None
        init = exact(df.lambda_init)
        return (f"λ = {cells.txt(f'lambda.{h}', 0, 1)} − {cells.txt(f'lambda.{h}', 0, 3)}"
                f" + {f'({init})' if init.startswith('-') else init} = {answer}")
    if base == "weights":
        lam = cells.txt(f"lambda.{h}", 0, 4)
        return (f"weights[{q},{k}] = {cells.txt(f'weights_1.{h}', row, col)} − {lam}·"
                f"{cells.txt(f'weights_2.{h}', row, col)} = {answer}")
    if base == "mixed":
        return f"mixed[{q},{col}] = {cells.dot(f'weights.{h}', row, f'V.{g}', col)} = {answer}"
    if base == "ms":
        width = 2 * d
        terms = " + ".join(f"{cells.txt(f'mixed.{h}', row, c)}·{cells.txt(f'mixed.{h}', row, c)}" for c in range(width))
        return f"ms[{q}] = ({terms}) / {width} = {answer}"
    df = TABLE.of(sc)
    assert df is not None
    if base == "normed":
        gain = f"·{cells.txt('gamma_sub', 0, col)}" if df.gamma is not None else ""
        return (f"normed[{q},{col}] = {cells.txt(f'mixed.{h}', row, col)} / √({cells.txt(f'ms.{h}', row, 0)}"
                f" + {float(df.eps)!r}){gain} = {answer}")
    assert base == "output"
    factor = fmt(float(round(1.0 - df.lambda_init, cells.d)), False, cells.d)
    return f"output[{q},{col}] = {factor}·{cells.txt(f'normed.{h}', row, col)} = {answer}"


def _softmax_line(cells: PrintedCells, table: Table, key: str, i: int, j: int, answer: str) -> str:
    """``p₁[I,love] = e^(s − m) / (Σ e^(s − m))`` with the printed scaled row (the one-map softmax's line)."""
    sc = cells.sc
    scaled = cells.tables[key]
    allowed = [c for c in range(sc.m) if sc.allow[i, c]]
    values = [float(scaled.values[i, c]) for c in allowed]
    top = max(values)
    top_text = cells.txt(key, i, allowed[values.index(top)])
    total = sum(math.exp(v - top) for v in values)
    extra = cells.d + 1  # one more decimal for e and Σ, as the one-map softmax's line

    def power(c: int) -> str:
        return f"e^({cells.txt(key, i, c)} − {top_text})"

    terms = " + ".join(power(c) for c in allowed)
    mine = math.exp(float(scaled.values[i, j]) - top)
    return (f"{table.name}[{sc.labels[i]},{sc.key_labels[j]}] = {power(j)} / ({terms})"
            f" = {fmt(mine, False, extra)} / {fmt(total, False, extra)} = {answer}")

