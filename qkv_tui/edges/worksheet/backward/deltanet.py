"""[deltanet] on the backward worksheet (docs/backward.md, "[deltanet]"): the gated delta rule read backwards for one
head, the last token first, then its L2 norms and, where g and β come from the weights, the gates (dGates); the
projections' own tables (dW_Q = Xᵀ·dQ …), dX and the SGD step are the page's, after.

The numbers are kernels/deltanet_backward.py's own (core/gradients.py reads the head's record backwards), run on the
page: :func:`printed` hands it the head's forward as the page prints it (Q, K, V, q, k, g, β, each token's S', kv, δ
and S), and the page's policy rounds what the kernel keeps as a table of its own (dS, dδ, dS', dq, dk, dβ, dg, dv …)
and nothing inside one operation, so each table is worked from printed numbers, rounded once. The gates' a and σ(a)
are computed here as kernels/deltanet_backward.py's gates_backward computes them under the same policy.

Each token's steps sit in one table (dS, then dδ = dSᵀk, then dS' = dS − k·(dδ·β)ᵀ), read row by row: the carry
dS' of a token is what the token before it reads. The answer key's lines are in deltanet_lines.py.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from qkv_tui.core.scenario import Scenario
from qkv_tui.edges.worksheet.backward import deltanet_lines as lines
from qkv_tui.edges.worksheet.backward.parts import PartSheet
from qkv_tui.edges.worksheet.backward.tables import PageBackward
from qkv_tui.kernels.attention_backward import row_dots
from qkv_tui.kernels.deltanet import L2_EPS, DeltaForward
from qkv_tui.kernels.deltanet_backward import DeltaBack, GatesBack
from qkv_tui.kernels.policy import round_to
from qkv_tui.teach.arith import MAX_TERMS
from qkv_tui.teach.stages.printed import PrintedChain, Table, idx


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
    n, d_k = f.q.shape
    d_v = f.S.shape[2]
    Q, K = v(f"Q.{h}"), v(f"K.{g}")
    gb = _value(chain, f"dn_g.{h}")
    gates, beta = np.array(gb[:, 0], dtype=float), np.array(gb[:, 1], dtype=float)
    S = np.stack([v(f"dn_S.{h}.{t}") for t in range(n)])  # (n, d_k, d_v)
    delta = np.stack([v(f"dn_delta.{h}.{t}")[0] for t in range(n)])  # (n, d_v)
    decayed = np.zeros((n, d_k, d_v))
    decayed[1:] = S[:-1] * np.exp(gates[1:])[:, None, None]  # S' = S·e^g of the printed S before: the first's was 0
    kv = np.zeros((n, d_v))
    for t in range(n):  # v − kv = δ / β; where β is 0 (given so) δ says nothing of kv: the printed one
        kv[t] = V_of(chain, h, t) - delta[t] / beta[t] if beta[t] else (v(f"dn_kv.{h}.{t}")[0] if t else 0.0)
    sq_q, sq_k = (Q * Q).sum(axis=1), (K * K).sum(axis=1)
    record = DeltaForward(
        sq_q, sq_k, np.sqrt(sq_q + L2_EPS), np.sqrt(sq_k + L2_EPS), math.sqrt(d_k), v(f"dn_q.{h}"), v(f"dn_k.{h}"),
        gates, beta, np.exp(gates), decayed, kv, delta, S, v(f"output.{h}"))
    return [record], {"weights": hr.weights}


def V_of(chain: PrintedChain, h: int, t: int) -> np.ndarray:
    """Token ``t``'s Value row as printed (in the section of the head that owns the K/V head)."""
    row: np.ndarray = chain.values(f"V.{chain.owners[h]}")[t]
    return row


