"""QK-norm on the backward worksheet ([qk_norm] over each head's columns): its record as the page prints it, the
roots the backward divides by, each head's tables read backwards and the gains' sums over the heads. Over every
head's columns together the tables are edges/worksheet/backward/qk_all.py's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from qkv_tui.core.engine import Computation, HeadResult
from qkv_tui.core.gradients import Gradients, HeadGrad
from qkv_tui.core.scenario import Matrix, Scenario
from qkv_tui.edges.worksheet.backward.names import cell_name
from qkv_tui.edges.worksheet.backward.qk_all import KINDS as QK_ALL_KINDS
from qkv_tui.edges.worksheet.backward.qk_all import qk_all, qk_all_line
from qkv_tui.edges.worksheet.backward.tables import root_of
from qkv_tui.kernels.norm import Normed
from qkv_tui.kernels.norm_backward import row_means
from qkv_tui.kernels.qk_norm import QKNormed
from qkv_tui.teach.stages.printed import PrintedCells, PrintedChain, Table, idx

Add = Callable[..., None]  # adds one table: key, name, heading, values, rows, cols, head, allow
Root = tuple[str, Matrix, Matrix, float, tuple[str, ...]]  # name, spread, root, eps, row labels


def printed(chain: PrintedChain, h: int) -> QKNormed:
    """Head h's Q and K after the norm as the page prints them (a K/V head's in its first reader's section)."""
    v, g = chain.values, chain.owners[h]
    return QKNormed(_normed(chain, v(f"Q_norm.{h}"), v(f"qms.{h}")), _normed(chain, v(f"K_norm.{g}"), v(f"kms.{g}")))


def _normed(chain: PrintedChain, X_norm: Matrix, ms: Matrix) -> Normed:
    qk = chain.sc.qk_norm
    assert qk is not None
    spread = ms[:, 0]
    return Normed(X_norm, np.zeros_like(spread), spread, root_of(spread, qk.eps, chain.d)[0], X_norm)


def roots(sc: Scenario, pcomp: Computation) -> list[Root]:
    """Every head's r_Q and r_K as the page prints them."""
    qk = sc.qk_norm
    assert qk is not None
    out: list[Root] = []
    for hr in pcomp.heads:
        qkn = hr.need(QKNormed)
        for role, normed, labels in (("Q", qkn.Q_normed, sc.labels), ("K", qkn.K_normed, sc.key_labels)):
            if normed is not None:
                out.append((f"r_{role}", normed.spread, normed.root, qk.eps, labels))
    return out


def head_tables(t: Add, chain: PrintedChain, pcomp: Computation, h: int, mine: bool, hg: HeadGrad) -> None:
    """QK-norm read backwards for head ``h`` (kernels/norm_backward.py's norm_backward, over each head's columns),
    from dQ and dK before the turn."""
    sc = chain.sc
    qk = sc.qk_norm
    assert qk is not None
    hr: HeadResult = pcomp.heads[h]
    g = chain.owners[h]
    gamma_q, gamma_k = qk.gammas(h, sc.kv_head(h), hr.d_k)
    cols = idx(hr.d_k)
    qkn = hr.need(QKNormed)
    for role, normed, M, gamma, dY, labels, owner in (
            ("Q", qkn.Q_normed, hr.Q, gamma_q, hg.dQ_turned, sc.labels, h),
            ("K", qkn.K_normed, hr.K, gamma_k, hg.dK_turned, sc.key_labels, g)):
        assert normed is not None
        low = role.lower()
        xhat = chain.rounded(M / normed.root[:, None])  # (rows, d_k) as norm_backward keeps it
        if role == "Q" or mine:
            places = root_of(normed.spread, qk.eps, chain.d)[1]
            t(f"{low}root.{owner}", f"r_{role}", f"r_{role} = √(ms_{role} + eps)", normed.root[:, None], labels, ("r",), h,
              places=places)
            t(f"{low}hat.{owner}", f"x̂_{role}", f"x̂_{role} = {role} / r_{role}", xhat, labels, cols, h)
        inner = chain.rounded(row_means(gamma, dY, xhat)[0])  # (rows,)
        grad = getattr(hg, f"d{role}")
        dgamma = getattr(hg, f"dgamma_{low}")
        t(f"{low}m.{h}", f"m_{role}", f"m_{role} = mean(d{role}̂ ⊙ γ_{low} ⊙ x̂_{role}), row by row", inner[:, None], labels,
          ("m",), h)
        t(f"d{role}.{h}", f"d{role}", f"d{role} = (d{role}̂ ⊙ γ_{low} − x̂_{role}·m_{role}) / r_{role}", grad, labels, cols, h)
        t(f"dgamma_{low}.{h}", f"dγ_{low}", f"dγ_{low} = Σ rows of d{role}̂ ⊙ x̂_{role}", dgamma, (f"γ_{low}",), cols, h)


