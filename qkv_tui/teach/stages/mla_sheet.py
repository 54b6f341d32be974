"""The latent attention's worksheet tables and their answer-key lines: each table worked exactly from the
tables printed before it, then rounded (the printed-page policy), as every stage's are. The Rotate stage's turned
tables are its own (mla_rotate.py), on this module's Page.

Besides its own tables it prints what Score and Mix read of every head: ``Q.h`` = [q_C | q_R'] and
``K.h`` = [k_C | k_R'] (copies side by side, nothing to fill in) and ``V.h``, which is v_C itself."""

from __future__ import annotations

import numpy as np

from qkv_tui.core.fmt import is_integral
from qkv_tui.core.scenario import Matrix
from qkv_tui.core.variants import Mla
from qkv_tui.kernels.norm import normalise
from qkv_tui.teach.stages import mla_parts as parts
from qkv_tui.teach.stages.printed import PrintedCells, PrintedChain, Table, idx


def _mla(chain: PrintedChain | PrintedCells) -> Mla:
    mla = chain.sc.mla
    assert mla is not None
    return mla


def _x(chain: PrintedChain) -> tuple[str, Matrix, bool]:
    """What the projections read as printed: its key, values, and whether they are whole numbers."""
    sc = chain.sc
    if sc.norm is not None:
        return "X_norm", chain.values("X_norm"), chain.printed["X_norm"].whole
    return "X", sc.X, is_integral(sc.X)


def _given(key: str, name: str, heading: str, stage: str, values: Matrix) -> Table:
    m = values[None, :] if values.ndim == 1 else values
    rows = (name,) if values.ndim == 1 else idx(m.shape[0])
    return Table(key, name, heading, stage, None, m, rows, idx(m.shape[1]), True, False)


def _product(chain: PrintedChain, key: str, name: str, heading: str, stage: str, head: int | None, a: Matrix,
             a_whole: bool, b: Matrix, b_whole: bool = True) -> Table:
    raw = a @ b  # exactly, from the printed operands
    return Table(key, name, heading, stage, head, chain.rounded(raw), chain.sc.labels, idx(raw.shape[1]), False, True,
                 whole=a_whole and b_whole and is_integral(raw))


class Page:
    """The tables printed so far, this stage's own among them (the chain adds those when the stage returns)."""

    def __init__(self, chain: PrintedChain) -> None:
        self.chain = chain
        self.mine: list[Table] = []

    def add(self, *tables: Table) -> None:
        self.mine += tables

    def table(self, key: str) -> Table:
        return next((t for t in self.mine if t.key == key), None) or self.chain.printed[key]

    def values(self, key: str) -> Matrix:
        return self.table(key).values

    def whole(self, key: str) -> bool:
        return self.table(key).whole


def _norm(page: Page, raw_key: str, name: str, gamma: Matrix, eps: float) -> None:
    """The latent's RMSNorm: each row's mean square, then each cell, from the printed latent."""
    chain = page.chain
    sc, x = chain.sc, page.values(raw_key)
    done = normalise(chain.page, "rms", x, gamma[None, :], None, eps)  # from the printed latent, as norm.py's page
    ms, normed = done.spread, done.X_norm  # (n,), (n, width)
    raw = parts.shown_name(raw_key)
    page.add(Table(f"ms.{raw_key}", f"ms({raw})", f"ms = the mean of the squares of each row of {raw}", "compress",
                   None, ms[:, None], sc.labels, ("ms",), False, True),
             Table(name, parts.shown_name(name), f"{parts.shown_name(name)} = RMSNorm({raw})", "compress", None, normed,
                   sc.labels, idx(x.shape[1]), False, True))