def _x(chain: PrintedChain) -> tuple[np.ndarray, str]:
    """What the gates read, as printed, and its key: X̂ where the scenario has a norm, else X."""
    sc = chain.sc
    return (chain.values("X_norm"), "X_norm") if sc.norm is not None else (np.asarray(sc.X, dtype=float), "X")


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
    for t_ in range(n - 1, -1, -1):  # the last token first: the state's gradient flows backwards in time
        heading = f"{tok[t_]}: dS, dδ" + (" (the last token)" if t_ == n - 1 else "")
        t(f"dnb_tok.{h}.{t_}", tok[t_], heading, np.concatenate([b.dS[t_], b.ddelta[t_][None, :]]),
          (*(f"dS {i}" for i in ks), "dδ"), vs, h)
    t(f"dnb_dq.{h}", "dq", "dq = S·dO", b.dq, tok, ks, h)
    t(f"dnb_dk.{h}", "dk", "dk = dS·δ − S'·dv", b.dk, tok, ks, h)
    first = np.ones((n, 2), dtype=bool)
    first[0, 1] = False  # dg of the first token is 0: its state was empty, so its decay changed nothing
    t(f"dnb_bg.{h}", "dβ|dg", "dβ, dg", np.stack([b.dbeta, b.dg], axis=1), tok, ("dβ", "dg"), h, first)
    t(f"dV.{h}", "dV", "dV = dδ·β", b.dv, tok, vs, h)
    Q = chain.values(f"Q.{h}")
    qhat = chain.rounded(Q / f.root_q[:, None])  # (n, d_k) as l2_backward keeps it
    t(f"dnb_qhat.{h}", "q̂", "q̂ = Q / ‖Q‖", qhat, tok, ks, h)
    page = PageBackward(chain.d)  # m as l2_backward works it: each row's dot product, rounded once
    m = np.stack([row_dots(qhat, b.dq / f.divisor, page), row_dots(f.k, b.dk, page)], axis=1)  # (n, 2)
    t(f"dnb_m.{h}", "m", "m = q̂·dq̂, k·dk", m, tok, ("q", "k"), h)
    t(f"dQu.{h}", "dQ", "dQ = (dq̂ − q̂·m) / ‖Q‖", hg.attend.dQ_used, tok, ks, h)
    t(f"dKu.{h}", "dK", "dK = (dk − k·m) / ‖K‖", hg.attend.dK_used, tok, ks, h)
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
    X = _x(chain)[0]
    d_model = X.shape[1]
    weights = [(name, W[:, h]) for name, W, on in (("W_a", dn.W_a, has_g), ("W_b", dn.W_b, has_b))
               if on and W is not None]
    t(f"dn_W.{h}", "W_gates", "the gates' weights (given), a row each", np.stack([w for _, w in weights]),
      tuple(name for name, _ in weights), idx(d_model), h, given=True)
    cols: list[tuple[str, np.ndarray]] = []
    if has_g:
        assert dn.W_a is not None and dn.A_log is not None and dn.dt_bias is not None and gb.da is not None
        t(f"dn_rate.{h}", "A_log|dt_bias", "the decay's (given)",
          np.array([[dn.A_log[h], dn.dt_bias[h]]]), (str(h),), ("A_log", "dt_bias"), h, given=True)
        p = PageBackward(chain.d)
        a = p.table(p.matmul(X, dn.W_a[:, h:h + 1]) + dn.dt_bias[h])  # as gates_backward keeps it
        cols += [("a", a[:, 0]), ("σ(a)", p.table(1.0 / (1.0 + np.exp(-a)))[:, 0]), ("da", gb.da[:, h])]
    if has_b:
        assert gb.db is not None
        cols.append(("db", gb.db[:, h]))
    x = "X̂" if sc.norm is not None else "X"
    t(f"dnb_gates.{h}", "|".join(c for c, _ in cols), ", ".join(c for c, _ in cols), np.stack([c for _, c in cols], axis=1),
      sc.labels, tuple(c for c, _ in cols), h)
    if has_g:
        assert gb.dA_log is not None and gb.ddt_bias is not None
        t(f"dnb_rate.{h}", "dA_log|ddt_bias", "dA_log = Σ dg·g, ddt_bias = Σ da",
          np.array([[gb.dA_log[h], gb.ddt_bias[h]]]), (str(h),), ("dA_log", "ddt_bias"), h)
    grads = [("dW_a", gb.dW_a, "da") if name == "W_a" else ("dW_b", gb.dW_b, "db") for name, _ in weights]
    t(f"dnb_dW.{h}", "dW_gates", ", ".join(f"{name} = {x}ᵀ·{d}" for name, _, d in grads),
      np.stack([g[:, h] for _, g, _ in grads]), tuple(name for name, _, _ in grads), idx(d_model), h)


