"""The answer key's lines of [deltanet]'s backward tables (edges/worksheet/backward/deltanet.py): each cell's one
operation of kernels/deltanet_backward.py, written with the printed numbers it reads, so a calculator gives the
printed answer within one unit of its last digit."""

from __future__ import annotations

from qkv_tui.edges.worksheet.backward.lines import operand_keys
from qkv_tui.teach.stages.printed import PrintedCells, Table, exact


def given(x: float) -> str:
    """A number the rule gives (A_log, dt_bias) as an operand: exact, a negative one in parentheses."""
    text = exact(float(x))
    return f"({text})" if text.startswith("-") else text


def _sum(parts: list[str]) -> str:
    return " + ".join(parts) or "0"


def _root(cells: PrintedCells, key: str, t: int) -> str:
    """r = √(Σx² + 1e-6) of row ``t`` of a printed table, as its operands."""
    width = cells.tables[key].values.shape[1]
    squares = " + ".join(f"{cells.txt(key, t, c)}·{cells.txt(key, t, c)}" for c in range(width))
    return f"√({squares} + 0.000001)"


Ref = tuple[str, int, int]


class Steps:
    """Where a head's per-token steps sit on the page (edges/worksheet/backward/deltanet.py): a table a token, the last
    first (``dnb_tok``: dS's rows, then dδ), dq and dk side by side (``dnb_qk``), m_q and m_k (``dnb_m``), dβ and dg
    beside dV."""

    def __init__(self, cells: PrintedCells, h: int) -> None:
        self.h = h
        self.d_k, self.d_v = cells.sc.heads[h].d_k, cells.sc.heads[h].d_v

    def dS(self, t: int, i: int, j: int) -> Ref:
        return (f"dnb_tok.{self.h}.{t}", i, j)

    def dd(self, t: int, j: int) -> Ref:
        return (f"dnb_tok.{self.h}.{t}", self.d_k, j)

    def bg(self, t: int, c: int) -> Ref:
        """dβ (c = 0) or dg (c = 1) of token t."""
        return (f"dV.{self.h}", t, self.d_v + c)

    def dq(self, t: int, c: int) -> Ref:
        return (f"dnb_qk.{self.h}", t, c)

    def dk(self, t: int, c: int) -> Ref:
        return (f"dnb_qk.{self.h}", t, self.d_k + c)

    def m(self, t: int, c: int) -> Ref:
        """m_q (c = 0) or m_k (c = 1) of token t."""
        return (f"dnb_m.{self.h}", t, c)

    def at(self, table: Table, i: int, j: int) -> tuple[str, int, int, int]:
        """What cell (i, j) is: ("dS", t, row, col), ("dδ", t, col, 0), ("dv", t, col, 0), ("dβ"|"dg", t, 0, 0),
        ("dq"|"dk", t, col, 0)."""
        kind, _, rest = table.key.partition(".")
        if kind == "dnb_tok":
            t = int(rest.split(".")[1])
            return ("dS", t, i, j) if i < self.d_k else ("dδ", t, j, 0)
        if kind == "dnb_m":
            return ("m", i, j, 0)
        if kind == "dnb_qk":
            return ("dq", i, j, 0) if j < self.d_k else ("dk", i, j - self.d_k, 0)
        assert kind == "dV", kind
        return ("dv", i, j, 0) if j < self.d_v else ("dβ" if j == self.d_v else "dg", i, 0, 0)


