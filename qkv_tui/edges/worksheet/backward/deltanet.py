"""[deltanet] on the backward worksheet (docs/backward.md, "[deltanet]"): the gated delta rule read backwards for one
head, the last token first, then its L2 norms and, where g and β come from the weights, the gates (dGates); the
projections' own tables (dW_Q = Xᵀ·dQ …), dX and the SGD step are the page's, after.

The numbers are kernels/deltanet_backward.py's own (core/gradients.py reads the head's record backwards), run on the
page: :func:`printed` hands it the head's forward as the page prints it (Q, K, q, k, g, β, each token's δ and S; S' and
kv worked from those, S' = S before·e^g and v − kv = δ / β, so no other forward table is read), and the page's policy
rounds what the kernel keeps as a table of its own (dS, dδ, dq, dk, dv, dβ, dg, dQ, dK) and nothing inside one
operation (dS' = dS − k·dδ·β is worked inside the line of the token before), so each table is worked from printed
numbers, rounded once. The gates' a and σ(a) are computed here as gates_backward computes them, under the same policy.

A table a token holds its dS and dδ, the last token first; dq and dk sit side by side, m_q and m_k (what the L2 norms
take away along Q and K) apart, and dβ and dg beside dV. The answer key's lines are in deltanet_lines.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qkv_tui.core.scenario import Scenario
from qkv_tui.edges.worksheet.backward import deltanet_lines as lines
from qkv_tui.edges.worksheet.backward.parts import PartSheet
from qkv_tui.edges.worksheet.backward.tables import PageBackward
from qkv_tui.kernels.attention_backward import row_dots
from qkv_tui.kernels.deltanet import DeltaForward
from qkv_tui.kernels.deltanet_backward import DeltaBack, GatesBack, forward_as_printed
from qkv_tui.kernels.policy import round_to
from qkv_tui.teach.arith import MAX_TERMS
from qkv_tui.teach.stages.printed import PrintedChain, Table, exact, idx


def _value(chain: PrintedChain, key: str) -> np.ndarray:
    """A table printed earlier, computed or given (g and β are an input where the file gives them)."""
    if key in chain.printed:
        return chain.printed[key].values
    return next(t.values for t in chain.tables if t.key == key)


def printed(chain: PrintedChain, h: int, hr: Any) -> tuple[list[object], dict[str, object]] | None:
    """The head's DeltaForward with every number its backward reads as the page prints it; None without one."""
    f = hr.part(DeltaForward)
    if f is None:
        return None
    v, g = chain.values, chain.owners[h]
    n = f.q.shape[0]
    d_v = f.S.shape[2]
    Q, K = v(f"Q.{h}"), v(f"K.{g}")
    gb = _value(chain, f"dn_g.{h}")
    gates, beta = np.array(gb[:, 0], dtype=float), np.array(gb[:, 1], dtype=float)
    S = np.stack([v(f"dn_S.{h}.{t}") for t in range(n)])  # (n, d_k, d_v)
    delta = np.stack([v(f"dn_delta.{h}.{t}")[0] for t in range(n)])  # (n, d_v)
    values = np.stack([_v_row(chain, h, t) for t in range(n)])
    # where β is 0 (given so) δ says nothing of kv: the printed one (the first token's is 0)
    kv_given = np.stack([v(f"dn_kv.{h}.{t}")[0] if t and not beta[t] else np.zeros(d_v) for t in range(n)])
    record = forward_as_printed(Q, K, v(f"dn_q.{h}"), v(f"dn_k.{h}"), gates, beta, S, delta, values, kv_given,
                                v(f"output.{h}"))
    return [record], {"weights": hr.weights}


def _v_row(chain: PrintedChain, h: int, t: int) -> np.ndarray:
    """Token ``t``'s Value row as printed (in the section of the head that owns the K/V head)."""
    row: np.ndarray = chain.values(f"V.{chain.owners[h]}")[t]
    return row


def _x(chain: PrintedChain) -> np.ndarray:
    """What the gates read, as printed: X̂ where the scenario has a norm, else X."""
    return chain.values("X_norm") if chain.sc.norm is not None else np.asarray(chain.sc.X, dtype=float)


def gate_columns(sc: Scenario) -> tuple[bool, bool]:
    """Whether g is computed (from W_a, A_log, dt_bias) and whether β is (from W_b): what dGates reads back."""
    dn = sc.deltanet
    assert dn is not None
    return dn.g is None, dn.beta is None