KINDS = frozenset(("dnb_tok", "dnb_dq", "dnb_dk", "dnb_bg", "dV", "dnb_qhat", "dnb_m", "dQu", "dKu",
                   "dn_W", "dn_rate", "dnb_gates", "dnb_rate", "dnb_dW"))


def rules(sc: Scenario) -> list[str]:
    return ["  Delta rule, last token first: dS = q·dOᵀ + e^g·dS' (dS' = dS − k·dδ·β of the token after), dδ = dSᵀk,"
            " dk = dS·δ − S'·dδ·β (S' = S before·e^g), dβ = dδ·(v − kv) = dδ·δ / β; L2 norms: dq̂ = dq / √dₖ, m = q̂·dq̂,"
            " dQ = (dq̂ − q̂·m) / √(ΣQ² + 1e-6)."
            + (" Gates: da = −dg·e^A_log·σ(a), db = dβ·β·(1 − β)." if any(gate_columns(sc)) else "")]


def uncovered(sc: Scenario) -> str | None:
    """dg sums S' ⊙ dS' over the whole state, d_k·d_v products: past MAX_TERMS, a sum a student cannot type in."""
    cells = max(h.d_k * h.d_v for h in sc.heads)
    if cells <= MAX_TERMS:
        return None
    return (f"[deltanet]'s dg = Σ S' ⊙ dS', a sum of {cells} products (one for each cell of the state), more than the"
            f" {MAX_TERMS} terms a worksheet takes")


STAGES = (
    (("dnb_tok", "dnb_dq", "dnb_dk", "dnb_bg", "dV", "dnb_qhat", "dnb_m", "dQu", "dKu"), "ddelta"),
    (("dn_W", "dn_rate", "dnb_gates", "dnb_rate", "dnb_dW"), "dgates"),
)
SGD_STAGE = "sgd"  # edges/worksheet/sgd.py's STAGE key (not imported: sgd.py asks this module)


def sgd_tables(by_key: dict[str, Table], comp: Any, lr: float, d: int) -> list[Table]:
    """Each head's trained gate weights moved once: W_a and W_b (its column), A_log and dt_bias (its number)."""
    sc = comp.scenario
    assert sc.backward is not None
    trained = set(sc.backward.train)
    out: list[Table] = []
    for h in range(len(sc.heads)):
        for weight, grad, by_row in ((f"dn_W.{h}", f"dnb_dW.{h}", True), (f"dn_rate.{h}", f"dnb_rate.{h}", False)):
            w, g = by_key.get(weight), by_key.get(grad)
            if w is None or g is None:
                continue
            names = w.rows if by_row else w.cols
            keep = [n for n, name in enumerate(names) if name in trained]
            if not keep:
                continue
            old, grads = (w.values[keep], g.values[keep]) if by_row else (w.values[:, keep], g.values[:, keep])
            with np.errstate(over="ignore", invalid="ignore"):
                new = round_to(old - lr * grads, d)
            if np.isfinite(new).all():
                moved = tuple(names[n] for n in keep)
                out.append(Table(f"sgd.{weight}", "new", f"new {', '.join(moved)} = each − lr·its gradient", SGD_STAGE, h,
                                 np.asarray(new, dtype=float), moved if by_row else w.rows, w.cols if by_row else moved,
                                 False, True))
    return out


SHEET = PartSheet(printed, tables, KINDS, lines.line, rules, uncovered, STAGES, sgd_tables, lines.sgd_line)
