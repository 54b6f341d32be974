"""A worksheet's printed chain: every table as it is printed, each computed from the printed tables before it.

A computed table is worked from the numbers *printed* before it (rounded to the page's decimals),
then rounded itself, so a student who works from the page lands on the printed number. The
inputs are printed exactly as the scenario gives them; the cos/sin table of RoPE and rounded
ALiBi slopes are printed with the digits the results need (see :func:`_trig_places`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qkv_tui.core.engine import Computation
from qkv_tui.core.fmt import fmt, is_integral
from qkv_tui.core.scenario import Matrix, Scenario
from qkv_tui.kernels.attention import project
from qkv_tui.kernels.norm import normalise
from qkv_tui.kernels.policy import EXACT, PrintedPage, round_to
from qkv_tui.kernels.rope import angles as rope_angles
from qkv_tui.kernels.rope import pairs as rope_pairs
from qkv_tui.kernels.rope import rotate as rope_rotate
from qkv_tui.kernels.sharing import kv_owners as owners_of
from qkv_tui.kernels.softmax import alibi_bias, masked_logits, softmax_rows
from qkv_tui.teach.trace import x_title

MAX_GUARD = 8  # more decimals than the page's that a helper table may get; float64 has no more to give


@dataclass(frozen=True, eq=False)
class Table:
    """One matrix on the page, as printed."""

    key: str  # unique on the page: "X", "W_Q.0", "K_rot.0", "trig.4", "final"
    name: str  # the matrix's name in arithmetic and in the table's corner: "Q", "X̂", "Q'", "scores"
    heading: str  # "Q = X·W_Q"
    stage: str  # the section it sits in: "norm", "project", "rotate", "score", "scale", "softmax", "mix", ...
    head: int | None  # the query head whose section holds it (K/V tables: the first head that reads them)
    values: Matrix  # as printed: computed from the printed operands, then rounded; −∞ where masked
    rows: tuple[str, ...]
    cols: tuple[str, ...]
    given: bool  # an input of the scenario: printed as given, never blank
    blankable: bool  # False for inputs, the cos/sin table and concat (nothing to compute by hand there)
    allow: np.ndarray | None = None  # scaled/weights: False where the mask forbids (−∞ / 0, never blank)
    whole: bool = False  # every value is a whole number before rounding: printed without decimals
    places: int | None = None  # decimals of a table printed with more digits than the page (cos/sin, slopes)
    readers: tuple[int, ...] = ()  # K/V tables of grouped-query heads: the query heads that read them

    def text(self, row: int, col: int, decimals: int) -> str:
        """A cell as printed."""
        value = float(self.values[row, col])
        if self.places is not None:
            return fmt(value, False, self.places)
        if self.given:
            return exact(value)
        return fmt(value, self.whole, decimals)


def exact(x: float) -> str:
    """An input as the scenario gives it: ``1``, ``0.25``, ``-1.5`` (shortest exact form, no rounding)."""
    if x == round(x) and abs(x) < 1e15:
        return str(int(x))
    text = np.format_float_positional(x, trim="-")
    # 1.5e+154 or 1e-300 written out in full would be hundreds of digits: the shortest exact form then
    return text if len(text) <= 24 else repr(float(x))


def idx(count: int) -> tuple[str, ...]:
    return tuple(str(i) for i in range(count))


def kv_owners(sc: Scenario) -> list[int]:
    """For each query head, the first query head that reads the same K/V head with the same weights: its K and V
    are printed once, in that head's section (the engine shares them on the same rule)."""
    return owners_of([sc.kv_head(h) for h in range(len(sc.heads))], sc.heads)


def pairs(layout: str, d_k: int) -> list[tuple[int, int]]:
    """The dimensions RoPE turns together, pair i first (docs/scenario-format.md, `[rope]`)."""
    return rope_pairs(layout, d_k)


def rotate(M: Matrix, cos: Matrix, sin: Matrix, layout: str) -> Matrix:
    """Each pair (a, b) of row r turns by the angle whose cos and sin are cos[r, i], sin[r, i], kept exact."""
    return rope_rotate(M, cos, sin, rope_pairs(layout, M.shape[1]), EXACT)


def _trig_places(d: int, angles: Matrix, layout: str, rotated: list[Matrix]) -> int:
    """Decimals for cos and sin: the page's, or more while the printed values would move a rotated cell by more
    than half a unit of the page's last digit (a Q of 40 needs more digits of cos than a Q of 1)."""
    cos: Matrix = np.cos(angles)
    sin: Matrix = np.sin(angles)
    for places in range(d, d + MAX_GUARD + 1):
        c: Matrix = round_to(cos, places)
        s: Matrix = round_to(sin, places)
        if all(np.max(np.abs(rotate(M, c, s, layout) - rotate(M, cos, sin, layout)), initial=0.0) <= 0.5 * 10.0 ** -d
               for M in rotated):
            return places
    return d + MAX_GUARD