def compress_tables(chain: PrintedChain) -> list[Table]:
    mla, page = _mla(chain), Page(chain)
    page.add(_given("W_DKV", "W_DKV", "W_DKV (d_model × d_c)", "compress", mla.W_DKV),
             _given("W_KR", "W_KR", "W_KR (d_model × d_rope, the shared rotary key)", "compress", mla.W_KR))
    if mla.W_Q is not None:
        page.add(_given("W_QA", "W_Q", "W_Q (every head's columns [nope | rope])", "compress", mla.W_Q))
    else:
        assert mla.W_DQ is not None and mla.W_UQ is not None
        page.add(_given("W_DQ", "W_DQ", "W_DQ (d_model × d_cq)", "compress", mla.W_DQ),
                 _given("W_UQ", "W_UQ", "W_UQ (every head's columns [nope | rope])", "compress", mla.W_UQ))
    page.add(_given("W_UK", "W_UK", "W_UK (every head's d_nope columns)", "compress", mla.W_UK),
             _given("W_UV", "W_UV", "W_UV (every head's d_v columns)", "compress", mla.W_UV))
    if mla.kv_norm:
        page.add(_given("gamma_kv", "γ_kv", "γ_kv (c_KV's gains)", "compress", mla.gamma_kv))
    if mla.q_norm and mla.gamma_q is not None:
        page.add(_given("gamma_q", "γ_q", "γ_q (c_Q's gains)", "compress", mla.gamma_q))
    x_key, x, x_whole = _x(chain)
    xs = "X" if x_key == "X" else "X̂"
    page.add(_product(chain, "c_KV_raw", "c_KV", f"c_KV = {xs}·W_DKV", "compress", None, x, x_whole, mla.W_DKV,
                      is_integral(mla.W_DKV)))
    if mla.kv_norm:
        _norm(page, "c_KV_raw", "c_KV", mla.gamma_kv, mla.eps)
    page.add(_product(chain, "k_R_raw", "k_R", f"k_R = {xs}·W_KR", "compress", None, x, x_whole, mla.W_KR,
                      is_integral(mla.W_KR)))
    if mla.W_DQ is not None:
        page.add(_product(chain, "c_Q_raw", "c_Q", f"c_Q = {xs}·W_DQ", "compress", None, x, x_whole, mla.W_DQ,
                          is_integral(mla.W_DQ)))
        if mla.q_norm and mla.gamma_q is not None:
            _norm(page, "c_Q_raw", "c_Q", mla.gamma_q, mla.eps)
    return page.mine


def expand_tables(chain: PrintedChain, h: int) -> list[Table]:
    mla, page = _mla(chain), Page(chain)
    if mla.W_DQ is not None:
        q_key = parts.query_latent(mla)
        q_src, q_whole, W = page.values(q_key), page.whole(q_key), mla.W_UQ
        q_shown = parts.shown_name(q_key)
    else:
        x_key, q_src, q_whole = _x(chain)
        W, q_shown = mla.W_Q, "X" if x_key == "X" else "X̂"
    assert W is not None
    start, kv = h * mla.d_qk, parts.latent(mla)
    c, c_whole = page.values(kv), page.whole(kv)
    weight = "W_UQ" if mla.W_DQ is not None else "W_Q"
    page.add(
        _product(chain, f"q_C.{h}", "q_C", f"q_C = {q_shown}·{weight} (head {h + 1}'s nope columns)", "expand", h,
                 q_src, q_whole, W[:, start:start + mla.d_nope], is_integral(W)),
        _product(chain, f"q_R_raw.{h}", "q_R", f"q_R = {q_shown}·{weight} (head {h + 1}'s rope columns)", "expand", h,
                 q_src, q_whole, W[:, start + mla.d_nope:start + mla.d_qk], is_integral(W)),
        _product(chain, f"k_C.{h}", "k_C", f"k_C = {parts.shown_name(kv)}·W_UK", "expand", h, c, c_whole,
                 mla.W_UK[:, h * mla.d_nope:(h + 1) * mla.d_nope], is_integral(mla.W_UK)),
        _product(chain, f"V.{h}", "v_C", f"v_C = {parts.shown_name(kv)}·W_UV (the head's V)", "expand", h, c, c_whole,
                 mla.W_UV[:, h * mla.d_v:(h + 1) * mla.d_v], is_integral(mla.W_UV)),
    )
    if not mla.turns:
        joined(page, h, "q_R_raw", "k_R_raw", "expand")
    return page.mine


