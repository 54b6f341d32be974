"""[differential] on the backward worksheet (contracts §11 and §14): a differential head's tables from the gradient at
its output down to dQ, dK and dV, each worked from the tables printed before it, and every cell's answer-key line.

The numbers are kernels/differential_backward.py's own (core/gradients.py asks the head's record to read itself
backwards), run on the page: :func:`printed` hands it the head's forward as the page prints it (Q, K, V, p₁, p₂, the
λ table, weights, mixed, ms, normed), and the page's policy keeps each table as computed exactly from printed operands,
rounded once. The tables follow the app's backward stages (teach/stages/differential_backward.py): the (1 − λ_init)
factor, the sub-norm (x̂ is the printed normed where the sub-norm has no gains), Mix, Subtract, λ's vectors, each
map's softmax and scale, Score; the projections' own tables (dW_Q = X̂ᵀ·dQ …) and dX̂ are the page's, after.
A head with RoPE, a soft-cap or an ALiBi bias has no forward page (kernels/differential.py's record refuses it), so
none of those steps is read backwards here.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from qkv_tui.core.fmt import fmt
from qkv_tui.core.scenario import Scenario
from qkv_tui.core.variants.differential import GAMMA_NAME, LAMBDA_KEYS
from qkv_tui.edges.worksheet.backward.lines import operand_keys
from qkv_tui.edges.worksheet.backward.names import cell_name
from qkv_tui.edges.worksheet.backward.parts import PartSheet
from qkv_tui.kernels.differential import DiffForward
from qkv_tui.kernels.differential_backward import DiffBack
from qkv_tui.kernels.norm import Normed, norm_root
from qkv_tui.kernels.norm_backward import row_means
from qkv_tui.kernels.policy import round_to
from qkv_tui.teach.arith import MAX_TERMS
from qkv_tui.teach.stages.printed import PrintedCells, PrintedChain, Table, exact, idx

SUB = {1: "₁", 2: "₂"}
VECTORS = ("λ_q1", "λ_k1", "λ_q2", "λ_k2")  # the rows of the forward's "λ vectors" table (its key lambda_vectors.h)
# each λ vector's gradient: (the dot product's gradient it takes, ddots column; the other vector's row)
PARTNER = {0: (0, 1), 1: (0, 0), 2: (1, 3), 3: (1, 2)}
DOTS = ("d(λ_q1·λ_k1)", "d(λ_q2·λ_k2)")


def _record(hr: Any) -> DiffForward | None:
    found: DiffForward | None = hr.part(DiffForward)
    return found


def _divisor(sc: Scenario, d: int) -> tuple[float, str]:
    return (math.sqrt(d), f"√{d}") if sc.scale is None else (float(sc.scale), exact(float(sc.scale)))


def printed(chain: PrintedChain, h: int, hr: Any) -> tuple[list[object], dict[str, object]] | None:
    """The head's record with the numbers its backward reads as the page prints them; None without the part."""
    f = _record(hr)
    if f is None or f.head is None:
        return None
    sc, v, g = chain.sc, chain.values, chain.owners[h]
    allow = sc.allow

    def kept(key: str) -> np.ndarray:
        return np.where(allow, v(key), 0.0)  # (n, m) a masked cell is the 0 it is, not −∞

    lam = v(f"lambda.{h}")[0]  # λ_q1·λ_k1, e^(…), λ_q2·λ_k2, e^(…), λ
    ms = v(f"ms.{h}")[:, 0]  # (n,)
    normed = v(f"normed.{h}")
    weights = kept(f"weights.{h}")
    maps = [replace(m, softmax=replace(m.softmax, weights=kept(f"weights_{a}.{h}")))
            for a, m in ((1, f.map_1), (2, f.map_2))]
    record = replace(
        f, Q=v(f"Q.{h}"), K=v(f"K.{g}"), V=v(f"V.{g}"), divisor=_divisor(sc, f.d)[0], map_1=maps[0], map_2=maps[1],
        lam=replace(f.lam, dot_1=float(lam[0]), lambda_1=float(lam[1]), dot_2=float(lam[2]), lambda_2=float(lam[3]),
                    value=float(lam[4])),
        weights=weights, mixed=v(f"mixed.{h}"),
        # the page's normed divides by the exact √(ms + eps) of its printed ms (teach/stages/differential_sheet.py)
        norm=Normed(normed, np.zeros(sc.n), ms, norm_root(ms, f.head.eps), normed),
        factor=float(chain.rounded(np.array(1.0 - f.lam.lambda_init))), output=v(f"output.{h}"))
    return [record], {"weights": weights}


