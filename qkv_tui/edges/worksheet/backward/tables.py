"""The backward worksheet: the tables of the backward pass, after the forward's, for scenarios with [backward].

The numbers are core/gradients.py's own, run on the page: its forward values are the tables printed before
(a "printed computation"), and its policy keeps each table as the page does, computed exactly from printed
operands and rounded once (``PageBackward``), with RoPE's cos and sin as the page prints them. So each
backward table is worked from tables printed before it and the answer key's lines agree with a calculator
(edges/worksheet/backward/lines.py writes them). The tables walk the trace's backward stages: dO, dConcat
and dW_O, per head the gate, dV, dP, D, dS, the soft-cap, the scale, dQ and dK, RoPE turned back, QK-norm,
dW_Q, dW_K, dW_V and the biases, a sink, then grouped K/V heads' sums, dX̂'s paths, the pre-norm and dγ. A [linear]
head's quadratic form stands in for the softmax part (edges/worksheet/backward/state.py) and [mla]'s latent layer
for the per-head weights (edges/worksheet/backward/mla.py). What the tables leave to the app (worksheet_rules says
which) gets a rule saying so and the forward pass only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from qkv_tui.core.engine import Computation, HeadResult, NormResult
from qkv_tui.core.gradients import Gradients, HeadGrad, gradients
from qkv_tui.core.scenario import Matrix, Scenario
from qkv_tui.core.variants.alibi import TABLE as ALIBI
from qkv_tui.edges.worksheet.backward.lines import line, operand_keys
from qkv_tui.edges.worksheet.backward.mla import (
    dX_heading,
    latent_turn,
    mla_covered,
    mla_head_tables,
    mla_tables,
    printed_mla,
)
from qkv_tui.edges.worksheet.backward.qk_all import qk_all, qk_all_covered, qk_all_tables
from qkv_tui.edges.worksheet.backward.state import linear_tables, linear_weights, printed_linear
from qkv_tui.kernels.attention import Turn
from qkv_tui.kernels.gate import Gated
from qkv_tui.kernels.norm import Normed, norm_root
from qkv_tui.kernels.norm_backward import row_means
from qkv_tui.kernels.policy import PrintedPage, round_to
from qkv_tui.kernels.qk_norm import QKNormed
from qkv_tui.kernels.rope import Rotated
from qkv_tui.kernels.sinks import Sunk
from qkv_tui.kernels.softcap import Capped
from qkv_tui.teach.stages.common import Stage, StageSpec
from qkv_tui.teach.stages.printed import PrintedCells, PrintedChain, Table, exact, idx, kv_owners
from qkv_tui.teach.stages.rotate import _trig_tables

Add = Callable[..., None]  # adds one table: key, name, heading, values, rows, cols, head, allow
STAGE = Stage("backward", "Backward", "the gradients of the loss, from the output back to every weight and X")


class PageBackward(PrintedPage):
    """The page's backward: a product table too is computed exactly from printed operands, then rounded once."""

    def matmul(self, a: Matrix, b: Matrix) -> Matrix:
        return round_to(a @ b, self.places)


def covered(sc: Scenario) -> bool:
    """Whether the page's backward tables cover the scenario (module docstring)."""
    return bool(sc.backward is not None and (not qk_all(sc) or qk_all_covered(sc))
                and (sc.mla is None or mla_covered(sc)) and sc.deltanet is None and not sc.backward.cross_entropy)


