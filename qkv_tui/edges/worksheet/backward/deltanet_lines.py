"""The answer key's lines of [deltanet]'s backward tables (edges/worksheet/backward/deltanet.py): each cell's one
operation of kernels/deltanet_backward.py, written with the printed numbers it reads, so a calculator gives the
printed answer within one unit of its last digit."""

from __future__ import annotations

from qkv_tui.edges.worksheet.backward.lines import operand_keys
from qkv_tui.teach.stages.printed import PrintedCells, Table, exact


def _sum(parts: list[str]) -> str:
    return " + ".join(parts) or "0"


def _root(cells: PrintedCells, key: str, t: int) -> str:
    """‖x‖ = √(Σx² + 1e-6) of row ``t`` of a printed table, as its operands."""
    width = cells.tables[key].values.shape[1]
    squares = " + ".join(f"{cells.txt(key, t, c)}·{cells.txt(key, t, c)}" for c in range(width))
    return f"√({squares} + 0.000001)"


def line(cells: PrintedCells, table: Table, i: int, j: int, answer: str) -> str:
    """The answer key's line for cell (i, j) of one of a delta-rule head's backward tables."""
    sc, tx = cells.sc, cells.txt
    kind, _, rest = table.key.partition(".")
    h = int(rest.split(".")[0])
    g = cells.owners[h]
    tok = sc.labels
    d_k, d_v = sc.heads[h].d_k, sc.heads[h].d_v
    ops = operand_keys(sc, cells.owners)

    def dO(t: int, c: int) -> str:
        return tx(*ops.dO_h(cells.tables, h, t, c))

    beta = f"dn_g.{h}"
    if kind in ("dnb_gates", "dnb_rate", "dnb_dW"):
        return _gate_line(cells, table, kind, h, i, j, answer)
    if kind == "dnb_tok":
        t = int(rest.split(".")[1])
        me, tl = table.key, tok[t]
        if i < d_k:
            first = f"{tx(f'dn_q.{h}', t, i)}·{dO(t, j)}"
            if t == sc.n - 1:
                return f"dS_{tl}[{i},{j}] = q[{tl},{i}]·dO[{tl},{j}] (the last token) = {first} = {answer}"
            nl, after = tok[t + 1], f"dnb_tok.{h}.{t + 1}"
            carry = f"{tx(after, i, j)} − {tx(f'dn_k.{h}', t + 1, i)}·{tx(after, d_k, j)}·{tx(beta, t + 1, 1)}"
            return (f"dS_{tl}[{i},{j}] = q[{tl},{i}]·dO[{tl},{j}] + e^g[{nl}]·dS'_{nl}[{i},{j}], dS' = dS − k·dδ·β ="
                    f" {first} + e^{tx(beta, t + 1, 0)}·({carry}) = {answer}")
        body = _sum([f"{tx(me, r, j)}·{tx(f'dn_k.{h}', t, r)}" for r in range(d_k)])
        return f"dδ_{tl}[{j}] = Σ dS_{tl}[·,{j}]·k[{tl}] = {body} = {answer}"
    tl = tok[i]
    step = f"dnb_tok.{h}.{i}"  # the token's own table of steps
    before = f"dn_S.{h}.{i - 1}"  # S' = S·e^g of the token before, as printed
    if kind == "dnb_dq":
        body = _sum([f"{tx(f'dn_S.{h}.{i}', j, c)}·{dO(i, c)}" for c in range(d_v)])
        return f"dq[{tl},{j}] = S_{tl}[{j},·]·dO[{tl}] = {body} = {answer}"
    if kind == "dnb_dk":
        write = _sum([f"{tx(step, j, c)}·{tx(f'dn_delta.{h}.{i}', 0, c)}" for c in range(d_v)])
        if i == 0:
            return f"dk[{tl},{j}] = dS_{tl}[{j},·]·δ_{tl} (the state was empty before) = {write} = {answer}"
        recall = _sum([f"{tx(before, j, c)}·{tx(step, d_k, c)}·{tx(beta, i, 1)}" for c in range(d_v)])
        return (f"dk[{tl},{j}] = dS_{tl}[{j},·]·δ_{tl} − e^g[{tl}]·S_{tok[i - 1]}[{j},·]·dδ_{tl}·β[{tl}] = {write} −"
                f" e^{tx(beta, i, 0)}·({recall}) = {answer}")
    if kind == "dnb_bg":
        if j == 0:
            body = _sum([f"{tx(step, d_k, c)}·{tx(f'dn_delta.{h}.{i}', 0, c)}" for c in range(d_v)])
            if float(cells.tables[beta].values[i, 1]) != 0:
                return f"dβ[{tl}] = dδ_{tl}·(v − kv) = dδ_{tl}·δ_{tl} / β[{tl}] = ({body}) / {tx(beta, i, 1)} = {answer}"
            kv = [tx(f"dn_kv.{h}.{i}", 0, c) if i else "0" for c in range(d_v)]
            body = _sum([f"{tx(step, d_k, c)}·({tx(f'V.{g}', i, c)} − {kv[c]})" for c in range(d_v)])
            return f"dβ[{tl}] = dδ_{tl}·(v[{tl}] − kv_{tl}) = {body} = {answer}"
        body = _sum([f"{tx(before, r, c)}·({tx(step, r, c)} − {tx(f'dn_k.{h}', i, r)}·{tx(step, d_k, c)}·"
                     f"{tx(beta, i, 1)})" for r in range(d_k) for c in range(d_v)])
        return (f"dg[{tl}] = Σ S'_{tl} ⊙ dS'_{tl} = e^g[{tl}]·Σ S_{tok[i - 1]} ⊙ (dS − k·dδ·β) ="
                f" e^{tx(beta, i, 0)}·({body}) = {answer}")
    if kind == "dV":
        return f"dV[{tl},{j}] = dδ_{tl}[{j}]·β[{tl}] = {tx(step, d_k, j)}·{tx(beta, i, 1)} = {answer}"
    if kind == "dnb_qhat":
        return f"q̂[{tl},{j}] = Q[{tl},{j}] / ‖Q[{tl}]‖ = {tx(f'Q.{h}', i, j)} / {_root(cells, f'Q.{h}', i)} = {answer}"
    if kind == "dnb_m":
        if j == 0:
            body = _sum([f"{tx(f'dnb_qhat.{h}', i, c)}·{tx(f'dnb_dq.{h}', i, c)} / √{d_k}" for c in range(d_k)])
            return f"m_q[{tl}] = q̂·dq̂, dq̂ = dq / √{d_k} = {body} = {answer}"
        body = _sum([f"{tx(f'dn_k.{h}', i, c)}·{tx(f'dnb_dk.{h}', i, c)}" for c in range(d_k)])
        return f"m_k[{tl}] = k·dk = {body} = {answer}"
    if kind == "dQu":
        return (f"dQ[{tl},{j}] = (dq̂ − q̂·m_q) / ‖Q[{tl}]‖, dq̂ = dq / √{d_k} = ({tx(f'dnb_dq.{h}', i, j)} / √{d_k} −"
                f" {tx(f'dnb_qhat.{h}', i, j)}·{tx(f'dnb_m.{h}', i, 0)}) / {_root(cells, f'Q.{h}', i)} = {answer}")
    if kind == "dKu":
        return (f"dK[{tl},{j}] = (dk − k·m_k) / ‖K[{tl}]‖ = ({tx(f'dnb_dk.{h}', i, j)} − {tx(f'dn_k.{h}', i, j)}·"
                f"{tx(f'dnb_m.{h}', i, 1)}) / {_root(cells, f'K.{g}', i)} = {answer}")
    raise KeyError(table.key)