def _gains(f: DiffForward) -> np.ndarray | None:
    assert f.head is not None
    return None if f.head.gamma is None else np.asarray(f.head.gamma, dtype=np.float64)


def _xhat(chain: PrintedChain, f: DiffForward) -> np.ndarray:
    """The sub-norm's x̂ = mixed / √(ms + eps) as kernels/norm_backward.py keeps it: the printed normed without gains."""
    return chain.rounded(f.mixed / f.norm.root[:, None])


def tables(t: Any, chain: PrintedChain, h: int, hr: Any, G: Any) -> bool:
    """Head ``h``'s tables from the gradient at its output to dQ, dK and dV; False where it is no differential head."""
    hg = G.heads[h]
    f, b = _record(hr), hg.own
    if f is None or not isinstance(b, DiffBack):
        return False
    sc = chain.sc
    rows, keys, w = sc.labels, sc.key_labels, idx(2 * f.d)
    factor = fmt(f.factor, False, chain.d)
    t(f"dnormed.{h}", "d_normed", f"d_normed = (1 − λ_init)·dO_h = {factor}·dO_h", b.d_normed, rows, w, h)
    gains = _gains(f)
    xhat = _xhat(chain, f)
    if gains is not None:
        t(f"subhat.{h}", "x̂", "x̂ = mixed / √(ms + eps)", xhat, rows, w, h)
        m = row_means(gains, b.d_normed, xhat)[0]
        t(f"subm.{h}", "m", "m = mean(d_normed ⊙ γ ⊙ x̂)", chain.rounded(m)[:, None], rows, ("m",), h)
        t(f"dmixed.{h}", "dmixed", "dmixed = (d_normed ⊙ γ − x̂·m) / √(ms + eps)", b.dmixed, rows, w, h)
        assert b.dgamma is not None
        share = " (this head's share: the heads share γ)" if len(sc.heads) > 1 else ""
        t(f"dgsub.{h}", "dγ", f"dγ = Σ rows of d_normed ⊙ x̂{share}", b.dgamma, ("γ",), w, h)
    else:
        m = row_means(np.ones(2 * f.d), b.d_normed, xhat)[0]
        t(f"subm.{h}", "m", "m = mean(d_normed ⊙ normed)", chain.rounded(m)[:, None], rows, ("m",), h)
        t(f"dmixed.{h}", "dmixed", "dmixed = (d_normed − normed·m) / √(ms + eps)", b.dmixed, rows, w, h)
    t(f"dV.{h}", "dV", "dV = weightsᵀ·dmixed", b.dV, keys, w, h)
    t(f"dweights.{h}", "dweights", "dweights = dmixed·Vᵀ", b.dweights, rows, keys, h)
    t(f"dlam.{h}", "dλ", "dλ = −Σ dweights ⊙ p₂", np.array([[b.dlambda]]), ("dλ",), ("dλ",), h)
    t(f"dP2.{h}", "dp₂", "dp₂ = −λ·dweights", b.map_2.dP, rows, keys, h)
    t(f"ddots.{h}", "d(λ·λ)", "d(λ_q1·λ_k1) = dλ·e^(λ_q1·λ_k1), the second pair's with −dλ",
      np.array([[b.ddot_1, b.ddot_2]]), ("d",), DOTS, h)
    vectors = np.stack([b.dlambda_q1, b.dlambda_k1, b.dlambda_q2, b.dlambda_k2])  # (4, d)
    t(f"dlamv.{h}", "dλ vectors", "dλ_q1 = d(λ_q1·λ_k1)·λ_k1, …", vectors, tuple(f"d{name}" for name in VECTORS),
      idx(f.d), h)
    divisor = _divisor(sc, f.d)[1]
    for a, mb in ((1, b.map_1), (2, b.map_2)):
        s, dp = SUB[a], "dweights" if a == 1 else "dp₂"
        t(f"D_{a}.{h}", f"D{s}", f"D{s} = rowsum(p{s} ⊙ {dp})", mb.D[:, None], rows, (f"D{s}",), h)
        t(f"dS_{a}.{h}", f"dS{s}", f"dS{s} = p{s} ⊙ ({dp} − D{s})", mb.dS, rows, keys, h, sc.allow)
        t(f"dscores_{a}.{h}", f"dscores{s}", f"dscores{s} = dS{s} / {divisor}", mb.dscores, rows, keys, h, sc.allow)
    t(f"dQu.{h}", "dQ", "dQ = [dscores₁·K₁ | dscores₂·K₂]", hg.attend.dQ_used, rows, w, h)
    t(f"dKu.{h}", "dK", "dK = [dscores₁ᵀ·Q₁ | dscores₂ᵀ·Q₂]", hg.attend.dK_used, keys, w, h)
    last = len(sc.heads) - 1
    if gains is not None and h == last and last > 0:  # the heads' shares of the gains' gradient, summed
        total = np.sum([G.heads[x].own.dgamma for x in range(len(sc.heads))], axis=0)  # each share as printed
        t("dgamma_sub", "dγ", "dγ = the sum of every head's share", chain.rounded(total), ("γ",), w)
    return True