def uncovered(sc: Scenario) -> str:
    """What of the scenario the page's backward tables leave to the app, for the rule that says so."""
    if sc.mla is not None:
        return "latent attention ([mla]) with a latent norm (kv_norm, q_norm), a query latent (W_DQ, W_UQ) or a gate"
    if sc.deltanet is not None:
        return "the gated delta rule ([deltanet])"
    if sc.backward is not None and sc.backward.cross_entropy:
        return "the cross-entropy loss through the unembedding W_U"
    return "QK-norm over every head's columns together with grouped K/V heads"


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
        if sc.linear is not None:  # its kernels load with a scenario that has it
            from qkv_tui.kernels.linear import LinearForward

            weights = linear_weights(chain, h)  # (n, m)
            fields |= {"weights": weights}
            records.append(printed_linear(chain, h, hr.need(LinearForward), weights))
        else:
            weights = np.where(sc.allow, v(f"weights.{h}"), 0.0)  # (n, m)
            fields |= {"scaled": v(f"scaled.{h}"), "weights": weights}
        if sc.rope is not None:
            records.append(Rotated(v(f"Q_rot.{h}"), v(f"K_rot.{g}")))
        if sc.qk_norm is not None:
            records.append(QKNormed(_normed(chain, v(f"Q_norm.{h}"), v(f"qms.{h}")),
                                    _normed(chain, v(f"K_norm.{g}"), v(f"kms.{g}"))))
        if (gated := hr.part(Gated)) is not None:
            records.append(replace(gated, gate=v(f"gate.{h}"), gated=v(f"gated.{h}")))
        if (sunk := hr.part(Sunk)) is not None:  # the sink's share of each row is what the printed weights leave
            records.append(replace(sunk, sink_exp=1.0 - weights.sum(axis=1)))
            fields |= {"row_sum": np.ones(n)}
        head = hr.with_parts(*records, **fields)
        heads.append(printed_mla(chain, head) if sc.mla is not None else head)
    concat = v("concat") if "concat" in chain.printed else heads[0].joined
    output = v("final") if sc.W_O is not None else concat
    return Computation(sc, tuple(heads), concat, comp.W_O, output, None, norm, comp.b_O)


def _normed(chain: PrintedChain, X_norm: Matrix, ms: Matrix) -> Normed:
    qk = chain.sc.qk_norm
    assert qk is not None
    spread = ms[:, 0]
    return Normed(X_norm, np.zeros_like(spread), spread, root_of(spread, qk.eps, chain.d)[0], X_norm)


def zero_root(chain: PrintedChain) -> str | None:
    """Why the page cannot be read backwards: a norm's root it prints as 0 (√(ms + eps) past the decimals a page
    prints), which the backward divides by; None when every root it reads is above 0."""
    sc = chain.sc
    if sc.backward is None or not covered(sc) or (sc.norm is None and sc.qk_norm is None):
        return None
    pcomp = printed_computation(chain)
    roots: list[tuple[str, Matrix, Matrix, float, tuple[str, ...]]] = []  # name, spread, root, eps, row labels
    if sc.norm is not None and pcomp.norm is not None:
        roots.append(("r", pcomp.norm.spread, pcomp.norm.root, sc.norm.eps, sc.labels))
    if sc.qk_norm is not None:
        for hr in pcomp.heads:
            qkn = hr.need(QKNormed)
            for role, normed, labels in (("Q", qkn.Q_normed, sc.labels), ("K", qkn.K_normed, sc.key_labels)):
                if normed is not None:
                    roots.append((f"r_{role}", normed.spread, normed.root, sc.qk_norm.eps, labels))
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
    """RoPE's cos and sin by d_k, as printed in the cos/sin tables."""
    sc = chain.sc
    if sc.rope is None:
        return None
    trig = chain.memo("trig", lambda: _trig_tables(chain))
    return {d_k: Turn(cos, sin, sc.rope.pairs(d_k)) for d_k, (cos, sin, _) in trig.items()}


