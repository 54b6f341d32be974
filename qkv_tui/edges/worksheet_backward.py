"""The backward worksheet: the tables of the backward pass, after the forward's, for scenarios with [backward].

Like every table of the page, each is worked from the tables printed before it (rounded to the page's
decimals), so the answer key's lines agree with a calculator. It covers one head of plain attention
(the seed's shape: no W_O, norm, RoPE, QK-norm, gate, soft-cap, sink, biases or shared K/V heads); other
scenarios get a rule saying the backward tables are left to the app and the Markdown export.
"""

from __future__ import annotations

import math

import numpy as np

from qkv_tui.core.engine import Computation
from qkv_tui.core.scenario import Scenario
from qkv_tui.teach.stages.common import Stage, StageSpec
from qkv_tui.teach.stages.printed import PrintedCells, PrintedChain, Table

STAGE = Stage("backward", "Backward", "the gradients of the loss ½·Σ (output − target)², from the output back to W_Q, W_K, W_V")


def plain(sc: Scenario) -> bool:
    """Whether the page's backward tables cover the scenario (module docstring)."""
    head = sc.heads[0] if len(sc.heads) == 1 else None
    return bool(
        sc.backward is not None and sc.backward.target is not None and head is not None and sc.W_O is None
        and sc.b_O is None and sc.norm is None and sc.rope is None and sc.qk_norm is None and not sc.is_cross
        and head.W_G is None and head.sink is None and head.b_Q is None and head.b_K is None and head.b_V is None
        and head.softcap is None and sc.num_kv_heads is None
        and sc.mla is None  # its weights are the latent's: the app and the Markdown export work them
    )


def _divisor(comp: Computation) -> tuple[str, float]:
    hr = comp.heads[0]
    return (f"√{hr.d_k}", math.sqrt(hr.d_k)) if hr.scale_is_default else (f"{hr.scale:g}", float(hr.scale))


def backward_tables(chain: PrintedChain) -> list[Table]:
    """dO, dV, dP, D, dS, dQ, dK, dW_Q, dW_K, dW_V, each from the printed tables before it."""
    sc = chain.sc
    if not plain(sc):
        return []
    bw = sc.backward
    assert bw is not None and bw.target is not None
    _, div = _divisor(chain.comp)
    r = chain.rounded
    rows, keys = sc.labels, sc.key_labels
    dims = tuple(str(c) for c in range(sc.X.shape[1]))
    hr = chain.comp.heads[0]
    k_cols = tuple(str(c) for c in range(hr.d_k))
    v_cols = tuple(str(c) for c in range(hr.d_v))
    target = Table("target", "target", "target (the wanted output; loss = ½·Σ (output − target)²)", "backward", 0,
                   np.array(bw.target, dtype=np.float64), rows, v_cols, True, False)
    out, P = chain.values("output.0"), chain.values("weights.0")
    P = np.where(sc.allow, P, 0.0)  # (n, m) a masked weight is 0
    Q, K, V, X = chain.values("Q.0"), chain.values("K.0"), chain.values("V.0"), sc.X
    dO = r(out - target.values)  # (n, d_v)
    dV = r(P.T @ dO)  # (m, d_v)
    dP = r(dO @ V.T)  # (n, m)
    D = r((dO * out).sum(axis=1, keepdims=True))  # (n, 1)
    dS = r(np.where(sc.allow, P * (dP - D), 0.0))  # (n, m)
    dQ = r(dS @ K / div)  # (n, d_k)
    dK = r(dS.T @ Q / div)  # (m, d_k)

    def t(key: str, name: str, heading: str, values: np.ndarray, rs: tuple[str, ...], cs: tuple[str, ...],
          allow: np.ndarray | None = None) -> Table:
        return Table(key, name, heading, "backward", 0, values, rs, cs, False, True, allow)

    return [target,
            t("dO", "dO", "dO = output − target", dO, rows, v_cols),
            t("dV", "dV", "dV = weightsᵀ·dO", dV, keys, v_cols),
            t("dP", "dP", "dP = dO·Vᵀ", dP, rows, keys),
            t("D", "D", "D = rowsum(dO ⊙ output)", D, rows, ("D",)),
            t("dS", "dS", "dS = weights ⊙ (dP − D) (0 where masked)", dS, rows, keys, sc.allow),
            t("dQ", "dQ", "dQ = dS·K / scale", dQ, rows, k_cols),
            t("dK", "dK", "dK = dSᵀ·Q / scale", dK, keys, k_cols),
            t("dW_Q", "dW_Q", "dW_Q = Xᵀ·dQ", r(X.T @ dQ), dims, k_cols),
            t("dW_K", "dW_K", "dW_K = Xᵀ·dK", r(X.T @ dK), dims, k_cols),
            t("dW_V", "dW_V", "dW_V = Xᵀ·dV", r(X.T @ dV), dims, v_cols)]