KINDS = frozenset(("dnormed", "subhat", "subm", "dmixed", "dgsub", "dgamma_sub", "dV", "dweights", "dlam", "dP2",
                   "ddots", "dlamv", "D_1", "dS_1", "dscores_1", "D_2", "dS_2", "dscores_2", "dQu", "dKu"))


def line(cells: PrintedCells, table: Table, i: int, j: int, answer: str) -> str:
    """The answer key's line for cell (i, j) of one of a differential head's backward tables."""
    sc = cells.sc
    kind, _, suffix = table.key.partition(".")
    h = int(suffix) if suffix else 0
    g = cells.owners[h]
    tx = cells.txt
    tok, keys = sc.labels, sc.key_labels
    d = int(cells.tables[f"Q.{h}"].values.shape[1]) // 2
    name = cell_name(table, i, j, (*tok, *keys))
    gains = "gamma_sub" in cells.tables

    def terms(pairs: list[tuple[tuple[str, int, int], tuple[str, int, int]]]) -> str:
        return " + ".join(f"{tx(*a)}·{tx(*b)}" for a, b in pairs) or "0"

    def weight(key: str, a: int, b: int) -> str:
        return tx(key, a, b) if sc.allow[a, b] else "0"

    eps = f"{float(_eps(cells, h))!r}"
    if kind == "dnormed":
        ops = operand_keys(sc, cells.owners)
        factor = fmt(float(round_to(np.array(1.0 - _init(cells, h)), cells.d)), False, cells.d)
        return f"{name} = (1 − λ_init)·dO_h = {factor}·{tx(*ops.dO_h(cells.tables, h, i, j))} = {answer}"
    if kind == "subhat":
        return (f"{name} = mixed / √(ms + eps) = {tx(f'mixed.{h}', i, j)} / √({tx(f'ms.{h}', i, 0)} + {eps})"
                f" = {answer}")
    if kind == "subm":
        width = 2 * d
        if gains:
            body = " + ".join(f"{tx(f'dnormed.{h}', i, c)}·{tx('gamma_sub', 0, c)}·{tx(f'subhat.{h}', i, c)}"
                              for c in range(width))
            return f"{name} = mean(d_normed ⊙ γ ⊙ x̂) = ({body}) / {width} = {answer}"
        body = terms([((f"dnormed.{h}", i, c), (f"normed.{h}", i, c)) for c in range(width)])
        return f"{name} = mean(d_normed ⊙ normed) = ({body}) / {width} = {answer}"
    if kind == "dmixed":
        root = f"√({tx(f'ms.{h}', i, 0)} + {eps})"
        if gains:
            return (f"{name} = (d_normed·γ − x̂·m) / √(ms + eps) = ({tx(f'dnormed.{h}', i, j)}·{tx('gamma_sub', 0, j)}"
                    f" − {tx(f'subhat.{h}', i, j)}·{tx(f'subm.{h}', i, 0)}) / {root} = {answer}")
        return (f"{name} = (d_normed − normed·m) / √(ms + eps) = ({tx(f'dnormed.{h}', i, j)} −"
                f" {tx(f'normed.{h}', i, j)}·{tx(f'subm.{h}', i, 0)}) / {root} = {answer}")
    if kind == "dgsub":
        body = terms([((f"dnormed.{h}", a, j), (f"subhat.{h}", a, j)) for a in range(sc.n)])
        return f"{name} = Σ d_normed[·,{j}]·x̂[·,{j}] = {body} = {answer}"
    if kind == "dgamma_sub":
        parts = " + ".join(tx(f"dgsub.{x}", 0, j) for x in range(len(sc.heads)))
        return f"{name} = Σ over the heads = {parts} = {answer}"
    if kind == "dV":
        body = " + ".join(f"{weight(f'weights.{h}', a, i)}·{tx(f'dmixed.{h}', a, j)}" for a in range(sc.n))
        return f"{name} = Σ weights[·,{keys[i]}]·dmixed[·,{j}] = {body} = {answer}"
    if kind == "dweights":
        body = terms([((f"dmixed.{h}", i, c), (f"V.{g}", j, c)) for c in range(2 * d)])
        return f"{name} = dmixed[{tok[i]}]·V[{keys[j]}] = {body} = {answer}"
    if kind == "dlam":
        body = terms([((f"dweights.{h}", a, b), (f"weights_2.{h}", a, b))
                      for a in range(sc.n) for b in range(sc.m) if sc.allow[a, b]])
        return f"dλ = −Σ dweights ⊙ p₂ = −({body}) = {answer}"
    if kind == "dP2":
        return f"{name} = −λ·dweights = −{tx(f'lambda.{h}', 0, 4)}·{tx(f'dweights.{h}', i, j)} = {answer}"
    if kind == "ddots":
        sign, e = ("", 1) if j == 0 else ("−", 3)
        return (f"{DOTS[j]} = {sign}dλ·e^({'λ_q1·λ_k1' if j == 0 else 'λ_q2·λ_k2'}) ="
                f" {sign}{tx(f'dlam.{h}', 0, 0)}·{tx(f'lambda.{h}', 0, e)} = {answer}")
    if kind == "dlamv":
        dot, other = PARTNER[i]
        return (f"d{VECTORS[i]}[{j}] = {DOTS[dot]}·{VECTORS[other]}[{j}] = {tx(f'ddots.{h}', 0, dot)}·"
                f"{tx(f'lambda_vectors.{h}', other, j)} = {answer}")
    a = 1 if kind.endswith("_1") else 2
    s = SUB[a]
    dp = f"dweights.{h}" if a == 1 else f"dP2.{h}"
    dp_name = "dweights" if a == 1 else "dp₂"
    if kind.startswith("D_"):
        body = terms([((f"weights_{a}.{h}", i, b), (dp, i, b)) for b in range(sc.m) if sc.allow[i, b]])
        return f"{name} = Σ p{s}[{tok[i]}] ⊙ {dp_name}[{tok[i]}] = {body} = {answer}"
    if kind.startswith("dS_"):
        return (f"{name} = p{s}·({dp_name} − D{s}) = {weight(f'weights_{a}.{h}', i, j)}·({tx(dp, i, j)} −"
                f" {tx(f'D_{a}.{h}', i, 0)}) = {answer}")
    if kind.startswith("dscores_"):
        return f"{name} = dS{s} / scale = {tx(f'dS_{a}.{h}', i, j)} / {_divisor(sc, d)[1]} = {answer}"
    half = 1 if j < d else 2
    s, c = SUB[half], j - (half - 1) * d
    if kind == "dQu":
        body = terms([((f"dscores_{half}.{h}", i, b), (f"K.{g}", b, j)) for b in range(sc.m) if sc.allow[i, b]])
        return f"{name} = Σ dscores{s}[{tok[i]},·]·K{s}[·,{c}] = {body} = {answer}"
    assert kind == "dKu", kind
    body = terms([((f"dscores_{half}.{h}", a, i), (f"Q.{h}", a, j)) for a in range(sc.n) if sc.allow[a, i]])
    return f"{name} = Σ dscores{s}[·,{keys[i]}]·Q{s}[·,{c}] = {body} = {answer}"