def tables(t: Any, chain: PrintedChain, h: int, hr: Any, G: Any) -> bool:
    """Head ``h``'s tables from dO to dQ and dK (the delta rule, its L2 norms) and to the gates' weights."""
    hg = G.heads[h]
    f, b = hr.part(DeltaForward), hg.part(DeltaBack)
    if f is None or b is None:
        return False
    sc = chain.sc
    tok = sc.labels
    n, d_k = f.q.shape
    d_v = f.S.shape[2]
    ks, vs = idx(d_k), idx(d_v)
    for t_ in range(n - 1, -1, -1):  # a table a token, the last first: the state's gradient flows back in time
        heading = f"{tok[t_]}: dS, dδ" + (" (the last token)" if t_ == n - 1 else "")
        t(f"dnb_tok.{h}.{t_}", tok[t_], heading, np.concatenate([b.dS[t_], b.ddelta[t_][None, :]]),
          (*(f"dS {i}" for i in ks), "dδ"), vs, h)
    page = PageBackward(chain.d)  # m as l2_backward works it: each row's dot product, rounded once
    Q, K = chain.values(f"Q.{h}"), chain.values(f"K.{chain.owners[h]}")
    m = np.stack([row_dots(Q / f.root_q[:, None], b.dq / f.divisor, page), row_dots(K / f.root_k[:, None], b.dk, page)],
                 axis=1)  # (n, 2)
    t(f"dnb_qk.{h}", "", "dq = S·dO, dk = dS·δ − S'·dv", np.concatenate([b.dq, b.dk], axis=1), tok,
      (*(f"dq {i}" for i in ks), *(f"dk {i}" for i in ks)), h)
    # what the L2 norms take away along Q and K
    t(f"dnb_m.{h}", "m", "m_q = Q·dq̂ / r_Q, m_k = K·dk / r_K", m, tok, ("m_q", "m_k"), h)
    t(f"dQu.{h}", "dQ", "dQ = (dq̂ − Q / r_Q·m_q) / r_Q", hg.attend.dQ_used, tok, ks, h)
    t(f"dKu.{h}", "dK", "dK = (dk − K / r_K·m_k) / r_K", hg.attend.dK_used, tok, ks, h)
    allow = np.ones((n, d_v + 2), dtype=bool)
    allow[0, -1] = False  # dg of the first token is 0: its state was empty, so its decay changed nothing
    # dV (what dW_V and dX read: its first d_v columns) with the token's dβ and dg beside it
    t(f"dV.{h}", "dV", "dV = dδ·β; dβ, dg", np.concatenate([b.dv, b.dbeta[:, None], b.dg[:, None]], axis=1), tok,
      (*vs, "dβ", "dg"), h, allow)
    _gate_tables(t, chain, h, G)
    return True


def _gate_tables(t: Any, chain: PrintedChain, h: int, G: Any) -> None:
    """dGates: g and β back through softplus' slope σ(a) and the sigmoid's β(1 − β), to W_a, A_log, dt_bias, W_b."""
    sc = chain.sc
    gb = G.part(GatesBack)
    dn = sc.deltanet
    if gb is None or dn is None:
        return
    has_g, has_b = gate_columns(sc)
    X = _x(chain)
    d_model = X.shape[1]
    weights = [(name, W[:, h]) for name, W, on in (("W_a", dn.W_a, has_g), ("W_b", dn.W_b, has_b))
               if on and W is not None]
    t(f"dn_W.{h}", "W", "the gates' weights (given)", np.stack([w for _, w in weights]),
      tuple(name for name, _ in weights), idx(d_model), h, given=True)
    cols: list[tuple[str, np.ndarray]] = []
    if has_g:
        assert dn.W_a is not None and dn.A_log is not None and dn.dt_bias is not None and gb.da is not None
        p = PageBackward(chain.d)
        a = p.table(p.matmul(X, dn.W_a[:, h:h + 1]) + dn.dt_bias[h])  # as gates_backward keeps it
        cols += [("a", a[:, 0]), ("σ(a)", p.table(1.0 / (1.0 + np.exp(-a)))[:, 0]), ("da", gb.da[:, h])]
    if has_b:
        assert gb.db is not None
        cols.append(("db", gb.db[:, h]))
    x = "X̂" if sc.norm is not None else "X"
    t(f"dnb_gates.{h}", "", ", ".join(c for c, _ in cols), np.stack([c for _, c in cols], axis=1), sc.labels,
      tuple(c for c, _ in cols), h)
    if has_g:
        assert gb.dA_log is not None and gb.ddt_bias is not None
        t(f"dnb_rate.{h}", "", "dA_log = Σ dg·g, ddt_bias = Σ da",
          np.array([[gb.dA_log[h], gb.ddt_bias[h]]]), ("d",), ("dA_log", "ddt_bias"), h)
    grads = [("dW_a", gb.dW_a, "da") if name == "W_a" else ("dW_b", gb.dW_b, "db") for name, _ in weights]
    t(f"dnb_dW.{h}", "", ", ".join(f"{name} = {x}ᵀ·{d}" for name, _, d in grads),
      np.stack([g[:, h] for _, g, _ in grads]), tuple(name for name, _, _ in grads), idx(d_model), h)


