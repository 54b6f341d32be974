"""The answer key's lines of [linear]'s backward tables (edges/worksheet/backward/linear.py), each written with
the printed operands it reads, so a calculator gives the printed answer."""

from __future__ import annotations

from collections.abc import Callable

from qkv_tui.edges.worksheet.backward.names import cell_name
from qkv_tui.teach.stages.printed import PrintedCells, Table

KINDS = ("dV", "dA", "dphiQ", "dphiK", "dQu", "dKu")  # the kinds whose line differs from the softmax head's

Ref = tuple[str, int, int]


def linear_line(cells: PrintedCells, table: Table, h: int, i: int, j: int, answer: str,
                dO_h: Callable[[int, int], Ref], used: Callable[[str], str]) -> str:
    """Cell (i, j) of head ``h``'s [linear] backward table; ``dO_h(i, j)`` is where dO_h's cell is printed and
    ``used(role)`` the table φ read."""
    sc = cells.sc
    lin = sc.linear
    assert lin is not None
    kind = table.key.partition(".")[0]
    tok, keys = sc.labels, sc.key_labels
    tx = cells.txt
    W = f"lin_W.{h}" if lin.normalize else f"lin_A.{h}"
    w_name = "W" if lin.normalize else "A"
    name = cell_name(table, i, j, (*sc.labels, *sc.key_labels))
    if kind == "dV":
        body = " + ".join(f"{tx(W, a, i) if sc.allow[a, i] else '0'}·{tx(*dO_h(a, j))}" for a in range(sc.n))
        return f"{name} = Σ {w_name}[·,{keys[i]}]·dO_h[·,{j}] = {body} = {answer}"
    if kind == "dA":
        if not lin.normalize:
            return f"{name} = dW[{tok[i]},{keys[j]}] = {tx(f'dP.{h}', i, j)} = {answer}"
        total = " + ".join(tx(f"lin_A.{h}", i, b) for b in range(sc.m) if sc.allow[i, b])
        return (f"{name} = (dW − D) / Σ A[{tok[i]}] = ({tx(f'dP.{h}', i, j)} − {tx(f'D.{h}', i, 0)}) / ({total})"
                f" = {answer}")
    if kind in ("dphiQ", "dphiK"):
        if kind == "dphiQ":
            pairs = [((f"dA.{h}", i, b), (f"phi_K.{h}", b, j)) for b in range(sc.m) if sc.allow[i, b]]
            what = f"dA[{tok[i]},·]·φ(K)[·,{j}]"
        else:
            pairs = [((f"dA.{h}", a, i), (f"phi_Q.{h}", a, j)) for a in range(sc.n) if sc.allow[a, i]]
            what = f"dA[·,{keys[i]}]·φ(Q)[·,{j}]"
        body = " + ".join(f"{tx(*a)}·{tx(*b)}" for a, b in pairs) or "0"
        return f"{name} = Σ {what} = {body} = {answer}"
    role = "Q" if kind == "dQu" else "K"
    src, phi = f"dphi{role}.{h}", f"phi_{role}.{h}"
    x = float(cells.tables[used(role)].values[i, j])
    d = tx(src, i, j)
    if lin.feature == "elu1" and x <= 0:  # φ(x) = e^x there, so φ' = e^x is the printed φ cell itself
        return f"{name} = dφ·φ' = dφ·e^x = {d}·{tx(phi, i, j)} = {answer}"
    if lin.feature == "relu" and x <= 0:
        return f"{name} = dφ·φ' = {d}·0 = {answer}"
    return f"{name} = dφ·φ' = {d}·1 = {answer}"
