"""The answer key's lines of [mla]'s latent backward tables (edges/worksheet/backward/mla.py), each written with
the printed operands it reads, so a calculator gives the printed answer."""

from __future__ import annotations

from qkv_tui.edges.worksheet.backward.names import cell_name
from qkv_tui.teach.stages.printed import PrintedCells, Table

KINDS = ("mqR", "mkR", "mkRraw", "mcKV", "mW_UK", "mW_UV", "mW_KR", "mW_Q", "mW_DKV", "dX_in")

Ref = tuple[str, int, int]


def _q_all(cells: PrintedCells, i: int, col: int) -> Ref:
    """Cell (i, col) of [dq_C | dq_R] over every head: dQ's nope columns as they are, the rotary ones turned back."""
    mla = cells.sc.mla
    assert mla is not None
    h, c = divmod(col, mla.d_qk)
    if c >= mla.d_nope and mla.turns:
        return (f"mqR.{h}", i, c - mla.d_nope)
    return (f"dQu.{h}", i, c)


def _turn_back(cells: PrintedCells, name: str, src: Ref, role: str, i: int, j: int, answer: str) -> str:
    """a = a'·cos + b'·sin, b = −a'·sin + b'·cos with the printed cos and sin; ``src`` the turned gradient's
    (table, row, first column)."""
    mla = cells.sc.mla
    turn = None if mla is None else mla.rotation(cells.sc.positions).turn  # the pairs it turns, as the heads did
    assert turn is not None
    key, _, start = src
    found = next(((k, pair) for k, pair in enumerate(turn.pairs) if j in pair), None)
    if found is None:  # partial rotary: passed through
        return f"{name} = {cells.txt(key, i, start + j)} = {answer}"
    k, (a, b) = found
    cos, sin = cells.txt("trig.mla", i, 2 * k), cells.txt("trig.mla", i, 2 * k + 1)
    va, vb = cells.txt(key, i, start + a), cells.txt(key, i, start + b)
    if j == a:
        return f"{name} = {role}'a·cos + {role}'b·sin = {va}·{cos} + {vb}·{sin} = {answer}"
    return f"{name} = −{role}'a·sin + {role}'b·cos = -{va}·{sin} + {vb}·{cos} = {answer}"


def mla_line(cells: PrintedCells, table: Table, i: int, j: int, answer: str) -> str:
    sc = cells.sc
    mla = sc.mla
    assert mla is not None
    kind, _, suffix = table.key.partition(".")
    tx = cells.txt
    x = "X_norm" if "X_norm" in cells.tables else "X"
    xs = cells.tables[x].name
    H = len(sc.heads)
    nope = mla.d_nope
    name = cell_name(table, i, j, (*cells.sc.labels, *cells.sc.key_labels))
    kR = "mkRraw" if "mkRraw" in cells.tables else "mkR"

    def terms(pairs: list[tuple[Ref, Ref]]) -> str:
        return " + ".join(f"{tx(*a)}·{tx(*b)}" for a, b in pairs) or "0"

    if kind == "mqR":
        return _turn_back(cells, name, (f"dQu.{suffix}", i, nope), "dq_R", i, j, answer)
    if kind == "mkR":
        parts = " + ".join(tx(f"dKu.{h}", i, nope + j) for h in range(H))
        return f"{name} = Σ over the heads of dK[{sc.labels[i]},{nope + j}] = {parts} = {answer}"
    if kind == "mkRraw":
        return _turn_back(cells, name, ("mkR", i, 0), "dk_R", i, j, answer)
    if kind == "mcKV":
        pairs = [((f"dKu.{h}", i, c), ("W_UK", j, h * nope + c)) for h in range(H) for c in range(nope)]
        pairs += [((f"dV.{h}", i, c), ("W_UV", j, h * mla.d_v + c)) for h in range(H) for c in range(mla.d_v)]
        return f"{name} = Σ dk_C·W_UK[{j}] + Σ dv_C·W_UV[{j}] = {terms(pairs)} = {answer}"
    if kind in ("mW_UK", "mW_UV"):
        width = nope if kind == "mW_UK" else mla.d_v
        h, c = divmod(j, width)
        src = f"dKu.{h}" if kind == "mW_UK" else f"dV.{h}"
        what = "dk_C" if kind == "mW_UK" else "dv_C"
        body = terms([(("c_KV_raw", a, i), (src, a, c)) for a in range(sc.n)])
        return f"{name} = Σ c_KV[·,{i}]·{what}[·,{c}] (head {h + 1}) = {body} = {answer}"
    if kind == "mW_KR":
        return f"{name} = Σ {xs}[·,{i}]·dk_R[·,{j}] = {terms([((x, a, i), (kR, a, j)) for a in range(sc.n)])} = {answer}"
    if kind == "mW_Q":
        body = terms([((x, a, i), _q_all(cells, a, j)) for a in range(sc.n)])
        return f"{name} = Σ {xs}[·,{i}]·[dq_C | dq_R][·,{j}] = {body} = {answer}"
    if kind == "mW_DKV":
        return (f"{name} = Σ {xs}[·,{i}]·dc_KV[·,{j}] = {terms([((x, a, i), ('mcKV', a, j)) for a in range(sc.n)])}"
                f" = {answer}")
    # dX_in: every path into X̂, one product per term
    pairs = [(("mcKV", i, k), ("W_DKV", j, k)) for k in range(mla.W_DKV.shape[1])]
    pairs += [((kR, i, k), ("W_KR", j, k)) for k in range(mla.W_KR.shape[1])]
    pairs += [(_q_all(cells, i, k), ("W_QA", j, k)) for k in range(H * mla.d_qk)]
    return f"{name} = dc_KV·W_DKVᵀ + dk_R·W_KRᵀ + [dq_C | dq_R]·W_Qᵀ at [{sc.labels[i]},{j}] = {terms(pairs)} = {answer}"
