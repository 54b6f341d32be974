"""The backward worksheet: the tables of the backward pass, after the forward's, for scenarios with [backward].

The numbers are core/gradients.py's own, run on the page: its forward values are the tables printed before
(a "printed computation"), and its policy keeps each table as the page does, computed exactly from printed
operands and rounded once (``PageBackward``), with RoPE's cos and sin as the page prints them. So each
backward table is worked from tables printed before it and the answer key's lines agree with a calculator
(edges/worksheet/backward/lines.py writes them). The tables walk the trace's backward stages: dO, dConcat
and dW_O, per head the gate, dV, dP, D, dS, the soft-cap, the scale, dQ and dK, RoPE turned back, QK-norm,
dW_Q, dW_K, dW_V and the biases, a sink, then grouped K/V heads' sums, dX̂'s paths, the pre-norm and dγ. A [linear]
head's quadratic form stands in for the softmax part (edges/worksheet/backward/linear.py) and [mla]'s latent layer
for the per-head weights (edges/worksheet/backward/mla.py). What the tables leave to the app (worksheet_rules says
which) gets a rule saying so and the forward pass only.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from qkv_tui.core import part_questions as ask
from qkv_tui.core.engine import Computation, HeadResult, NormResult
from qkv_tui.core.gradients import Gradients, HeadGrad, gradients
from qkv_tui.core.scenario import Matrix, Scenario
from qkv_tui.edges.faces import faces, placed
from qkv_tui.edges.worksheet.backward.cross_entropy import ce_tables, dW_U_placed
from qkv_tui.edges.worksheet.backward.cross_entropy import line as loss_line
from qkv_tui.edges.worksheet.backward.lines import line, operand_keys
from qkv_tui.edges.worksheet.backward.parts import part_sheets, part_uncovered
from qkv_tui.edges.worksheet.backward.qk_all import qk_all, qk_all_covered, qk_all_tables
from qkv_tui.kernels.attention import Turn
from qkv_tui.kernels.norm import norm_root
from qkv_tui.kernels.norm_backward import row_means
from qkv_tui.kernels.policy import PrintedPage, round_to
from qkv_tui.teach.stages.common import Stage, StageSpec
from qkv_tui.teach.stages.printed import PrintedCells, PrintedChain, Table, exact, idx, kv_owners

Add = Callable[..., None]  # adds one table: key, name, heading, values, rows, cols, head, allow
STAGE = Stage("backward", "Backward", "the gradients of the loss, from the output back to every weight and X")


class PageBackward(PrintedPage):
    """The page's backward: a product table too is computed exactly from printed operands, then rounded once."""

    def matmul(self, a: Matrix, b: Matrix) -> Matrix:
        return round_to(a @ b, self.places)


def covered(sc: Scenario) -> bool:
    """Whether the page's backward tables cover the scenario (module docstring)."""
    return bool(sc.backward is not None and (not qk_all(sc) or qk_all_covered(sc))
                and all(f.sheet_back_covers(sc) for f in faces() if f.sheet_back_covers is not None)
                and ask.scenario_says(sc, "unprinted_backward") is None and part_uncovered(sc) is None)


def uncovered(sc: Scenario) -> str:
    """What of the scenario the page's backward tables leave to the app, for the rule that says so."""
    if (part := _uncovered_part(sc)) is not None:
        return part
    if (unprinted := ask.scenario_says(sc, "unprinted_backward") or part_uncovered(sc)) is not None:
        return unprinted
    return "QK-norm over every head's columns together with grouped K/V heads"


def _uncovered_part(sc: Scenario) -> str | None:
    """What a variant's own module names first as what the page may leave out ([mla]'s latent norms); None: nothing."""
    return next((why for f in faces() if f.sheet_back_uncovered is not None
                 if (why := f.sheet_back_uncovered(sc)) is not None), None)


