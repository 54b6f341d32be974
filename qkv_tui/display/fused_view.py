"""The tiles view's last forward pages: what a fused kernel keeps (O and L per row) and P rebuilt from L, as
plain data (teach/fused.py works the numbers). Ties the tiles view to the cost view's FlashAttention page."""

from __future__ import annotations

import numpy as np

from qkv_tui.core.cost import DTYPES
from qkv_tui.display.view import Explanation, PaneSpec
from qkv_tui.display.view import matrix_pane as _pane
from qkv_tui.teach.cost import CHOSEN
from qkv_tui.teach.fused import PAGES, Fused, l_line, memory_lines, p_line

MAX_ROWS = 4  # the explanation works this many rows; the panes hold the rest

MEANING = {
    "kept": "Why can't I get the attention matrix from my model? A fused kernel (FlashAttention, PyTorch's"
            " scaled_dot_product_attention) returns O alone: the weights lived a tile at a time on chip and were"
            " never written out. Besides O it keeps one number a row for the backward pass, the logsumexp"
            " L = m + ln ℓ. So output_attentions in transformers needs the eager path"
            " (attn_implementation=\"eager\"), which forms the whole matrix in memory.",
    "rebuilt": "The weights come back from L on demand: e^(s − m)/ℓ = e^(s − (m + ln ℓ)) = e^(s − L). That costs the"
               " scores again and one exponential a cell, but no n×m memory kept: FlashAttention's backward does"
               " exactly this, tile by tile. Each row equals the trace's softmax weights.",
}
NAMES = {"kept": "O and L kept", "rebuilt": "P = e^(S − L)"}


def fused_explanation(fu: Fused, page: int, done: int, total: int, decimals: int) -> Explanation:
    """Page ``page`` (0: kept, 1: rebuilt) after ``done`` operations of ``total`` in the view."""
    th = fu.th
    sc = th.comp.scenario
    hr = th.comp.heads[th.head]
    phase = PAGES[page]
    m, ell, _, _ = th.finals
    rows = range(min(sc.n, MAX_ROWS))
    if phase == "kept":
        lines = [l_line(sc.labels[i], float(m[i]), float(ell[i]), float(fu.L[i]), decimals) for i in rows]
    else:
        lines = [p_line(sc.labels[i], fu.S[i], float(fu.L[i]), fu.P[i], sc.allow[i], decimals) for i in rows]
    if sc.n > MAX_ROWS:
        lines.append(f"(and {sc.n - MAX_ROWS} more rows: see the panes)")
    details = lines[1:]
    if phase == "rebuilt":
        worst = float(np.abs(fu.P - hr.weights).max()) if fu.P.size else 0.0
        ok = bool(np.isfinite(worst)) and worst <= 1e-12
        details.append(f"{'✓ equal to' if ok else '✗ DIFFERENT from'} the trace's softmax weights"
                       f" (largest difference {worst:.1e})")
    details += memory_lines(sc.n, sc.m, hr.d_k, hr.d_v, CHOSEN.dtype, DTYPES[CHOSEN.dtype], CHOSEN.context)
    heads = len(th.comp.heads)
    return Explanation(
        stage_label=f"op {done + page + 1}/{total} · fused",
        counter="after every block" if phase == "kept" else "on demand",
        head_label=f"{hr.name} ({th.head + 1}/{heads})" if heads > 1 else "",
        arithmetic=lines[0],
        details=tuple(details),
        meaning=MEANING[phase],
        formula=(("O, L=m+ln ℓ", phase == "kept"), (" ", False), ("P=e^(S−L)", phase == "rebuilt")),
        stages=tuple((NAMES[p], "current" if p == phase else "todo") for p in PAGES),
    )


def fused_panes(fu: Fused, page: int, decimals: int) -> tuple[list[PaneSpec], list[PaneSpec]]:
    th = fu.th
    sc = th.comp.scenario
    hr = th.comp.heads[th.head]
    name = hr.name if len(th.comp.heads) > 1 else ""
    tokens, keys = sc.labels, sc.key_labels
    dims_v = tuple(str(c) for c in range(hr.d_v))
    m, ell, _, _ = th.finals
    mlL = _pane("f_mlL", "m, ℓ and L = m + ln ℓ", np.column_stack([m, ell, fu.L]), tokens, ("m", "ℓ", "L"),
                decimals, current=(0, 2) if page == 0 else None, subtitle=name, worked=True)
    out = _pane("f_out", "O (kept)", th.output, tokens, dims_v, decimals, subtitle=name)
    S = _pane("f_S", "S, again", fu.S, tokens, keys, decimals, row_max=True, subtitle=name)
    P = _pane("f_P", "P = e^(S − L)", fu.P, tokens, keys, decimals, heat=True,
              current=(0, None) if page == 1 else None, subtitle=name)
    weights = _pane("f_W", "trace's weights", hr.weights, tokens, keys, decimals, heat=True, subtitle=name)
    if page == 0:
        return [out, mlL], [S]
    return [S, mlL, P], [weights, out]