def joined(page: Page, h: int, q_r: str, k_r: str, stage: str) -> None:
    """Q.h and K.h as Score reads them: the printed parts side by side (a copy: nothing to fill in)."""
    sc = page.chain.sc
    Q = np.concatenate([page.values(f"q_C.{h}"), page.values(f"{q_r}.{h}")], axis=1)  # (n, d_qk)
    K = np.concatenate([page.values(f"k_C.{h}"), page.values(k_r)], axis=1)  # (n, d_qk)
    q_whole = page.whole(f"q_C.{h}") and page.whole(f"{q_r}.{h}")
    k_whole = page.whole(f"k_C.{h}") and page.whole(k_r)
    qs, ks = parts.shown_name(q_r), parts.shown_name(k_r)
    page.add(Table(f"Q.{h}", "Q", f"Q = [q_C | {qs}] (copied side by side)", stage, h, Q, sc.labels,
                   idx(Q.shape[1]), False, False, whole=q_whole),
             Table(f"K.{h}", "K", f"K = [k_C | {ks}] (copied side by side)", stage, h, K, sc.key_labels,
                   idx(K.shape[1]), False, False, whole=k_whole))


def absorb_tables(chain: PrintedChain, h: int) -> list[Table]:
    mla, sc, page = _mla(chain), chain.sc, Page(chain)
    kv, k_r = parts.latent(mla), parts.rotary_key(mla)
    q_r = f"{parts.rotary_query(mla)}.{h}"
    W_UK = mla.W_UK[:, h * mla.d_nope:(h + 1) * mla.d_nope]  # (d_c, d_nope)
    page.add(_product(chain, f"q_L.{h}", "q_L", "q_L = q_C·W_UKᵀ (W_UK folded into the query)", "absorb", h,
                      page.values(f"q_C.{h}"), page.whole(f"q_C.{h}"), W_UK.T, is_integral(W_UK)))
    left = np.concatenate([page.values(f"q_L.{h}"), page.values(q_r)], axis=1)  # (n, d_c + d_rope)
    right = np.concatenate([page.values(kv), page.values(k_r)], axis=1)  # (n, d_c + d_rope)
    page.add(Table(f"scores_L.{h}", "scores_L", f"scores_L = [q_L | {parts.shown_name(parts.rotary_query(mla))}]·"
                   f"[{parts.shown_name(kv)} | {parts.shown_name(k_r)}]ᵀ (the same as the scores)", "absorb", h,
                   chain.rounded(left @ right.T), sc.labels, sc.key_labels, False, True),
             _product(chain, f"mix_L.{h}", "o_L", f"o_L = weights·{parts.shown_name(kv)}", "absorb", h,
                      page.values(f"weights.{h}"), False, page.values(kv), False))
    page.add(_product(chain, f"out_L.{h}", "out_L", "out_L = o_L·W_UV (W_UV folded into the output: the same as"
                      " output)", "absorb", h, page.values(f"mix_L.{h}"), False,
                      mla.W_UV[:, h * mla.d_v:(h + 1) * mla.d_v], False))
    return page.mine


# --- the answer key ---------------------------------------------------------------------------------


def _dot(cells: PrintedCells, left: list[tuple[str, int, int]], right: list[tuple[str, int, int]]) -> str:
    return " + ".join(f"{cells.txt(*a)}·{cells.txt(*b)}" for a, b in zip(left, right, strict=True))