def _slope_places(d: int, slopes: tuple[float, ...], positions: tuple[int, ...]) -> int | None:
    """None when every slope is short enough to print as given (0.5, 0.0625); else decimals that keep
    slope·(j − i) within a tenth of a unit of the page's last digit at the largest distance."""
    if all(len(exact(s)) <= 8 for s in slopes):
        return None
    far = max(positions) - min(positions) if positions else 0
    return d + 1 + len(str(max(1, far)))


def chain(comp: Computation, d: int) -> list[Table]:
    """Every table of the page, in page order (the inputs among them, marked ``given``)."""
    sc = comp.scenario

    page = PrintedPage(d)
    r = page.table

    tokens, keys = sc.labels, sc.key_labels
    multi = len(sc.heads) > 1
    out: list[Table] = [Table("X", "X", x_title(sc), "embed", None, sc.X, tokens, idx(sc.X.shape[1]), True, False)]
    if sc.context_X is not None:
        out.append(Table("context_X", "X_ctx", "X_ctx (the context's embeddings)", "embed", None, sc.context_X,
                         keys, idx(sc.context_X.shape[1]), True, False))
    positions = sc.positions
    if positions is not None and (sc.rope is not None or sc.alibi is not None):
        out.append(Table("positions", "position", "Positions (RoPE and ALiBi read these)", "embed", None,
                         np.array([positions], dtype=np.float64), ("p",), tokens, True, False))

    X_src = sc.X  # what the Query projection reads, as printed
    if sc.norm is not None:
        norm = sc.norm
        dm = sc.X.shape[1]
        out.append(Table("gamma", "γ", "γ (the norm's gains)", "embed", None, norm.gamma[None, :], ("γ",), idx(dm), True, False))
        if norm.beta is not None:
            out.append(Table("beta", "β", "β (the norm's shifts)", "embed", None, norm.beta[None, :], ("β",), idx(dm), True,
                             False))
        cols: tuple[str, ...]
        # the engine's statistics, which stay finite where the squares of 1e154 would not; the variance is
        # about the printed mean, and X̂ is worked from the printed statistics
        normed = normalise(page, norm.kind, sc.X, norm.gamma[None, :], None if norm.beta is None else norm.beta[None, :],
                           norm.eps)
        if norm.kind == "rms":
            stats, cols = normed.spread[:, None], ("ms",)
        else:
            stats, cols = np.column_stack([normed.mean, normed.spread]), ("mean", "var")
        raw = normed.unrounded  # (n, d_model)
        kind = "RMSNorm" if norm.kind == "rms" else "LayerNorm"
        what = "ms = the mean of the row's squares" if norm.kind == "rms" else "mean and var = the row's mean and variance"
        out += [
            Table("stats", "stats", f"Each token's row of X: {what}", "norm", None, stats, tokens, cols, False, True),
            Table("X_norm", "X̂", f"X̂ = {kind}(X), row by row", "norm", None, normed.X_norm, tokens, idx(dm), False, True,
                  whole=is_integral(raw)),
        ]
        X_src = out[-1].values
    X_kv_src = sc.context_X if sc.context_X is not None else X_src
    # a projection prints whole numbers only when what it reads does too: 1.000·1 is written 1.000, not 1
    q_whole = is_integral(sc.X) if sc.norm is None else out[-1].whole
    kv_whole = is_integral(sc.context_X) if sc.context_X is not None else q_whole
    xq = "X̂" if sc.norm is not None else "X"
    xkv = "X_ctx" if sc.is_cross else xq

    owners = kv_owners(sc)
    readers = {g: tuple(h for h in range(len(sc.heads)) if owners[h] == g) for g in set(owners)}
    grouped = sc.num_kv_heads is not None or any(len(v) > 1 for v in readers.values())

    # the projections of every head first: the cos/sin table's digits depend on the largest Q and K it turns
    # computed exactly from the printed X (their whole-number flags read the unrounded values), printed rounded
    Q_raw = [project(X_src, head.W_Q, head.b_Q, EXACT) for head in sc.heads]
    K_raw = {g: project(X_kv_src, sc.heads[g].W_K, sc.heads[g].b_K, EXACT) for g in readers}
    V_raw = {g: project(X_kv_src, sc.heads[g].W_V, sc.heads[g].b_V, EXACT) for g in readers}
    trig: dict[int, tuple[Matrix, Matrix, int]] = {}  # d_k -> (cos, sin, places), printed
    if sc.rope is not None:
        rope = sc.rope
        assert positions is not None
        for d_k in sorted({head.d_k for head in sc.heads}):
            angles = rope_angles(rope.base, d_k, positions)  # (n, d_k/2)
            turned = [r(Q_raw[h]) for h, head in enumerate(sc.heads) if head.d_k == d_k]
            turned += [r(K_raw[g]) for g in readers if sc.heads[g].d_k == d_k]
            places = _trig_places(d, angles, rope.layout, turned)
            trig[d_k] = (round_to(np.cos(angles), places), round_to(np.sin(angles), places), places)

    slopes_p: list[float] = []
    extras: list[Table] = []  # inputs printed after the weights: slopes and sinks
    if sc.alibi is not None:
        assert positions is not None
        slope_places = _slope_places(d, sc.alibi.slopes, positions)
        slopes_p = [float(round_to(np.array(s), slope_places)) if slope_places is not None else s for s in sc.alibi.slopes]
        notes = (["the ALiBi paper code's default"] if sc.alibi.default else []) + (
            [f"rounded to {slope_places} decimals"] if slope_places is not None else [])
        default = f" ({', '.join(notes)})" if notes else ""
        extras.append(Table("slopes", "slope", f"ALiBi slopes{default}", "scale", None, np.array([slopes_p]), ("slope",),
                            tuple(h.name for h in sc.heads), True, False, places=slope_places))
    sinks = [(head.name, head.sink) for head in sc.heads if head.sink is not None]
    if sinks:
        extras.append(Table("sinks", "sink", "Attention sinks (one logit per head)", "softmax", None,
                            np.array([[s for _, s in sinks]]), ("sink",), tuple(name for name, _ in sinks), True, False))

    outputs: list[Matrix] = []
    trig_done: set[int] = set()
    printed: dict[str, Table] = {}  # computed tables by key, for the heads that read an earlier head's K and V
    for h, head in enumerate(sc.heads):
        g = owners[h]
        kv_suffix = ""
        if grouped:
            kv_suffix = f" (K/V head {sc.kv_head(g) + 1}, read by {', '.join(sc.heads[x].name for x in readers[g])})"
        inputs: list[tuple[str, Matrix | None, tuple[int, ...]]] = [("W_Q", head.W_Q, ()), ("b_Q", head.b_Q, ())]
        if g == h:
            inputs += [("W_K", head.W_K, readers[g]), ("b_K", head.b_K, readers[g]),
                       ("W_V", head.W_V, readers[g]), ("b_V", head.b_V, readers[g])]
        for name, array, who in inputs:
            if array is None:
                continue
            matrix = array[None, :] if array.ndim == 1 else array
            rows = ("b",) if array.ndim == 1 else idx(matrix.shape[0])
            heading = name + (kv_suffix if who else "")
            out.append(Table(f"{name}.{h}", name, heading, "project", h, matrix, rows, idx(matrix.shape[1]), True, False,
                             readers=who if grouped else ()))

        computed: list[Table] = []
        Q = r(Q_raw[h])
        plus = " + b_Q" if head.b_Q is not None else ""
        computed.append(Table(f"Q.{h}", "Q", f"Q = {xq}·W_Q{plus}", "project", h, Q, tokens, idx(head.d_k), False, True,
                              whole=q_whole and is_integral(Q_raw[h])))
        if g == h:
            for role, raw in (("K", K_raw[g]), ("V", V_raw[g])):
                bias = " + b_" + role if getattr(head, f"b_{role}") is not None else ""
                width = head.d_k if role == "K" else head.d_v
                computed.append(Table(f"{role}.{h}", role, f"{role} = {xkv}·W_{role}{bias}{kv_suffix}", "project", h,
                                      r(raw), keys, idx(width), False, True, whole=kv_whole and is_integral(raw),
                                      readers=readers[g] if grouped else ()))
        Q_used = Q
        printed.update((t.key, t) for t in computed)
        K_used = printed[f"K.{g}"].values
        if sc.rope is not None:
            cos, sin, places = trig[head.d_k]
            if head.d_k not in trig_done:
                trig_done.add(head.d_k)
                trig_cols = tuple(f"{f} p·θ{_sub(i)}" for i in range(head.d_k // 2) for f in ("cos", "sin"))
                both = np.stack([cos, sin], axis=2).reshape(sc.n, head.d_k)  # (n, d_k): cos, sin of pair 0, then pair 1, …
                dk_note = f" (dₖ = {head.d_k})" if len(trig) > 1 else ""
                computed.append(Table(f"trig.{head.d_k}", "cos/sin", f"cos and sin of each token's angle p·θᵢ{dk_note}",
                                      "rotate", h, both, tokens, trig_cols, False, False, places=places))
            turned_pairs = rope_pairs(sc.rope.layout, head.d_k)
            Q_used = rope_rotate(Q, cos, sin, turned_pairs, page)
            computed.append(Table(f"Q_rot.{h}", "Q'", "Q' = Q turned by position", "rotate", h, Q_used, tokens,
                                  idx(head.d_k), False, True))
            if g == h:
                K_rot = rope_rotate(K_used, cos, sin, turned_pairs, page)
                computed.append(Table(f"K_rot.{h}", "K'", f"K' = K turned by position{kv_suffix}", "rotate", h, K_rot,
                                      keys, idx(head.d_k), False, True, readers=readers[g] if grouped else ()))
            printed.update((t.key, t) for t in computed)
            K_used = printed[f"K_rot.{g}"].values
        scores_raw = Q_used @ K_used.T  # (n, m) from the printed Q and K (turned, with rope)
        read_whole = sc.rope is None and printed[f"Q.{h}"].whole and printed[f"K.{g}"].whole
        scores_whole = read_whole and is_integral(scores_raw)
        scores = r(scores_raw)
        divisor = f"√{head.d_k}" if comp.heads[h].scale_is_default else exact(comp.heads[h].scale)
        quotient = page.worked(scores / page.divisor(comp.heads[h].scale))  # (n, m) from the printed scores
        alibi = ""
        alibi_terms: Matrix | None = None
        if sc.alibi is not None:
            assert positions is not None
            alibi_terms = alibi_bias(slopes_p[h], positions)  # (n, n) slope·(j − i), from the printed slope
            alibi = " + slope·(j − i)"
        logits = EXACT.logits(quotient, alibi_terms)  # (n, m) before it is printed: its whole-number flag reads this
        scaled = masked_logits(quotient, sc.allow, alibi_terms, page)  # (n, m) printed rounded, −∞ where masked
        weights = softmax_rows(scaled, head.sink, page).weights  # (n, m) from the printed scaled row
        V = printed[f"V.{g}"].values
        output = project(weights, V, None, page)  # (n, d_v) from the printed weights and V
        outputs.append(output)
        score_of = ("Q'·K'ᵀ" if sc.rope is not None else "Q·Kᵀ")
        computed += [
            Table(f"scores.{h}", "scores", f"scores = {score_of}", "score", h, scores, tokens, keys, False, True,
                  whole=scores_whole),
            Table(f"scaled.{h}", "scaled", f"scaled = scores / {divisor}{alibi}", "scale", h, scaled, tokens, keys,
                  False, True, sc.allow, whole=scores_whole and is_integral(np.where(sc.allow, logits, 0.0))),
            Table(f"weights.{h}", "weights", "weights = softmax(scaled), row by row", "softmax", h, weights, tokens, keys,
                  False, True, sc.allow),
            Table(f"output.{h}", "output", "output = weights·V", "mix", h, output, tokens, idx(head.d_v), False, True),
        ]
        out += computed
    concat = np.concatenate(outputs, axis=1)  # (n, sum d_v): the printed outputs side by side
    if multi:
        out.append(Table("concat", "concat", "concat = [" + " | ".join(h.name for h in sc.heads) + "]", "concat", None,
                         concat, tokens, idx(concat.shape[1]), False, False))
    if sc.W_O is not None:
        out.append(Table("W_O", "W_O", "W_O", "wo", None, sc.W_O, idx(sc.W_O.shape[0]), idx(sc.W_O.shape[1]), True, False))
        if sc.b_O is not None:
            out.append(Table("b_O", "b_O", "b_O", "wo", None, sc.b_O[None, :], ("b",), idx(sc.W_O.shape[1]), True, False))
        source = "concat" if multi else "output"
        final = concat @ sc.W_O + (sc.b_O[None, :] if sc.b_O is not None else 0.0)
        out.append(Table("final", "final", f"final = {source}·W_O" + (" + b_O" if sc.b_O is not None else ""), "wo", None,
                         r(final), tokens, idx(sc.W_O.shape[1]), False, True))
    return out + extras


def _sub(i: int) -> str:
    return "".join("₀₁₂₃₄₅₆₇₈₉"[int(ch)] for ch in str(i))