def _head(cells: PrintedCells, h: int) -> Any:
    f = cells.comp.heads[h].part(DiffForward)
    assert f is not None and f.head is not None
    return f.head


def _eps(cells: PrintedCells, h: int) -> float:
    return float(_head(cells, h).eps)


def _init(cells: PrintedCells, h: int) -> float:
    return float(_head(cells, h).lambda_init)


def rules(sc: Scenario) -> list[str]:
    return ["  Differential heads: each table's heading is its step, the forward's read backwards; dp₁ is dweights,"
            " a masked cell's dS is 0, and without gains the sub-norm's x̂ is normed."]


def uncovered(sc: Scenario) -> str | None:
    """dλ sums a product for every cell the mask allows: past MAX_TERMS, a sum a student cannot type in."""
    cells = int(np.count_nonzero(sc.allow))
    if cells <= MAX_TERMS:
        return None
    return (f"[differential]'s dλ = −Σ dweights ⊙ p₂, a sum of {cells} products (one for each cell the mask allows),"
            f" more than the {MAX_TERMS} terms a worksheet takes")


STAGES = (
    (("dnormed",), "ddiff_factor"),
    (("subhat", "subm", "dmixed", "dgsub", "dgamma_sub"), "ddiff_subnorm"),
    (("dV", "dweights"), "ddiff_mix"),
    (("dlam", "dP2"), "ddiff_subtract"),
    (("ddots", "dlamv"), "ddiff_lambda"),
    (("D_1", "dS_1"), "ddiff_softmax_1"),
    (("dscores_1",), "ddiff_scale_1"),
    (("D_2", "dS_2"), "ddiff_softmax_2"),
    (("dscores_2",), "ddiff_scale_2"),
    (("dQu", "dKu"), "ddiff_score"),
)
SGD_STAGE = "sgd"  # edges/worksheet/sgd.py's STAGE key (not imported: sgd.py asks this module)