def _gate_line(cells: PrintedCells, table: Table, kind: str, h: int, i: int, j: int, answer: str) -> str:
    sc, tx = cells.sc, cells.txt
    x, xn = ("X_norm", "X̂") if sc.norm is not None else ("X", "X")
    gates, weights, rate = f"dnb_gates.{h}", f"dn_W.{h}", f"dn_rate.{h}"
    gcols = cells.tables[gates].cols
    wrows = cells.tables[weights].rows
    col = table.cols[j]
    if kind == "dnb_gates":
        tl = sc.labels[i]
        if col == "a":
            w = wrows.index("W_a")
            body = _sum([f"{tx(x, i, c)}·{tx(weights, w, c)}" for c in range(sc.X.shape[1])])
            return f"a[{tl}] = {xn}[{tl}]·W_a + dt_bias = {body} + {tx(rate, 0, 1)} = {answer}"
        if col == "σ(a)":
            shown = tx(gates, i, gcols.index("a"))  # −a written out: (-1.000) as 1.000, 0.5 as (-0.5)
            a = shown[2:-1] if shown.startswith("(-") else f"(-{shown})"
            return f"σ(a[{tl}]) = 1 / (1 + e^(−a)) = 1 / (1 + e^{a}) = {answer}"
        if col == "da":
            return (f"da[{tl}] = −dg[{tl}]·e^A_log·σ(a[{tl}]) = −{tx(f'dnb_bg.{h}', i, 1)}·e^{tx(rate, 0, 0)}·"
                    f"{tx(gates, i, gcols.index('σ(a)'))} = {answer}")
        b = tx(f"dn_g.{h}", i, 1)
        return f"db[{tl}] = dβ[{tl}]·β[{tl}]·(1 − β[{tl}]) = {tx(f'dnb_bg.{h}', i, 0)}·{b}·(1 − {b}) = {answer}"
    if kind == "dnb_rate":
        if j == 0:
            body = _sum([f"{tx(f'dnb_bg.{h}', t, 1)}·{tx(f'dn_g.{h}', t, 0)}" for t in range(sc.n)])
            return f"dA_log = Σ dg·g = {body} = {answer}"
        da = gcols.index("da")
        return f"ddt_bias = Σ da = {_sum([tx(gates, t, da) for t in range(sc.n)])} = {answer}"
    assert kind == "dnb_dW", kind
    name = table.rows[i]
    src = gcols.index("da" if name == "dW_a" else "db")
    body = _sum([f"{tx(x, t, j)}·{tx(gates, t, src)}" for t in range(sc.n)])
    return f"{name}[{j}] = Σ {xn}[·,{j}]·{gcols[src]} = {body} = {answer}"


def sgd_line(cells: PrintedCells, table: Table, i: int, j: int, answer: str) -> str | None:
    """new W_a[c] = W_a[c] − lr·dW_a[c] (W_b alike), new A_log = A_log − lr·dA_log (dt_bias alike)."""
    if not table.key.startswith(("sgd.dn_W.", "sgd.dn_rate.")):
        return None
    bw = cells.sc.backward
    assert bw is not None
    weight = table.key.removeprefix("sgd.")
    h = weight.rpartition(".")[2]
    grad = f"dnb_dW.{h}" if weight.startswith("dn_W.") else f"dnb_rate.{h}"
    lr = exact(float(bw.lr))
    if weight.startswith("dn_W."):  # a row a weight
        name = table.rows[i]
        r = cells.tables[weight].rows.index(name)
        return (f"new {name}[{j}] = {name}[{j}] − lr·d{name}[{j}] = {cells.txt(weight, r, j)} − {lr}·"
                f"{cells.txt(grad, r, j)} = {answer}")
    name = table.cols[j]
    c = cells.tables[weight].cols.index(name)
    return f"new {name} = {name} − lr·d{name} = {cells.txt(weight, i, c)} − {lr}·{cells.txt(grad, i, c)} = {answer}"