def line(cells: PrintedCells, table: Table, i: int, j: int, answer: str) -> str:
    """The answer key's line for cell (i, j) of one of a delta-rule head's backward tables."""
    sc, tx = cells.sc, cells.txt
    kind, _, rest = table.key.partition(".")
    h = int(rest.split(".")[0])
    g = cells.owners[h]
    tok = sc.labels
    d_k, d_v = sc.heads[h].d_k, sc.heads[h].d_v
    ops = operand_keys(sc, cells.owners)
    st = Steps(cells, h)

    def dO(t: int, c: int) -> str:
        return tx(*ops.dO_h(cells.tables, h, t, c))

    def r(ref: Ref) -> str:
        return tx(*ref)

    beta, k = f"dn_g.{h}", f"dn_k.{h}"
    if kind in ("dnb_gates", "dnb_rate", "dnb_dW"):
        return _gate_line(cells, table, kind, h, i, j, answer)
    what, t, a, c = st.at(table, i, j) if kind in ("dnb_tok", "dnb_qk", "dnb_m", "dV") else ("", i, j, 0)
    tl = tok[t]
    before = f"dn_S.{h}.{t - 1}"  # S' = S·e^g of the token before, as printed
    if what == "dS":
        first = f"{tx(f'dn_q.{h}', t, a)}·{dO(t, c)}"
        if t == sc.n - 1:
            return f"dS_{tl}[{a},{c}] = q[{tl},{a}]·dO[{tl},{c}] (the last token) = {first} = {answer}"
        nl = tok[t + 1]
        carry = f"{r(st.dS(t + 1, a, c))} − {tx(k, t + 1, a)}·{r(st.dd(t + 1, c))}·{tx(beta, t + 1, 1)}"
        return (f"dS_{tl}[{a},{c}] = q[{tl},{a}]·dO[{tl},{c}] + e^g[{nl}]·dS'_{nl}[{a},{c}], dS' = dS − k·dδ·β ="
                f" {first} + e^{tx(beta, t + 1, 0)}·({carry}) = {answer}")
    if what == "dδ":
        body = _sum([f"{r(st.dS(t, x, a))}·{tx(k, t, x)}" for x in range(d_k)])
        return f"dδ_{tl}[{a}] = Σ dS_{tl}[·,{a}]·k[{tl}] = {body} = {answer}"
    if what == "dβ":
        body = _sum([f"{r(st.dd(t, c))}·{tx(f'dn_delta.{h}.{t}', 0, c)}" for c in range(d_v)])
        if float(cells.tables[beta].values[t, 1]) != 0:
            return f"dβ[{tl}] = dδ_{tl}·(v − kv) = dδ_{tl}·δ_{tl} / β[{tl}] = ({body}) / {tx(beta, t, 1)} = {answer}"
        kv = [tx(f"dn_kv.{h}.{t}", 0, c) if t else "0" for c in range(d_v)]
        body = _sum([f"{r(st.dd(t, c))}·({tx(f'V.{g}', t, c)} − {kv[c]})" for c in range(d_v)])
        return f"dβ[{tl}] = dδ_{tl}·(v[{tl}] − kv_{tl}) = {body} = {answer}"
    if what == "dg":
        body = _sum([f"{tx(before, x, c)}·({r(st.dS(t, x, c))} − {tx(k, t, x)}·{r(st.dd(t, c))}·{tx(beta, t, 1)})"
                     for x in range(d_k) for c in range(d_v)])
        return (f"dg[{tl}] = Σ S'_{tl} ⊙ dS'_{tl} = e^g[{tl}]·Σ S_{tok[t - 1]} ⊙ (dS − k·dδ·β) ="
                f" e^{tx(beta, t, 0)}·({body}) = {answer}")
    if what == "dq":
        body = _sum([f"{tx(f'dn_S.{h}.{t}', a, c)}·{dO(t, c)}" for c in range(d_v)])
        return f"dq[{tl},{a}] = S_{tl}[{a},·]·dO[{tl}] = {body} = {answer}"
    if what == "dk":
        write = _sum([f"{r(st.dS(t, a, c))}·{tx(f'dn_delta.{h}.{t}', 0, c)}" for c in range(d_v)])
        if t == 0:
            return f"dk[{tl},{a}] = dS_{tl}[{a},·]·δ_{tl} (the state was empty before) = {write} = {answer}"
        recall = _sum([f"{tx(before, a, c)}·{r(st.dd(t, c))}·{tx(beta, t, 1)}" for c in range(d_v)])
        return (f"dk[{tl},{a}] = dS_{tl}[{a},·]·δ_{tl} − e^g[{tl}]·S_{tok[t - 1]}[{a},·]·dδ_{tl}·β[{tl}] = {write} −"
                f" e^{tx(beta, t, 0)}·({recall}) = {answer}")
    if what == "dv":
        return f"dV[{tl},{a}] = dδ_{tl}[{a}]·β[{tl}] = {r(st.dd(t, a))}·{tx(beta, t, 1)} = {answer}"
    Q, K = f"Q.{h}", f"K.{g}"
    if what == "m":
        if a == 0:
            body = _sum([f"{tx(Q, i, c)}·{r(st.dq(i, c))}" for c in range(d_k)])
            return f"m_q[{tl}] = Q·dq / (r_Q·√{d_k}) = ({body}) / ({_root(cells, Q, i)}·√{d_k}) = {answer}"
        body = _sum([f"{tx(K, i, c)}·{r(st.dk(i, c))}" for c in range(d_k)])
        return f"m_k[{tl}] = K·dk / r_K = ({body}) / {_root(cells, K, i)} = {answer}"
    if kind == "dQu":
        root = _root(cells, Q, i)
        return (f"dQ[{tl},{j}] = (dq / √{d_k} − Q / r_Q·m_q) / r_Q = ({r(st.dq(i, j))} / √{d_k} −"
                f" {tx(Q, i, j)} / {root}·{r(st.m(i, 0))}) / {root} = {answer}")
    if kind == "dKu":
        root = _root(cells, K, i)
        return (f"dK[{tl},{j}] = (dk − K / r_K·m_k) / r_K = ({r(st.dk(i, j))} − {tx(K, i, j)} / {root}·"
                f"{r(st.m(i, 1))}) / {root} = {answer}")
    raise KeyError(table.key)