def sgd_tables(by_key: dict[str, Table], comp: Any, lr: float, d: int) -> list[Table]:
    """The trained λ vectors of each head moved once (one table a head, a row a trained vector), and the sub-norm's
    gains where they are trained."""
    sc = comp.scenario
    assert sc.backward is not None
    trained = set(sc.backward.train)
    rows = [n for n, key in enumerate(LAMBDA_KEYS) if key in trained]
    out: list[Table] = []
    for h in range(len(sc.heads)):
        w, g = by_key.get(f"lambda_vectors.{h}"), by_key.get(f"dlamv.{h}")
        if not rows or w is None or g is None:
            continue
        with np.errstate(over="ignore", invalid="ignore"):
            new = round_to(w.values[rows] - lr * g.values[rows], d)
        if np.isfinite(new).all():
            out.append(Table(f"sgd.lambda_vectors.{h}", "new λ", "new λ = λ − lr·dλ, each trained λ vector", SGD_STAGE,
                             h, np.asarray(new, dtype=float), tuple(VECTORS[r] for r in rows), w.cols, False, True))
    gain, grad = by_key.get("gamma_sub"), by_key.get("dgamma_sub") or by_key.get("dgsub.0")
    if GAMMA_NAME in trained and gain is not None and grad is not None:
        with np.errstate(over="ignore", invalid="ignore"):
            new = round_to(gain.values - lr * grad.values, d)
        if np.isfinite(new).all():
            out.append(Table("sgd.gamma_sub", "new γ", "new γ = γ − lr·dγ (the sub-norm's gains)", SGD_STAGE, None,
                             np.asarray(new, dtype=float), gain.rows, gain.cols, False, True))
    return out


def sgd_line(cells: PrintedCells, table: Table, i: int, j: int, answer: str) -> str | None:
    bw = cells.sc.backward
    assert bw is not None
    lr = exact(float(bw.lr))
    if table.key == "sgd.gamma_sub":
        grad = "dgamma_sub" if "dgamma_sub" in cells.tables else "dgsub.0"
        return (f"new γ[{j}] = γ[{j}] − lr·dγ[{j}] = {cells.txt('gamma_sub', 0, j)} − {lr}·{cells.txt(grad, 0, j)}"
                f" = {answer}")
    if not table.key.startswith("sgd.lambda_vectors."):
        return None
    h = table.key.rpartition(".")[2]
    vector = table.rows[i]
    r = VECTORS.index(vector)
    return (f"new {vector}[{j}] = {vector}[{j}] − lr·d{vector}[{j}] = {cells.txt(f'lambda_vectors.{h}', r, j)} − {lr}·"
            f"{cells.txt(f'dlamv.{h}', r, j)} = {answer}")


SHEET = PartSheet(printed, tables, KINDS, line, rules, uncovered, STAGES, sgd_tables, sgd_line)