def printed_computation(chain: PrintedChain) -> Computation:
    """The forward pass as the page prints it: what the backward reads, each value from its printed table."""
    sc, comp, v = chain.sc, chain.comp, chain.values
    n = sc.n
    norm = None
    if sc.norm is not None:
        stats = v("stats")  # (n, 1) ms, or (n, 2) mean and var
        mean = stats[:, 0] if sc.norm.kind == "layer" else np.zeros(n)
        spread = stats[:, -1]
        norm = NormResult(v("X_norm"), mean, spread, root_of(spread, sc.norm.eps, chain.d)[0])
    heads: list[HeadResult] = []
    for h, hr in enumerate(comp.heads):
        g = chain.owners[h]
        fields: dict[str, object] = {"Q": v(f"Q.{h}"), "K": v(f"K.{g}"), "V": v(f"V.{g}"), "output": v(f"output.{h}")}
        records: list[object] = []
        # a map in place of the softmax ([linear]'s), as its own module reads it off the page
        mapped = next((m for f in faces() if f.sheet_map is not None if (m := f.sheet_map(chain, h, hr)) is not None),
                      None)
        # a part that reads itself backwards (differential attention's), its record as the page prints it
        own = next((o for sheet in part_sheets(sc) if (o := sheet.printed(chain, h, hr)) is not None), None)
        if own is not None:
            records += own[0]
            fields |= own[1]
            weights = np.asarray(own[1]["weights"])
        elif mapped is not None:
            weights, record = mapped  # (n, m)
            fields |= {"weights": weights}
            records.append(record)
        else:
            weights = np.where(sc.allow, v(f"weights.{h}"), 0.0)  # (n, m)
            fields |= {"scaled": v(f"scaled.{h}"), "weights": weights}
        for f in faces():  # a variant's record as the page prints it (edges/faces/)
            if f.sheet_printed is not None:
                more, changed = f.sheet_printed(chain, h, hr, weights)
                records += more
                fields |= changed
        head = hr.with_parts(*records, **fields)
        for f in faces():  # a layer that makes the heads' projections, as the page prints it ([mla]'s latent)
            if f.sheet_printed_head is not None:
                head = f.sheet_printed_head(chain, head)
        heads.append(head)
    concat = v("concat") if "concat" in chain.printed else heads[0].joined
    output = v("final") if sc.W_O is not None else concat
    return Computation(sc, tuple(heads), concat, comp.W_O, output, None, norm, comp.b_O)


def zero_root(chain: PrintedChain) -> str | None:
    """Why the page cannot be read backwards: a norm's root it prints as 0 (√(ms + eps) past the decimals a page
    prints), which the backward divides by; None when every root it reads is above 0."""
    sc = chain.sc
    normed = [f.sheet_roots for f in faces() if f.sheet_roots is not None and f.sheet_roots[0](sc)]  # QK-norm's
    if sc.backward is None or not covered(sc) or (sc.norm is None and not normed):
        return None
    pcomp = printed_computation(chain)
    roots: list[tuple[str, Matrix, Matrix, float, tuple[str, ...]]] = []  # name, spread, root, eps, row labels
    if sc.norm is not None and pcomp.norm is not None:
        roots.append(("r", pcomp.norm.spread, pcomp.norm.root, sc.norm.eps, sc.labels))
    for _, more in normed:
        roots += more(sc, pcomp)
    for name, spread, root, eps, labels in roots:
        zero = np.flatnonzero(np.asarray(root) == 0)
        if zero.size:
            i = int(zero[0])
            places = root_of(np.asarray(spread), eps, chain.d)[1]
            return (f"would divide by {name} of {labels[i]} = √({exact(float(spread[i]))} + {eps!r}), which is 0 at the"
                    f" {places} decimals the page prints it to")
    return None


def root_of(spread: Matrix, eps: float, d: int) -> tuple[Matrix, int]:
    """Each row's r = √(spread + eps) as the page prints it, and its decimals: the page's, or more where a small r
    would lose its digits (√(0 + 1e-05) = 0.003 is 0.00 at two decimals, and x̂ = x / r divides by it)."""
    exact = norm_root(spread, eps)  # (rows,)
    positive = exact[exact > 0]
    places = d
    if positive.size:
        places = int(min(15, max(d, np.ceil(-np.log10(positive.min())) + 2)))
    return round_to(exact, places), places


