"""QK-norm over every head's columns together (over = "all") read backwards on the worksheet: its tables and
their answer-key lines.

Each row's root read every head's columns, so the backward runs on the wide rows, after every head's dQ̂ and
dK̂ (core/gradients.py's _qk_norm_all): dQ is the wide norm_backward cut into heads; each dK is the sum of
every head's share, c_o = the wide backward of head o's dK̂ alone (what core/gradients.py adds up, so the page
prints each share, rounded once, and the sum is exact). Grouped K/V heads sharing a head's K are left to the app.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from qkv_tui.core.engine import Computation
from qkv_tui.core.gradients import Gradients
from qkv_tui.core.scenario import Scenario
from qkv_tui.edges.worksheet.backward.lines import operand_keys
from qkv_tui.edges.worksheet.backward.names import cell_name
from qkv_tui.kernels.norm_backward import row_means
from qkv_tui.kernels.qk_norm import QKNormed
from qkv_tui.teach.stages.printed import PrintedCells, PrintedChain, Table, idx

Add = Callable[..., None]  # adds one table: key, name, heading, values, rows, cols, head, allow
KINDS = ("aqroot", "aqhat", "aqm", "akroot", "akhat", "akm", "akc", "dQ", "dK", "dgamma_q", "dgamma_k")


def qk_all(sc: Scenario) -> bool:
    return sc.qk_norm is not None and sc.qk_norm.over == "all"


def qk_all_covered(sc: Scenario) -> bool:
    """Every query head reads a K/V head of its own (then each K/V head's gradient is one head's sum of shares)."""
    return all(sc.kv_head(h) == h for h in range(len(sc.heads)))


def qk_all_tables(t: Add, chain: PrintedChain, pcomp: Computation, G: Gradients, root_places: Callable[..., int]) -> None:
    sc = chain.sc
    qk = sc.qk_norm
    assert qk is not None
    H, d_k = len(sc.heads), sc.heads[0].d_k
    wide = idx(H * d_k)
    for role, labels, gamma in (("Q", sc.labels, qk.gamma_q), ("K", sc.key_labels, qk.gamma_k)):
        low = role.lower()
        qkn = pcomp.heads[0].need(QKNormed)
        first = qkn.Q_normed if role == "Q" else qkn.K_normed
        root = first.root  # (rows,) one per row, over every head's columns
        M = np.concatenate([getattr(hr, role) for hr in pcomp.heads], axis=1)  # (rows, H·d_k) as printed
        xhat = chain.rounded(M / root[:, None])  # (rows, H·d_k) as norm_backward keeps it
        dY = np.concatenate([getattr(hg, f"d{role}_turned") for hg in G.heads], axis=1)  # (rows, H·d_k)
        t(f"a{low}root", f"r_{role}", f"r_{role} = √(ms_{role} + eps) (one root per row, every head's columns)",
          root[:, None], labels, ("r",), places=root_places(first.spread, qk.eps))
        t(f"a{low}hat", f"x̂_{role}", f"x̂_{role} = [{role} of every head] / r_{role}", xhat, labels, wide)
        if role == "Q":
            t("aqm", "m_Q", "m_Q = mean(dQ̂ ⊙ γ_q ⊙ x̂_Q) over every head's columns, row by row",
              chain.rounded(row_means(gamma, dY, xhat)[0])[:, None], labels, ("m",))
            for h, hg in enumerate(G.heads):
                t(f"dQ.{h}", "dQ", "dQ = (dQ̂ ⊙ γ_q − x̂_Q·m_Q) / r_Q (this head's columns)", hg.dQ, labels, idx(d_k), h)
            assert G.dgamma_q is not None
            t("dgamma_q", "dγ_q", "dγ_q = Σ rows of dQ̂ ⊙ x̂_Q", G.dgamma_q, ("γ_q",), wide)
            continue
        for o in range(H):  # head o's share: the wide backward of its dK̂ alone
            block = np.zeros_like(dY)
            block[:, o * d_k:(o + 1) * d_k] = dY[:, o * d_k:(o + 1) * d_k]
            m = chain.rounded(row_means(gamma, block, xhat)[0])  # (rows,)
            share = chain.rounded((block * gamma[None, :] - xhat * m[:, None]) / root[:, None])  # (rows, H·d_k)
            t(f"akm.{o}", "m_K", f"m_K = mean(dK̂ ⊙ γ_k ⊙ x̂_K) of {sc.heads[o].name}'s dK̂ alone, over every column",
              m[:, None], labels, ("m",), o)
            t(f"akc.{o}", "c_K", f"c_K = (dK̂ ⊙ γ_k − x̂_K·m_K) / r_K, {sc.heads[o].name}'s dK̂ alone (0 in the other"
              " heads' columns): its share of every head's dK", share, labels, wide, o)
        for h, hg in enumerate(G.heads):
            t(f"dK.{h}", "dK", "dK = Σ over the heads of their shares c_K in this head's columns", hg.dK, labels,
              idx(d_k), h)
        assert G.dgamma_k is not None
        t("dgamma_k", "dγ_k", "dγ_k = Σ rows of dK̂ ⊙ x̂_K", G.dgamma_k, ("γ_k",), wide)


def qk_all_line(cells: PrintedCells, table: Table, i: int, j: int, answer: str) -> str:
    sc = cells.sc
    ops = operand_keys(sc, cells.owners)  # ops.turned: the gradient at what QK-norm gave (what RoPE turns, or is scored)
    qk = sc.qk_norm
    assert qk is not None
    tx = cells.txt
    kind, _, suffix = table.key.partition(".")
    H, d_k = len(sc.heads), sc.heads[0].d_k
    name = cell_name(table, i, j, (*sc.labels, *sc.key_labels))
    if kind in ("aqroot", "akroot"):
        role = kind[1].upper()
        return f"{name} = √(ms_{role} + eps) = √({tx(f'{kind[1]}ms.0', i, 0)} + {float(qk.eps)!r}) = {answer}"
    if kind in ("aqhat", "akhat"):
        role = kind[1].upper()
        h, c = divmod(j, d_k)
        return (f"{name} = {role}[{table.rows[i]},{c}] ({sc.heads[h].name}) / r_{role} = {tx(f'{role}.{h}', i, c)} / "
                f"{tx(f'a{kind[1]}root', i, 0)} = {answer}")

    def dY(role: str, col: int, only: int | None = None) -> str:
        h, c = divmod(col, d_k)
        return "0" if only is not None and h != only else tx(ops.turned(role, h), i, c)

    if kind in ("aqm", "akm"):
        role = kind[1].upper()
        low = role.lower()
        only = int(suffix) if suffix else None
        cols = range(H * d_k) if only is None else range(only * d_k, (only + 1) * d_k)
        body = " + ".join(f"{dY(role, c)}·{tx('gamma_' + low, 0, c)}·{tx(f'a{low}hat', i, c)}" for c in cols)
        return f"{name} = mean(d{role}̂ ⊙ γ ⊙ x̂) = ({body}) / {H * d_k} = {answer}"
    if kind == "dQ":
        h = int(suffix)
        c = h * d_k + j
        return (f"{name} = (dQ̂·γ − x̂·m) / r = ({dY('Q', c)}·{tx('gamma_q', 0, c)} − {tx('aqhat', i, c)}·"
                f"{tx('aqm', i, 0)}) / {tx('aqroot', i, 0)} = {answer}")
    if kind == "akc":
        o = int(suffix)
        lead = f"{dY('K', j)}·{tx('gamma_k', 0, j)}" if j // d_k == o else "0"
        return (f"{name} = (dK̂·γ − x̂·m) / r = ({lead} − {tx('akhat', i, j)}·{tx(f'akm.{o}', i, 0)}) / "
                f"{tx('akroot', i, 0)} = {answer}")
    if kind == "dK":
        h = int(suffix)
        parts = " + ".join(tx(f"akc.{o}", i, h * d_k + j) for o in range(H))
        return f"{name} = Σ over the heads' shares c_K[{table.rows[i]},{h * d_k + j}] = {parts} = {answer}"
    role = kind[-1].upper()
    low = role.lower()
    h, c = divmod(j, d_k)
    rows = cells.tables[f"a{low}hat"].values.shape[0]
    body = " + ".join(f"{tx(ops.turned(role, h), a, c)}·{tx(f'a{low}hat', a, j)}" for a in range(rows))
    return f"{name} = Σ d{role}̂[·,{c}] ({sc.heads[h].name})·x̂_{role}[·,{j}] = {body} = {answer}"