def _gate_line(cells: PrintedCells, table: Table, kind: str, h: int, i: int, j: int, answer: str) -> str:
    sc, tx = cells.sc, cells.txt
    x, xn = ("X_norm", "X̂") if sc.norm is not None else ("X", "X")
    gates, weights = f"dnb_gates.{h}", f"dn_W.{h}"
    dn = sc.deltanet
    assert dn is not None
    gcols = cells.tables[gates].cols
    wrows = cells.tables[weights].rows
    col = table.cols[j]
    if kind == "dnb_gates":
        tl = sc.labels[i]
        if col == "a":
            w = wrows.index("W_a")
            body = _sum([f"{tx(x, i, c)}·{tx(weights, w, c)}" for c in range(sc.X.shape[1])])
            assert dn.dt_bias is not None
            return f"a[{tl}] = {xn}[{tl}]·W_a + dt_bias = {body} + {given(dn.dt_bias[h])} = {answer}"
        if col == "σ(a)":
            shown = tx(gates, i, gcols.index("a"))  # −a written out: (-1.000) as 1.000, 0.5 as (-0.5)
            a = shown[2:-1] if shown.startswith("(-") else f"(-{shown})"
            return f"σ(a[{tl}]) = 1 / (1 + e^(−a)) = 1 / (1 + e^{a}) = {answer}"
        if col == "da":
            assert dn.A_log is not None
            return (f"da[{tl}] = −dg[{tl}]·e^A_log·σ(a[{tl}]) = −{tx(*Steps(cells, h).bg(i, 1))}·e^{given(dn.A_log[h])}·"
                    f"{tx(gates, i, gcols.index('σ(a)'))} = {answer}")
        b = tx(f"dn_g.{h}", i, 1)
        return f"db[{tl}] = dβ[{tl}]·β[{tl}]·(1 − β[{tl}]) = {tx(*Steps(cells, h).bg(i, 0))}·{b}·(1 − {b}) = {answer}"
    if kind == "dnb_rate":
        if j == 0:
            body = _sum([f"{tx(*Steps(cells, h).bg(t, 1))}·{tx(f'dn_g.{h}', t, 0)}" for t in range(sc.n)])
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
    c = cells.tables[grad].cols.index(f"d{name}")
    dn = cells.sc.deltanet
    assert dn is not None and dn.A_log is not None and dn.dt_bias is not None
    old = (dn.A_log if name == "A_log" else dn.dt_bias)[int(h)]
    return f"new {name} = {name} − lr·d{name} = {given(old)} − {lr}·{cells.txt(grad, i, c)} = {answer}"