def page_trig(chain: PrintedChain) -> dict[int, Turn] | None:
    """A turn's cos and sin by d_k as printed in the page's tables (RoPE's, edges/faces/rope.py); None without one."""
    return next((trig for f in faces() if f.sheet_trig is not None if (trig := f.sheet_trig(chain)) is not None), None)


def page_gradients(chain: PrintedChain) -> tuple[Computation, Gradients]:
    """core/gradients.py on the printed forward pass, under the page's policy."""
    pcomp = printed_computation(chain)
    latent = next((trig for f in faces() if f.sheet_latent_trig is not None
                   if (trig := f.sheet_latent_trig(chain)) is not None), None)  # [mla]'s shared rotary part's
    return pcomp, gradients(pcomp, PageBackward(chain.d), page_trig(chain), latent)


def backward_tables(chain: PrintedChain) -> list[Table]:
    """Every backward table, in the order the trace walks the backward stages, each from the tables before it."""
    sc = chain.sc
    bw = sc.backward
    if bw is None or not covered(sc):
        return []
    pcomp, G = page_gradients(chain)
    out: list[Table] = []
    rows, keys = sc.labels, sc.key_labels
    r = chain.rounded
    ops = operand_keys(sc, chain.owners)

    def t(key: str, name: str, heading: str, values: Matrix, rs: tuple[str, ...], cs: tuple[str, ...],
          head: int | None = None, allow: np.ndarray | None = None, places: int | None = None,
          given: bool = False) -> None:  # given: an input a part's backward reads first (the delta rule's gates)
        grid = values[None, :] if values.ndim == 1 else values
        out.append(Table(key, name, heading, "backward", head, np.asarray(grid, dtype=np.float64), rs, cs, given,
                         not given, allow, places=places if places is not None and places > chain.d else None))

    d_out = G.dO.shape[1]
    if bw.dO is not None:
        out.append(Table("dO", "dO", "dO (the gradient at the output, as given)", "backward", None,
                         np.asarray(bw.dO, dtype=np.float64), rows, idx(d_out), True, False))
    elif bw.cross_entropy:  # the Loss's own tables from the output to dO and dW_U (backward/cross_entropy.py)
        ce_tables(t, out.append, sc, G, ops)
    else:
        assert bw.target is not None
        out.append(Table("target", "target", "target (the wanted output; loss = ½·Σ (output − target)²)", "backward",
                         None, np.asarray(bw.target, dtype=np.float64), rows, idx(d_out), True, False))
        t("dO", "dO", f"dO = {ops.out_name} − target", G.dO, rows, idx(d_out))
    if G.dW_O is not None:
        t("dConcat", "dConcat", "dConcat = dO·W_Oᵀ", G.d_concat, rows, idx(G.d_concat.shape[1]))
        t("dW_O", "dW_O", f"dW_O = {ops.concat_name}ᵀ·dO", G.dW_O, idx(G.dW_O.shape[0]), idx(d_out))
    if G.db_O is not None:
        t("db_O", "db_O", "db_O = Σ rows of dO", G.db_O, ("b",), idx(d_out))
    xq = "X̂" if sc.norm is not None else "X"
    xkv = "X_ctx" if sc.is_cross else xq
    for h, (hr, hg) in enumerate(zip(pcomp.heads, G.heads, strict=True)):
        g = chain.owners[h]
        mine = g == h
        dq, dk = ops.dq_names(h), ops.dk_names(h)
        dvc = idx(hr.d_k)
        for f in faces():  # a variant's tables between Concat and the head's own output (the gate's)
            if f.sheet_back_out is not None:
                f.sheet_back_out(t, chain, h, hr, hg, xq)
        # a part's own tables down to dQ, dK and dV (edges/worksheet/backward/parts.py), or a map in place of the
        # softmax read backwards by its own module ([linear]'s), else the softmax's tables
        if (not any(sheet.tables(t, chain, h, hr, G) for sheet in part_sheets(sc))
                and not any(f.sheet_back_map is not None and f.sheet_back_map(t, chain, h, hg, ops) for f in faces())):
            _softmax_tables(t, chain, pcomp, h, hg)
        # a layer's own tables that stand for the rest of the head's ([mla]'s latent, for its multiplied-through weights)
        if any(f.sheet_back_head_rest is not None and f.sheet_back_head_rest(t, chain, h, G) for f in faces()):
            continue
        if hg.dQ_rot is not None:
            t(f"dQt.{h}", dq[1], f"{dq[1]} = {dq[0]} turned back (by −p·θ)", hg.dQ_turned, rows, dvc, h)
            t(f"dKt.{h}", dk[1], f"{dk[1]} = {dk[0]} turned back (by −p·θ)", hg.dK_turned, keys, dvc, h)
        if qk_all(sc):  # the norm reads every head's columns: after every head's part
            continue
        for f in faces():  # a norm of the head's Q and K read backwards (QK-norm's), before its projections
            if f.sheet_back_normed is not None:
                f.sheet_back_normed(t, chain, pcomp, h, mine, hg)
        _weight_tables(t, chain, h, G, xq, xkv)
    if qk_all(sc):
        qk_all_tables(t, chain, pcomp, G, lambda spread, eps: root_of(spread, eps, chain.d)[1])
        for h in range(len(sc.heads)):
            _weight_tables(t, chain, h, G, xq, xkv)
    if G.shared:
        for kv in G.kv_heads:
            o = kv.heads[0]
            who = ", ".join(sc.heads[x].name for x in kv.heads)
            for name, value in (("dW_K", kv.dW_K), ("dW_V", kv.dW_V), ("db_K", kv.db_K), ("db_V", kv.db_V)):
                if value is not None:
                    grid = value[None, :] if value.ndim == 1 else value
                    rs = ("b",) if value.ndim == 1 else idx(grid.shape[0])
                    t(f"kv{name}.{o}", name, f"{name} of K/V head {sc.kv_head(o) + 1} = the sum over {who}", r(grid), rs,
                      idx(grid.shape[1]))
    for f in faces():  # a variant's gradients summed over the heads (QK-norm's gains)
        if f.sheet_back_sums is not None:
            f.sheet_back_sums(t, chain, G)
    dm = idx(G.dX_norm.shape[1])
    # a layer's own tables down to X̂ ([mla]'s latent), and what dX̂ then sums
    layer = next((heading for f in faces() if f.sheet_back_layer is not None
                  if (heading := f.sheet_back_layer(t, chain, G, xq)) is not None), None)
    if layer is not None:
        t("dX_in", f"d{xq}", layer, G.dX_norm, rows, dm)
        if sc.norm is not None and pcomp.norm is not None:
            _norm_tables(t, pcomp.norm, sc, G, chain.d)
        return dW_U_placed(out)
    # and each variant's own path into X̂ (the gate's), as it names it
    paths = ", ".join(["Q", *([] if sc.is_cross else ["K", "V"]),
                       *(path for f in faces() if f.sheet_back_path is not None if (path := f.sheet_back_path(sc)))])
    t("dX_in", "dX̂" if sc.norm is not None else "dX", f"{'dX̂' if sc.norm is not None else 'dX'} = the sum of the"
      f" {paths} paths (dQ·W_Qᵀ + …, every head)", G.dX_norm, rows, dm)
    if sc.norm is not None and pcomp.norm is not None:
        _norm_tables(t, pcomp.norm, sc, G, chain.d)
    return dW_U_placed(out)