def page_gradients(chain: PrintedChain) -> tuple[Computation, Gradients]:
    """core/gradients.py on the printed forward pass, under the page's policy."""
    pcomp = printed_computation(chain)
    return pcomp, gradients(pcomp, PageBackward(chain.d), page_trig(chain), latent_turn(chain))


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
          head: int | None = None, allow: np.ndarray | None = None, places: int | None = None) -> None:
        grid = values[None, :] if values.ndim == 1 else values
        out.append(Table(key, name, heading, "backward", head, np.asarray(grid, dtype=np.float64), rs, cs, False, True,
                         allow, places=places if places is not None and places > chain.d else None))

    d_out = G.dO.shape[1]
    if bw.dO is not None:
        out.append(Table("dO", "dO", "dO (the gradient at the output, as given)", "backward", None,
                         np.asarray(bw.dO, dtype=np.float64), rows, idx(d_out), True, False))
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
        dv, dvc = idx(hr.d_v), idx(hr.d_k)
        if hg.gate is not None:
            t(f"dOh.{h}", "dO_h", "dO_h = dJ ⊙ g (dJ: this head's columns of the gradient at Concat)",
              hg.gate.d_output, rows, dv, h)
            t(f"dz.{h}", "dz", "dz = dJ ⊙ output ⊙ g ⊙ (1 − g) (at the gate's logits)", hg.gate.d_logit, rows, dv, h)
            t(f"dW_G.{h}", "dW_G", f"dW_G = {xq}ᵀ·dz", hg.gate.dW_G, idx(hr.read(Gated, lambda g: g.W_G.shape[0]) or 0),
              dv, h)
        if hg.linear is not None:
            linear_tables(t, chain, h, hg.linear, ops)
        else:
            _softmax_tables(t, chain, pcomp, h, hg)
        if G.mla is not None:  # the latent layer's own tables stand for the heads' multiplied-through weights
            mla_head_tables(t, chain, h, G.mla)
            continue
        if hg.dQ_rot is not None:
            t(f"dQt.{h}", dq[1], f"{dq[1]} = {dq[0]} turned back (by −p·θ)", hg.dQ_turned, rows, dvc, h)
            t(f"dKt.{h}", dk[1], f"{dk[1]} = {dk[0]} turned back (by −p·θ)", hg.dK_turned, keys, dvc, h)
        if qk_all(sc):  # the norm reads every head's columns: after every head's part
            continue
        if sc.qk_norm is not None:
            _qk_tables(t, chain, pcomp, h, mine, hg.dQ_turned, hg.dK_turned, hg)
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
    if sc.qk_norm is not None and len(sc.heads) > 1 and not qk_all(sc):
        assert G.dgamma_q is not None and G.dgamma_k is not None
        t("dgamma_q", "dγ_q", "dγ_q = the sum over the heads", r(G.dgamma_q), ("γ_q",), idx(len(G.dgamma_q)))
        t("dgamma_k", "dγ_k", "dγ_k = the sum over the heads", r(G.dgamma_k), ("γ_k",), idx(len(G.dgamma_k)))
    dm = idx(G.dX_norm.shape[1])
    if G.mla is not None:
        mla_tables(t, chain, G.mla, xq)
        t("dX_in", f"d{xq}", dX_heading(xq), G.dX_norm, rows, dm)
        if sc.norm is not None and pcomp.norm is not None:
            _norm_tables(t, pcomp.norm, sc, G, chain.d)
        return out
    paths = "Q" + ("" if sc.is_cross else ", K, V") + (", gate" if any(h.W_G is not None for h in sc.heads) else "")
    t("dX_in", "dX̂" if sc.norm is not None else "dX", f"{'dX̂' if sc.norm is not None else 'dX'} = the sum of the"
      f" {paths} paths (dQ·W_Qᵀ + …, every head)", G.dX_norm, rows, dm)
    if sc.norm is not None and pcomp.norm is not None:
        _norm_tables(t, pcomp.norm, sc, G, chain.d)
    return out


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
    hr, a, r = pcomp.heads[h], hg.attend, chain.rounded
    rows, keys = sc.labels, sc.key_labels
    ops = operand_keys(sc, chain.owners)
    dq, dk = ops.dq_names(h), ops.dk_names(h)
    dv, dvc = idx(hr.d_v), idx(hr.d_k)
    t(f"dV.{h}", "dV", "dV = weightsᵀ·dO_h", a.dV, keys, dv, h)
    t(f"dP.{h}", "dP", "dP = dO_h·Vᵀ", a.dP, rows, keys, h)
    t(f"D.{h}", "D", "D = rowsum(dO_h ⊙ output)", a.D[:, None], rows, ("D",), h)
    t(f"dS.{h}", "dS", "dS = weights ⊙ (dP − D) (0 where masked)", a.dS, rows, keys, h, sc.allow)
    if hr.part(Sunk) is not None:
        assert a.dsink is not None
        t(f"psink.{h}", "p_sink", "p_sink = 1 − Σ weights (each row's sink share)",
          r(1.0 - hr.weights.sum(axis=1))[:, None], rows, ("p",), h)
        t(f"dsink.{h}", "dsink", "dsink = −Σ p_sink·D", np.array([[a.dsink]]), ("sink",), ("d",), h)
    if hr.part(Capped) is not None:
        t(f"dcap.{h}", "dscaled", "dscaled = dS ⊙ (1 − tanh²(scaled / c)) (through the soft-cap)", a.dscaled, rows,
          keys, h, sc.allow)
    t(f"dscores.{h}", "dscores", "dscores = dscaled / scale" if hr.part(Capped) is not None else "dscores = dS / scale",
      a.dscores, rows, keys, h, sc.allow)
    t(f"dQu.{h}", dq[0], f"{dq[0]} = dscores·{ops.k_used_name}", a.dQ_used, rows, dvc, h)
    t(f"dKu.{h}", dk[0], f"{dk[0]} = dscoresᵀ·{ops.q_used_name}", a.dK_used, keys, dvc, h)