def sums(t: Add, chain: PrintedChain, G: Gradients) -> None:
    """The gains' gradients summed over the heads, where the heads share the gains."""
    sc, r = chain.sc, chain.rounded
    if sc.qk_norm is None or len(sc.heads) <= 1 or qk_all(sc):
        return
    assert G.dgamma_q is not None and G.dgamma_k is not None
    t("dgamma_q", "dγ_q", "dγ_q = the sum over the heads", r(G.dgamma_q), ("γ_q",), idx(len(G.dgamma_q)))
    t("dgamma_k", "dγ_k", "dγ_k = the sum over the heads", r(G.dgamma_k), ("γ_k",), idx(len(G.dgamma_k)))


def line(cells: PrintedCells, table: Table, i: int, j: int, answer: str, ops: Any) -> str | None:
    """The answer key's line of a cell of QK-norm's backward tables (``ops``: the page's operand keys, lines.py), or
    None where the table is not QK-norm's."""
    sc = cells.sc
    qk = sc.qk_norm
    assert qk is not None
    kind, _, suffix = table.key.partition(".")
    if qk_all(sc) and kind in QK_ALL_KINDS:
        return qk_all_line(cells, table, i, j, answer)
    if kind not in ("qroot", "kroot", "qhat", "khat", "qm", "km", "dQ", "dK", "dgamma_q", "dgamma_k"):
        return None
    h = int(suffix) if suffix.isdigit() else 0
    g = cells.owners[h] if sc.heads else 0
    tables = cells.tables

    def tx(ref: tuple[str, int, int]) -> str:
        return cells.txt(*ref)

    name = cell_name(table, i, j, (*sc.labels, *sc.key_labels))
    if kind in ("qroot", "kroot"):
        role = kind[0].upper()
        ms = tx((f"{kind[0]}ms.{h}", i, 0))
        return f"{name} = √(ms_{role} + eps) = √({ms} + {float(qk.eps)!r}) = {answer}"
    if kind in ("qhat", "khat"):
        role = kind[0].upper()
        return f"{name} = {role} / r_{role} = {tx((f'{role}.{h}', i, j))} / {tx((f'{kind[0]}root.{h}', i, 0))} = {answer}"
    if kind in ("qm", "km"):
        role = kind[0].upper()
        dY, hat = ops.turned(role, h), f"{kind[0]}hat.{g if role == 'K' else h}"
        d_k = sc.heads[h].d_k
        body = " + ".join(f"{tx((dY, i, c))}·{tx(('gamma_' + kind[0], 0, c))}·{tx((hat, i, c))}" for c in range(d_k))
        return f"{name} = mean(d{role}̂ ⊙ γ ⊙ x̂) = ({body}) / {d_k} = {answer}"
    if kind in ("dQ", "dK"):
        role = kind[1]
        low = role.lower()
        dY, o = ops.turned(role, h), (g if role == "K" else h)
        return (f"{name} = (d{role}̂·γ − x̂·m) / r = ({tx((dY, i, j))}·{tx(('gamma_' + low, 0, j))} − "
                f"{tx((f'{low}hat.{o}', i, j))}·{tx((f'{low}m.{h}', i, 0))}) / {tx((f'{low}root.{o}', i, 0))} = {answer}")
    if suffix:
        role = kind[-1].upper()
        dY, hat = ops.turned(role, h), f"{kind[-1]}hat.{g if role == 'K' else h}"
        pairs = [((dY, a, j), (hat, a, j)) for a in range(tables[hat].values.shape[0])]
        body = " + ".join(f"{tx(a)}·{tx(b)}" for a, b in pairs) or "0"
        return f"{name} = Σ d{role}̂[·,{j}]·x̂_{role}[·,{j}] = {body} = {answer}"
    parts = " + ".join(tx((f"{kind}.{x}", 0, j)) for x in range(len(sc.heads)))
    return f"{name} = Σ over the heads = {parts} = {answer}"