def _weight_tables(t: Add, chain: PrintedChain, h: int, G: Gradients, xq: str, xkv: str) -> None:
    """Head ``h``'s projections' weights and biases, from its dQ, dK and dV."""
    hg = G.heads[h]
    hd = chain.sc.heads[h]
    dv, dvc = idx(hd.d_v), idx(hd.d_k)
    t(f"dW_Q.{h}", "dW_Q", f"dW_Q = {xq}ᵀ·dQ", hg.dW_Q, idx(hg.dW_Q.shape[0]), dvc, h)
    if hg.db_Q is not None:
        t(f"db_Q.{h}", "db_Q", "db_Q = Σ rows of dQ", hg.db_Q, ("b",), dvc, h)
    own = " (this head's share)" if G.shared else ""
    t(f"dW_K.{h}", "dW_K", f"dW_K = {xkv}ᵀ·dK{own}", hg.dW_K, idx(hg.dW_K.shape[0]), dvc, h)
    t(f"dW_V.{h}", "dW_V", f"dW_V = {xkv}ᵀ·dV{own}", hg.dW_V, idx(hg.dW_V.shape[0]), dv, h)
    if hg.db_K is not None:
        t(f"db_K.{h}", "db_K", f"db_K = Σ rows of dK{own}", hg.db_K, ("b",), dvc, h)
    if hg.db_V is not None:
        t(f"db_V.{h}", "db_V", f"db_V = Σ rows of dV{own}", hg.db_V, ("b",), dv, h)