def line(cells: PrintedCells, table: Table, row: int, col: int, answer: str) -> str:
    mla, sc = _mla(cells), cells.sc
    key, h = table.key.split(".")[0], table.head
    token = sc.labels[row]
    x_key = "X_norm" if "X_norm" in cells.tables else "X"
    xs = "X" if x_key == "X" else "X̂"
    if key in ("c_KV_raw", "k_R_raw", "c_Q_raw"):
        W = {"c_KV_raw": "W_DKV", "k_R_raw": "W_KR", "c_Q_raw": "W_DQ"}[key]
        return (f"{parts.shown_name(key)}[{token},{col}] = {xs}[{token}]·{W}[:,{col}]"
                f" = {cells.dot(x_key, row, W, col)} = {answer}")
    if key == "ms":
        raw = table.key.split(".", 1)[1]
        width = cells.tables[raw].values.shape[1]
        terms = " + ".join(f"{cells.txt(raw, row, c)}·{cells.txt(raw, row, c)}" for c in range(width))
        return f"ms({parts.shown_name(raw)}[{token}]) = ({terms}) / {width} = {answer}"
    if key in ("c_KV", "c_Q"):
        raw, gamma = (f"{key}_raw", "gamma_kv" if key == "c_KV" else "gamma_q")
        ms = cells.txt(f"ms.{raw}", row, 0)
        return (f"{parts.shown_name(key)}[{token},{col}] = {parts.shown_name(raw)}[{token},{col}] / √(ms + eps)·"
                f"{cells.tables[gamma].name}[{col}] = {cells.txt(raw, row, col)} / √({ms} + {mla.eps:g})·"
                f"{cells.txt(gamma, 0, col)} = {answer}")
    assert h is not None
    if key in ("q_C", "q_R_raw"):
        src, W = (parts.query_latent(mla), "W_UQ") if mla.W_DQ is not None else (x_key, "W_QA")
        wcol = h * mla.d_qk + col + (0 if key == "q_C" else mla.d_nope)
        shown_w = "W_UQ" if W == "W_UQ" else "W_Q"
        shown_src = parts.shown_name(src) if src != x_key else xs
        return (f"{parts.shown_name(key)}[{token},{col}] = {shown_src}[{token}]·{shown_w}[:,{wcol}]"
                f" = {cells.dot(src, row, W, wcol)} = {answer}")
    if key in ("k_C", "V"):
        kv = parts.latent(mla)
        W, wcol = ("W_UK", h * mla.d_nope + col) if key == "k_C" else ("W_UV", h * mla.d_v + col)
        name = "k_C" if key == "k_C" else "v_C"
        return (f"{name}[{token},{col}] = {parts.shown_name(kv)}[{token}]·{W}[:,{wcol}]"
                f" = {cells.dot(kv, row, W, wcol)} = {answer}")
    if key == "q_L":
        terms = " + ".join(f"{cells.txt(f'q_C.{h}', row, c)}·{cells.txt('W_UK', col, h * mla.d_nope + c)}"
                           for c in range(mla.d_nope))
        return f"q_L[{token},{col}] = q_C[{token}]·W_UK[{col},head {h + 1}] = {terms} = {answer}"
    if key == "scores_L":
        kv, k_r, q_r = parts.latent(mla), parts.rotary_key(mla), f"{parts.rotary_query(mla)}.{h}"
        k = sc.key_labels[col]
        rotary = range(mla.rotary_width[1])
        left = [(f"q_L.{h}", row, c) for c in range(mla.d_c)] + [(q_r, row, c) for c in rotary]
        right = [(kv, col, c) for c in range(mla.d_c)] + [(k_r, col, c) for c in rotary]
        return f"scores_L[{token},{k}] = [q_L | {parts.shown_name(q_r.split('.')[0])}][{token}]·[{parts.shown_name(kv)}" \
               f" | {parts.shown_name(k_r)}][{k}] = {_dot(cells, left, right)} = {answer}"
    if key == "mix_L":
        kv = parts.latent(mla)
        return (f"o_L[{token},{col}] = weights[{token}]·{parts.shown_name(kv)}[:,{col}]"
                f" = {cells.dot(f'weights.{h}', row, kv, col)} = {answer}")
    assert key == "out_L"
    wcol = h * mla.d_v + col
    return f"out_L[{token},{col}] = o_L[{token}]·W_UV[:,{wcol}] = {cells.dot(f'mix_L.{h}', row, 'W_UV', wcol)} = {answer}"