KINDS = frozenset(("dnb_tok", "dnb_qk", "dnb_m", "dV", "dQu", "dKu",
                   "dn_W", "dnb_gates", "dnb_rate", "dnb_dW"))


def rules(sc: Scenario) -> list[str]:
    return ["  The delta rule, last token first: dS = q·dOᵀ + e^g·dS' (dS' = dS − k·dδ·β, the token after's);"
            " S' = S before·e^g; dβ = dδ·(v − kv) = dδ·δ / β; r_Q = √(ΣQ² + 1e-6) (r_K alike), dq̂ = dq / √dₖ, m_q = Q·dq̂ / r_Q."
            + (" Gates: da = −dg·e^A_log·σ(a), db = dβ·β·(1 − β)." if any(gate_columns(sc)) else "")
            + _rates(sc)]


def _rates(sc: Scenario) -> str:
    """The decay's A_log and dt_bias, given: the gates' lines and the SGD step read them from here."""
    dn = sc.deltanet
    if dn is None or dn.g is not None or dn.A_log is None or dn.dt_bias is None:
        return ""
    if len(sc.heads) == 1:
        return f" A_log = {exact(float(dn.A_log[0]))}, dt_bias = {exact(float(dn.dt_bias[0]))} (given)."
    return (f" A_log = {', '.join(exact(float(x)) for x in dn.A_log)} and dt_bias ="
            f" {', '.join(exact(float(x)) for x in dn.dt_bias)}, a head each (given).")


def uncovered(sc: Scenario) -> str | None:
    """dg sums S' ⊙ dS' over the whole state, d_k·d_v products: past MAX_TERMS, a sum a student cannot type in."""
    cells = max(h.d_k * h.d_v for h in sc.heads)
    if cells <= MAX_TERMS:
        return None
    return (f"[deltanet]'s dg = Σ S' ⊙ dS', a sum of {cells} products (one for each cell of the state), more than the"
            f" {MAX_TERMS} terms a worksheet takes")


STAGES = (
    (("dnb_tok", "dnb_qk", "dnb_m", "dV", "dQu", "dKu"), "ddelta"),
    (("dn_W", "dnb_gates", "dnb_rate", "dnb_dW"), "dgates"),
)
SGD_STAGE = "sgd"  # edges/worksheet/sgd.py's STAGE key (not imported: sgd.py asks this module)


def sgd_tables(by_key: dict[str, Table], comp: Any, lr: float, d: int) -> list[Table]:
    """Each head's trained gate weights moved once: W_a and W_b (its column), A_log and dt_bias (its number)."""
    sc = comp.scenario
    assert sc.backward is not None
    trained = set(sc.backward.train)
    out: list[Table] = []
    for h in range(len(sc.heads)):
        w, g, r = by_key.get(f"dn_W.{h}"), by_key.get(f"dnb_dW.{h}"), by_key.get(f"dnb_rate.{h}")
        dn = sc.deltanet
        # a row a weight for W_a and W_b; A_log and dt_bias (the rule gives them) in one row
        moves = [] if w is None or g is None else [(f"sgd.dn_W.{h}", w.rows, w.cols, w.values, g.values, True)]
        if r is not None and dn is not None and dn.A_log is not None and dn.dt_bias is not None:
            rates = np.array([[dn.A_log[h], dn.dt_bias[h]]])
            moves.append((f"sgd.dn_rate.{h}", r.rows, r.cols, rates, r.values, False))
        for key, rows, cols, old, grads, by_row in moves:
            names = rows if by_row else cols
            keep = [n for n, name in enumerate(names) if name.removeprefix("d") in trained]
            if not keep:
                continue
            old, grads = (old[keep], grads[keep]) if by_row else (old[:, keep], grads[:, keep])
            with np.errstate(over="ignore", invalid="ignore"):
                new = round_to(old - lr * grads, d)
            if np.isfinite(new).all():
                moved = tuple(names[n].removeprefix("d") for n in keep)
                out.append(Table(key, "new", f"new {', '.join(moved)} = each − lr·its gradient", SGD_STAGE, h,
                                 np.asarray(new, dtype=float), moved if by_row else ("",), cols if by_row else moved,
                                 False, True))
    return out


SHEET = PartSheet(printed, tables, KINDS, lines.line, rules, uncovered, STAGES, sgd_tables, lines.sgd_line)