def _qk_tables(t: Add, chain: PrintedChain, pcomp: Computation, h: int, mine: bool, dQ_t: Matrix, dK_t: Matrix,
               hg: HeadGrad) -> None:
    """QK-norm read backwards for head ``h`` (kernels/norm_backward.py's norm_backward, over each head's columns)."""
    sc = chain.sc
    qk = sc.qk_norm
    assert qk is not None
    hr = pcomp.heads[h]
    g = chain.owners[h]
    gamma_q, gamma_k = qk.gammas(h, sc.kv_head(h), hr.d_k)
    cols = idx(hr.d_k)
    qkn = hr.need(QKNormed)
    for role, normed, M, gamma, dY, labels, owner in (
            ("Q", qkn.Q_normed, hr.Q, gamma_q, dQ_t, sc.labels, h), ("K", qkn.K_normed, hr.K, gamma_k, dK_t, sc.key_labels, g)):
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
        head = ("dV = weightsᵀ·dO_h, dP = dO_h·Vᵀ, D = rowsum(dO_h ⊙ output), dS = weights ⊙ (dP − D), 0 where masked;"
                " dQ = (dS / scale)·K, dK = (dS / scale)ᵀ·Q; " if sc.linear is None else "")
        out = ["- Backward: work each table of the Backward sections from the tables printed before it, in page order"
               f" (the chain rule, one operation per table). {head}dW_Q = Xᵀ·dQ (each weight's gradient: its input"
               " transposed times the gradient at its output); a bias's gradient is the sum of its gradient's rows."
               if sc.linear is not None else
               "- Backward: work each table of the Backward sections from the tables printed before it, in page order"
               f" (the chain rule, one operation per table). {head}dW = Xᵀ·(its gradient); a bias's gradient is the sum"
               " of its gradient's rows."]
        if sc.linear is not None:
            norm = sc.linear.normalize
            out.append("  Linear attention, in place of the softmax: dV = " + ("W" if norm else "A") + "ᵀ·dO_h, dW = dO_h·Vᵀ, "
                       + ("D = rowsum(dO_h ⊙ output), dA = (dW − D) ÷ ΣA" if norm else "dA = dW") + ", 0 where masked;"
                       " dφ(Q) = dA·φ(K), dφ(K) = dAᵀ·φ(Q); dQ = dφ(Q) ⊙ φ'(Q), dK = dφ(K) ⊙ φ'(K)"
                       + (" (φ' is 1 above 0 and e^x = φ(x) at or below)." if sc.linear.feature == "elu1" else "."))
        if sc.mla is not None:
            out.append("  Latent attention: each head's dQ and dK are at Q = [q_C | q_R'] and K = [k_C | k_R'], their first"
                       " d_nope columns dq_C and dk_C" + (", the rest turned back by the opposite angle" if sc.mla.rope
                                                          is not None else "") + "; dk_R sums every head's share (k_R is"
                       " shared), dc_KV = Σ dk_C·W_UKᵀ + dv_C·W_UVᵀ over the heads, dX̂ sums the latent's, the rotary"
                       " key's and the queries' paths.")
        if sc.W_O is not None:
            out.append("  Through W_O first: dConcat = dO·W_Oᵀ (each head's dO_h is its columns), dW_O = concatᵀ·dO.")
        if any(h.W_G is not None for h in sc.heads):
            out.append("  Gate: dO_h = dJ ⊙ g and dz = dJ ⊙ output ⊙ g ⊙ (1 − g), dJ the head's columns at Concat.")
        if any(h.softcap is not None for h in sc.heads):
            out.append("  Soft-cap: dscaled = dS ⊙ (1 − tanh²(scaled / c)), from the printed scaled scores.")
        if any(h.sink is not None for h in sc.heads):
            out.append("  Sink: its share of a row is p_sink = 1 − Σ weights, and dsink = −Σ p_sink·D.")
        if ALIBI.of(sc) is not None:
            out.append("  ALiBi: the bias is added, so dS passes through it unchanged.")
        if sc.rope is not None:
            out.append("  RoPE: turn the gradients back by the opposite angle: a = a'·cos + b'·sin, b = −a'·sin + b'·cos.")
        if sc.qk_norm is not None and sc.qk_norm.over == "all":
            out.append("  QK-norm over every head's columns, after every head's part: r = √(ms + eps) per row, x̂ = [every"
                       " head's q] / r, m = mean(dq̂ ⊙ γ ⊙ x̂) over the whole row; dq = (dq̂ ⊙ γ − x̂·m) / r, dγ = Σ rows"
                       " of dq̂ ⊙ x̂. Each head's dK is the sum of every head's share c_K: the same, from that head's dk̂"
                       " alone (0 in the other heads' columns).")
        elif sc.qk_norm is not None:
            out.append("  QK-norm: r = √(ms + eps), x̂ = q / r, m = mean(dq̂ ⊙ γ ⊙ x̂); dq = (dq̂ ⊙ γ − x̂·m) / r,"
                       " dγ = Σ rows of dq̂ ⊙ x̂.")
        if sc.num_kv_heads is not None or kv_shared(sc):
            out.append("  Grouped K/V heads: each query head's dK, dV and their weights' gradients are its own share;"
                       " a K/V head's gradient is the sum of its readers' shares.")
        if sc.norm is not None:
            out.append("  dX̂ sums every path into X̂; then the norm: r = √(ms or var + eps), x̂ = (x − mean) / r,"
                       " m = mean(dX̂ ⊙ γ ⊙ x̂)" + (", ḡ = mean(dX̂ ⊙ γ)" if sc.norm.kind == "layer" else "")
                       + "; dX = (dX̂ ⊙ γ − x̂·m" + (" − ḡ" if sc.norm.kind == "layer" else "") + ") / r.")
        return out

    def worksheet_line(self, cells: PrintedCells, table: Table, row: int, col: int, answer: str) -> str:
        return line(cells, table, row, col, answer)


def kv_shared(sc: Scenario) -> bool:
    return kv_owners(sc) != list(range(len(sc.heads)))


SHEET = BackwardSheet()