def _softmax_tables(t: Add, chain: PrintedChain, pcomp: Computation, h: int, hg: HeadGrad) -> None:
    """One softmax head from dO_h to dQ and dK at what is scored (kernels/attention_backward.py's attend_backward)."""
    sc = chain.sc
    hr, a = pcomp.heads[h], hg.attend
    rows, keys = sc.labels, sc.key_labels
    ops = operand_keys(sc, chain.owners)
    dq, dk = ops.dq_names(h), ops.dk_names(h)
    dv, dvc = idx(hr.d_v), idx(hr.d_k)
    t(f"dV.{h}", "dV", "dV = weightsᵀ·dO_h", a.dV, keys, dv, h)
    t(f"dP.{h}", "dP", "dP = dO_h·Vᵀ", a.dP, rows, keys, h)
    t(f"D.{h}", "D", "D = rowsum(dO_h ⊙ output)", a.D[:, None], rows, ("D",), h)
    t(f"dS.{h}", "dS", "dS = weights ⊙ (dP − D) (0 where masked)", a.dS, rows, keys, h, sc.allow)
    for f in faces():  # a variant's own tables between dS and dscores (a sink's share, the soft-cap's step)
        if f.sheet_back_softmax is not None:
            f.sheet_back_softmax(t, chain, h, hr, hg)
    stepper = ask.stepper(hr)  # the part whose step the scores took: dscores gathers dS back through it
    gathered = "dS" if stepper is None else str(stepper.gathered)
    t(f"dscores.{h}", "dscores", f"dscores = {gathered} / scale", a.dscores, rows, keys, h, sc.allow)
    t(f"dQu.{h}", dq[0], f"{dq[0]} = dscores·{ops.k_used_name}", a.dQ_used, rows, dvc, h)
    t(f"dKu.{h}", dk[0], f"{dk[0]} = dscoresᵀ·{ops.q_used_name}", a.dK_used, keys, dvc, h)


def _norm_tables(t: Add, norm: NormResult, sc: Scenario, G: Gradients, d: int) -> None:
    """The pre-norm read backwards (kernels/norm_backward.py's norm_backward)."""
    assert sc.norm is not None
    dm = idx(sc.X.shape[1])
    rows = sc.labels
    layer = sc.norm.kind == "layer"
    xhat = round_to((sc.X - norm.mean[:, None]) / norm.root[:, None], d)  # (n, d_model) as norm_backward keeps it
    spread = "var" if layer else "ms"
    t("xroot", "r", f"r = √({spread} + eps)", norm.root[:, None], rows, ("r",), places=root_of(norm.spread, sc.norm.eps, d)[1])
    t("xhat", "x̂", "x̂ = (x − mean) / r" if layer else "x̂ = x / r", xhat, rows, dm)
    m, gbar = row_means(sc.norm.gamma, G.dX_norm, xhat)  # (n,) each
    t("xm", "m", "m = mean(dX̂ ⊙ γ ⊙ x̂), row by row", round_to(m, d)[:, None], rows, ("m",))
    if layer:
        t("xgbar", "ḡ", "ḡ = mean(dX̂ ⊙ γ), row by row", round_to(gbar, d)[:, None], rows, ("ḡ",))
    t("dX", "dX", "dX = (dX̂ ⊙ γ − x̂·m" + (" − ḡ" if layer else "") + ") / r", G.dX, rows, dm)
    assert G.dgamma is not None
    t("dgamma", "dγ", "dγ = Σ rows of dX̂ ⊙ x̂", G.dgamma, ("γ",), dm)
    if G.dbeta is not None:
        t("dbeta", "dβ", "dβ = Σ rows of dX̂", G.dbeta, ("β",), dm)