class BackwardSheet(StageSpec):
    """The answer key's lines of the backward tables (not a stage of the trace: grad's stages are those)."""

    stage = STAGE

    def worksheet_rules(self, comp: Computation) -> list[str]:
        sc = comp.scenario
        if sc.backward is None:
            return []
        if not plain(sc):
            return ["- [backward]: this page has the forward pass only; the backward tables cover one head of plain"
                    " attention (the app and --export markdown show every gradient of this scenario)"]
        return ["- Backward: work dO, dV, dP, D, dS, dQ, dK, then dW_Q, dW_K, dW_V from the tables printed"
                " before each, in page order; a masked cell's dS is 0"]

    def worksheet_line(self, cells: PrintedCells, table: Table, row: int, col: int, answer: str) -> str:
        sc = cells.sc
        tx = cells.txt
        i, j = row, col
        tok, keys = sc.labels, sc.key_labels
        n, m = sc.n, sc.m
        key = table.key
        if key == "dO":
            return f"dO[{tok[i]},{j}] = output − target = {tx('output.0', i, j)} − {tx('target', i, j)} = {answer}"
        if key == "dV":
            terms = " + ".join(f"{_p(cells, a, i)}·{tx('dO', a, j)}" for a in range(n))
            return f"dV[{keys[i]},{j}] = Σ weights[·,{keys[i]}]·dO[·,{j}] = {terms} = {answer}"
        if key == "dP":
            d_v = cells.tables["dO"].values.shape[1]
            terms = " + ".join(f"{tx('dO', i, c)}·{tx('V.0', j, c)}" for c in range(d_v))
            return f"dP[{tok[i]},{keys[j]}] = dO[{tok[i]}]·V[{keys[j]}] = {terms} = {answer}"
        if key == "D":
            d_v = cells.tables["dO"].values.shape[1]
            terms = " + ".join(f"{tx('dO', i, c)}·{tx('output.0', i, c)}" for c in range(d_v))
            return f"D[{tok[i]}] = Σ dO[{tok[i]}] ⊙ output[{tok[i]}] = {terms} = {answer}"
        if key == "dS":
            return (f"dS[{tok[i]},{keys[j]}] = weights·(dP − D) = {_p(cells, i, j)}·({tx('dP', i, j)} − {tx('D', i, 0)})"
                    f" = {answer}")
        div_text = _div_text(cells)
        if key == "dQ":
            terms = " + ".join(f"{tx('dS', i, b)}·{tx('K.0', b, j)}" for b in range(m) if sc.allow[i, b])
            return f"dQ[{tok[i]},{j}] = (Σ dS[{tok[i]},·]·K[·,{j}]) / {div_text} = ({terms or '0'}) / {div_text} = {answer}"
        if key == "dK":
            terms = " + ".join(f"{tx('dS', a, i)}·{tx('Q.0', a, j)}" for a in range(n) if sc.allow[a, i])
            return f"dK[{keys[i]},{j}] = (Σ dS[·,{keys[i]}]·Q[·,{j}]) / {div_text} = ({terms or '0'}) / {div_text} = {answer}"
        grad = {"dW_Q": "dQ", "dW_K": "dK", "dW_V": "dV"}[key]
        terms = " + ".join(f"{tx('X', a, i)}·{tx(grad, a, j)}" for a in range(n))
        return f"{key}[{i},{j}] = Σ X[·,{i}]·{grad}[·,{j}] = {terms} = {answer}"


def _p(cells: PrintedCells, i: int, j: int) -> str:
    """A weight as printed; a masked one is the 0 it is."""
    return cells.txt("weights.0", i, j) if cells.sc.allow[i, j] else "0"


def _div_text(cells: PrintedCells) -> str:
    scale = cells.sc.scale
    return f"√{cells.tables['Q.0'].values.shape[1]}" if scale is None else f"{scale:g}"


SHEET = BackwardSheet()