class BackwardSheet(StageSpec):
    """The answer key's lines of the backward tables (not a stage of the trace: grad's stages are those)."""

    stage = STAGE

    def worksheet_rules(self, comp: Computation) -> list[str]:
        sc = comp.scenario
        if sc.backward is None:
            return []
        if not covered(sc):
            return [f"- [backward]: this page has the forward pass only; its backward tables do not cover {uncovered(sc)}"
                    " (the app and --export markdown show every gradient of this scenario)"]
        # a state in place of the softmax ([linear]), or a part's own maps ([differential]): its own rule says how
        own_rules = [line for sheet in part_sheets(sc) for line in sheet.rules(sc)]
        state = ask.scenario_has(sc, "state") or bool(own_rules)
        head = ("dV = weightsᵀ·dO_h, dP = dO_h·Vᵀ, D = rowsum(dO_h ⊙ output), dS = weights ⊙ (dP − D), 0 where masked;"
                " dQ = (dS / scale)·K, dK = (dS / scale)ᵀ·Q; " if not state else "")
        own = [("head", ["- Backward: work each table of the Backward sections from the tables printed before it, in page"
                         f" order (the chain rule, one operation per table). {head}dW_Q = Xᵀ·dQ (each weight's gradient:"
                         " its input transposed times the gradient at its output); a bias's gradient is the sum of its"
                         " gradient's rows."
                         if state else
                         "- Backward: work each table of the Backward sections from the tables printed before it, in page"
                         f" order (the chain rule, one operation per table). {head}dW = Xᵀ·(its gradient); a bias's"
                         " gradient is the sum of its gradient's rows.", *own_rules]),
               ("W_O", ["  Through W_O first: dConcat = dO·W_Oᵀ (each head's dO_h is its columns), dW_O = concatᵀ·dO."]
                if sc.W_O is not None else [])]
        # each variant's rule (edges/faces/), in the backward's order: the opposite of the forward's
        extra = [(f.sheet_back_rules_at, [("", f.sheet_back_rules(sc))]) for f in reversed(faces())
                 if f.sheet_back_rules is not None]
        out = [line for _, lines in placed(own, extra) for line in lines]
        if sc.num_kv_heads is not None or kv_shared(sc):
            out.append("  Grouped K/V heads: each query head's dK, dV and their weights' gradients are its own share;"
                       " a K/V head's gradient is the sum of its readers' shares.")
        if sc.norm is not None:
            out.append("  dX̂ sums every path into X̂; then the norm: r = √(ms or var + eps), x̂ = (x − mean) / r,"
                       " m = mean(dX̂ ⊙ γ ⊙ x̂)" + (", ḡ = mean(dX̂ ⊙ γ)" if sc.norm.kind == "layer" else "")
                       + "; dX = (dX̂ ⊙ γ − x̂·m" + (" − ḡ" if sc.norm.kind == "layer" else "") + ") / r.")
        return out

    def worksheet_line(self, cells: PrintedCells, table: Table, row: int, col: int, answer: str) -> str:
        bw = cells.sc.backward
        # the Loss's own tables first (backward/cross_entropy.py)
        if bw is not None and bw.cross_entropy and (text := loss_line(cells, table, row, col, answer)) is not None:
            return text
        return line(cells, table, row, col, answer)


def kv_shared(sc: Scenario) -> bool:
    return kv_owners(sc) != list(range(len(sc.heads)))


SHEET = BackwardSheet()
