"""Stage Project: Q = X·W_Q, K = X·W_K, V = X·W_V, one cell at a time (with a bias, from the context, or shared)."""

from __future__ import annotations

import importlib
import sys
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from qkv_tui.core import part_questions as ask
from qkv_tui.core.engine import Computation, HeadResult
from qkv_tui.core.fmt import is_integral, operand
from qkv_tui.core.scenario import Matrix
from qkv_tui.core.variants import v_norm
from qkv_tui.teach.arith import agrees, dot_line, shown, tiny_operand, tries, unit
from qkv_tui.teach.stages.common import (
    K_SLOT,
    Q_SLOT,
    V_SLOT,
    Key,
    Operation,
    Plan,
    Ref,
    Segment,
    Stage,
    StageSpec,
    counts,
    dot_bias_line,
    kv_shared,
    x_in,
)
from qkv_tui.teach.stages.context import TraceContext
from qkv_tui.teach.stages.grads import BackwardSpec, dot_cell, grads, handed_back, has_backward, sum_cell
from qkv_tui.teach.stages.markdown import MarkdownPage
from qkv_tui.teach.stages.printed import PrintedCells, PrintedChain, Table, idx
from qkv_tui.teach.stages.raw_projections import raw_projections
from qkv_tui.teach.stages.raw_projections import value_factor as _value_factor
from qkv_tui.teach.stages.replaced import heads_project

if TYPE_CHECKING:  # the cost view's module loads on its first use; the value norm's with a scenario that has it
    from qkv_tui.core.cost import Count, Phase
    from qkv_tui.core.scenario import Scenario
    from qkv_tui.kernels.v_norm import ValueNormed


WIDE = ("W_Q_wide", "W_K_wide", "W_V_wide")  # split scenarios: every head's slice side by side
WEIGHTS = ("W_Q", "W_K", "W_V")
FACTOR_KEY = "V_factor"  # the worksheet's input table of a value scale (one for the page: every head's is the same)
SLOTS = {"Q": Q_SLOT, "K": K_SLOT, "V": V_SLOT}  # the formula's letter each projection computes


class Project(StageSpec):
    stage = Stage("project", "Project",
                  "Multiply X by three learned matrices. Row i of Q is what token i is looking for, row i of K"
                  " what it advertises, row i of V the content it will contribute. Separate projections let a"
                  " token ask for one thing and offer another.")
    per_head = True
    matrices = (*WEIGHTS, *WIDE, "Q", "K", "V")
    transposed = MappingProxyType({"KT": "K"})

    def runs(self, trace: TraceContext) -> bool:
        # [mla] projects through its latent (mla_compress, mla_expand); [ssd] reads its own C, B and x
        return heads_project(trace)

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        assert head is not None
        sc, hr = trace.comp.scenario, trace.comp.heads[head]
        plans = [Plan("Q", sc.n, hr.d_k)]
        if trace.kv_owner[head] == head:  # a shared K/V head is computed once, by its first reader
            plans += [Plan("K", sc.m, hr.d_k), Plan("V", sc.m, hr.d_v)]
        return plans

    def meaning(self, trace: TraceContext, head: int | None) -> str:
        sc = trace.comp.scenario
        text = self.stage.meaning
        if sc.is_cross:
            text = ("Multiply by three learned matrices: Q = X·W_Q from the query tokens, but K = X_ctx·W_K and"
                    " V = X_ctx·W_V from the context (cross-attention: in a translator the decoder's tokens ask"
                    " and the encoder's output answers, Vaswani et al. §3.2.3). Row i of Q is what query token i"
                    " is looking for, row j of K what context token j advertises, row j of V the content it will"
                    " contribute.")
        if sc.num_kv_heads is not None:
            text += (f" Grouped K/V heads: {len(trace.comp.heads)} query heads share {sc.num_kv_heads} K/V"
                     f" head{'s' if sc.num_kv_heads != 1 else ''}, so each K and V is computed once, by the first"
                     " query head that reads it.")
        if trace.comp.norm is not None:
            text += " The projections read X̂, the normalised X."
        if trace.comp.heads and _value_norm(trace.comp.heads[0]) is not None:
            text += (" Then each row of V is divided by its root mean square (a value norm without a gain, Gemma 3n's"
                     " v_norm), so every value vector the mix adds up has the same size.")
        source = _reused_from(trace.comp.heads[head] if head is not None else None)
        if source is not None:  # [shared_kv]: only Q is projected here
            text = (f"Multiply {x_in(trace)[1]} by W_Q: row i of Q is what token i is looking for. K and V are reused"
                    f" from layer {source}, not computed here: this layer has no W_K or W_V (Gemma 3n's cross-layer KV"
                    " sharing), so the next stage, Reuse, shows them as that layer cached them.")
        return text

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        comp = trace.comp
        sc = comp.scenario
        if seg.target in ("K", "V") and sc.is_cross:
            source, src_name, xs = sc.X_kv, "context_X", "X_ctx"
        elif comp.norm is not None:
            source, src_name, xs = comp.norm.X_norm, "X_norm", "X̂"
        else:
            source, src_name, xs = sc.X, "X", "X"
        weight_name = f"W_{seg.target}"
        head = comp.heads[h]
        W = getattr(head, weight_name)
        bias = getattr(head, f"b_{seg.target}")
        value = float(getattr(head, seg.target)[row, col])
        label = trace.row_label(seg.target, row)
        result = trace.formatted(seg.target, h, value, d)
        src_int, w_int = trace.integral(src_name, None), trace.integral(weight_name, h)
        # split heads: name the column of the wide matrix the screen shows, h2:0 for head 2's column 0
        wide = trace.is_wide(weight_name)
        wcol = trace.slice_label(weight_name, trace.wide_offset(weight_name, h) + col) if wide else str(col)
        scaled = _value_factor(head) if seg.target == "V" else None
        normed = _value_norm(head) if seg.target == "V" else None
        projected = result if scaled is None and normed is None else None
        if scaled is not None:  # a value scale: the projection's cell, then V = that·factor
            u, factor = float(scaled.V_projected[row, col]), float(scaled.V_factor)
            projected, factor_text = _factor_texts(u, factor, result, d, src_int and w_int)
        if normed is not None:  # a value norm: the projection's cell, then V = that / its row's root
            u, root = float(normed.V_projected[row, col]), float(normed.normed.root[row])
            projected, root_text = _root_texts(u, root, result, d, src_int and w_int)
        assert projected is not None
        if bias is None:
            work = dot_line(source[row], W[:, col], src_int, w_int, projected, d, trace.hand)
            formula = f"{xs}[{label}]·{weight_name}[:,{wcol}]"
        else:
            work = dot_bias_line(source[row], W[:, col], float(bias[col]), src_int, w_int, projected, d, trace.hand)
            formula = f"{xs}[{label}]·{weight_name}[:,{wcol}] + b_{seg.target}[{col}]"
        if scaled is not None:
            sides = [f"({side})·{factor_text}" for side in work.split(" = ")[:-1]]
            work = " = ".join([*sides, f"{projected}·{factor_text}", result])
            formula = f"({formula})·{factor_text}"
        details: tuple[str, ...] = ()
        if normed is not None:
            sides = [f"({side}) / {root_text}" for side in work.split(" = ")[:-1]]
            work = " = ".join([*sides, f"{projected} / {root_text}", result])
            formula = f"({formula}) / rms[{label}]"
            spread = float(normed.normed.spread[row])
            details = (f"rms[{label}] = √(mean of row {label}'s {head.d_v} squares before the norm + eps) ="
                       f" √({spread:.{d + 2}g} + {normed.eps:g}) = {root_text}: V's row {label} divided by it has a"
                       " root mean square of 1 (no gain: Gemma 3n's v_norm)",)
        text = f"{seg.target}[{label},{col}] = {formula} = {work}"
        operands = (Ref(src_name, None, row, None), Ref(weight_name, h, None, col))
        if seg.target == "K" and row == col == 0 and sc.num_kv_heads is not None:  # said once per K/V head
            sharing = trace.kv_readers[h]
            names = ", ".join(str(g + 1) for g in sharing)
            ratio = len(comp.heads) / sc.num_kv_heads
            details = (f"K/V head {head.kv_head + 1} is computed once and read by query heads {names}; the KV cache"
                       f" keeps {sc.num_kv_heads} K/V head{'s' if sc.num_kv_heads != 1 else ''} instead of"
                       f" {len(comp.heads)}: {ratio:g}× smaller",)
        return Operation(index, seg, row, col, value, operands, text, details)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        if name in WIDE:
            if not trace.is_wide(name.removesuffix("_wide")):
                raise KeyError(name)
            return trace.wide(name)
        if head is None:
            raise KeyError(name)
        return getattr(trace.comp.heads[head], name)  # type: ignore[no-any-return]

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        h, target = op.head, op.segment.target
        source = "context_X" if trace.comp.scenario.is_cross and target in ("K", "V") else x_in(trace)[0]
        weight = f"W_{target}_wide" if trace.is_wide(f"W_{target}") else f"W_{target}"  # slice marked
        return [(source, None), (weight, h), (target, h)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("Q", head), ("K", head), ("V", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        own = _titled(trace, name)  # a part's own title: an [mla] head's Q and K are its parts side by side
        if own is not None:
            return own
        if name in WEIGHTS:
            return name
        if name in WIDE:
            return f"{name.removesuffix('_wide')}, all heads"
        hr = trace.comp.heads[head] if head is not None else None

        def plus(role: str) -> str:
            return f" + b_{role}" if hr is not None and getattr(hr, f"b_{role}") is not None else ""

        shown_x = x_in(trace)[1]
        src = "X_ctx" if trace.comp.scenario.is_cross else shown_x
        shared = kv_shared(trace, hr)
        if name == "Q":
            return f"Q = {shown_x}·W_Q{plus('Q')}"
        if name == "KT":
            return f"Kᵀ{shared}"
        scaled = _value_factor(hr) if name == "V" and hr is not None else None
        if scaled is not None:
            return f"V = {_scaled_formula(f'{src}·W_V{plus(name)}', scaled.V_factor)}{shared}"
        if name == "V" and hr is not None and _value_norm(hr) is not None:
            return f"V = RMSNorm({src}·W_V{plus(name)}){shared}"
        return f"{name} = {src}·W_{name}{plus(name)}{shared}"

    def lights(self, seg: Segment) -> frozenset[int]:
        return frozenset({SLOTS[seg.target]})


    def markdown_before(self, page: MarkdownPage) -> list[str]:
        trace = page.trace
        if not trace.split:
            return []
        out = [f"The scenario gives one wide matrix per role, cut into {len(trace.comp.heads)} equal column slices:"
               " each head takes the columns labelled with its number (h2:0 is head 2's column 0).", ""]
        for role in (r for r in WEIGHTS if trace.is_wide(r)):
            out += [page.table(f"{role}_wide", None, role), ""]
        return out

    def markdown(self, page: MarkdownPage, head: int | None) -> list[str]:
        assert head is not None
        trace = page.trace
        comp, sc = trace.comp, trace.comp.scenario
        hr = comp.heads[head]
        out: list[str] = []
        reused = _reused_from(hr)
        for role in ("Q", "K", "V") if reused is None else ("Q",):
            weight = f"W_{role}"
            bias = " + b_" + role if getattr(hr, f"b_{role}") is not None else ""
            shared = role != "Q" and trace.kv_owner[head] != head
            source = "X_ctx" if sc.is_cross and role != "Q" else x_in(trace)[1]
            out += [f"{weight}:", "", page.table(weight, head), ""]
            formula = f"{source}·{weight}{bias}"
            if role == "V" and _value_norm(hr) is not None:
                formula = f"RMSNorm({formula}), each row divided by √(mean of its squares + eps)"
            out += [f"{role} = {formula}"
                    + (f" (K/V head {hr.kv_head + 1}, computed by {comp.heads[trace.kv_owner[head]].name}):" if shared
                       else ":"), "",
                    page.table(role, head), ""]
        if reused is not None:
            out += [f"K and V are reused from layer {reused}, not computed here (no W_K, no W_V): see Reuse below.", ""]
        return out + page.worked(self.stage.key, head)

    def worksheet_tables(self, chain: PrintedChain, head: int | None) -> list[Table]:
        assert head is not None
        h, sc = head, chain.sc
        hr = sc.heads[h]
        g = chain.owners[h]
        mine = g == h  # the first head reading its K/V head prints its K and V
        kv_suffix = chain.kv_suffix(h)
        out: list[Table] = []
        inputs: list[tuple[str, Matrix | None, tuple[int, ...]]] = [("W_Q", hr.W_Q, ()), ("b_Q", hr.b_Q, ())]
        if mine:
            who = chain.readers[g]
            inputs += [("W_K", hr.W_K, who), ("b_K", hr.b_K, who), ("W_V", hr.W_V, who), ("b_V", hr.b_V, who)]
        for name, array, who in inputs:
            if array is None:
                continue
            matrix = array[None, :] if array.ndim == 1 else array
            rows = ("b",) if array.ndim == 1 else idx(matrix.shape[0])
            heading = name + (kv_suffix if who else "")
            out.append(Table(f"{name}.{h}", name, heading, "project", h, matrix, rows, idx(matrix.shape[1]), True, False,
                             readers=who if chain.grouped else ()))
        Q_raw, K_raw, V_raw = raw_projections(chain)
        q_whole, kv_whole = _reads_whole(chain)
        xq = "X̂" if sc.norm is not None else "X"
        xkv = "X_ctx" if sc.is_cross else xq
        Q = chain.rounded(Q_raw[h])
        plus = " + b_Q" if hr.b_Q is not None else ""
        out.append(Table(f"Q.{h}", "Q", f"Q = {xq}·W_Q{plus}", "project", h, Q, sc.labels, idx(hr.d_k), False, True,
                         whole=q_whole and is_integral(Q_raw[h])))
        if mine:
            for role, raw in (("K", K_raw[g]), ("V", V_raw[g])):
                bias = " + b_" + role if getattr(hr, f"b_{role}") is not None else ""
                width = hr.d_k if role == "K" else hr.d_v
                formula = f"{xkv}·W_{role}{bias}"
                if role == "V" and (scaled := _value_factor(chain.comp.heads[g])) is not None:
                    formula = _scaled_formula(formula, scaled.V_factor)
                    chain.late_input(Table(FACTOR_KEY, "s", "The value scale: V is multiplied by it after the projection",
                                           "project", None, np.array([[scaled.V_factor]]), ("s",), ("V",), True, False))
                out.append(Table(f"{role}.{h}", role, f"{role} = {formula}{kv_suffix}", "project", h,
                                 chain.rounded(raw), sc.key_labels, idx(width), False, True,
                                 whole=kv_whole and is_integral(raw), readers=chain.kv_readers(h)))
        return out

    def worksheet_line(self, cells: PrintedCells, table: Table, row: int, col: int, answer: str) -> str:
        sc, name, i, j = cells.sc, table.name, row, col
        s = f".{table.head}" if table.head is not None else ""
        q = (sc.key_labels if name in ("K", "V") else sc.labels)[i]
        if name != "Q" and sc.is_cross:
            source, xs = "context_X", "X_ctx"
        else:
            source, xs = ("X_norm", "X̂") if "X_norm" in cells.tables else ("X", "X")
        b_key = f"b_{name}{s}"
        plus = f" + b_{name}[{j}]" if b_key in cells.tables else ""
        formula, work = f"{xs}[{q}]·W_{name}[:,{j}]{plus}", f"{cells.dot(source, i, f'W_{name}{s}', j)}{cells.bias(b_key, j)}"
        if name == "V" and FACTOR_KEY in cells.tables:  # a value scale, printed among the inputs
            factor = cells.txt(FACTOR_KEY, 0, 0)
            formula, work = f"({formula})·{factor}", f"({work})·{factor}"
        return f"{name}[{q},{j}] = {formula} = {work} = {answer}"

    def worksheet_note(self, comp: Computation, owners: list[int], head: int) -> list[str]:
        """A head that reads an earlier head's K and V says where they are."""
        owner = owners[head]
        if owner == head:
            return []
        heads = comp.heads
        turned = "".join(ask.said(heads[owner], "worksheet.kv_reader"))  # a part that turns K says where it is
        return [f"{heads[head].name} reads K/V head {heads[owner].kv_head + 1}: its K and V are in {heads[owner].name}'s"
                f" Project section{turned}.", ""]


def _reused_from(hr: HeadResult | None) -> int | None:
    """The layer whose K and V the head reuses ([shared_kv]), or None where it projects its own."""
    if hr is None:
        return None
    given: Any = next((r for r in hr.parts.values() if getattr(r, "kv_given", False)), None)
    return None if given is None else int(given.source_layer)


SPEC = Project()


@counts(SPEC)
def _cost(sc: Scenario, ph: Phase) -> Count:
    """Q for every query head; K and V once per K/V head, for the key rows projected in this phase."""
    from qkv_tui.core import part_questions as ask
    from qkv_tui.core.cost import B, Count, fig, per_heads, shapes, term

    s = shapes(sc)
    x = "X" if sc.norm is None else "X̂"
    dks, kv_dk, kv_dv = tuple(dk for dk, _ in s.heads), tuple(dk for dk, _ in s.kv), tuple(dv for _, dv in s.kv)
    two, d, din = ("2", 2), ("d_model", s.d_model), ("d_in", s.d_in)
    matmul = per_heads("Q", s.h, "h", dks, "d_k", two, ph.R, d)
    read = fig(term(x, ph.R, d, B(ph)), term("W_Q", d, ("Σd_k", s.sum_dk), B(ph)))
    written = fig(term("Q", ph.R, ("Σd_k", s.sum_dk), B(ph)))
    if ph.new and not ask.scenario_has(sc, "kv_given"):  # [shared_kv]: K and V are another layer's
        matmul += per_heads("K", len(s.kv), "h_kv", kv_dk, "d_k", two, ph.NEW, din)
        matmul += per_heads("V", len(s.kv), "h_kv", kv_dv, "d_v", two, ph.NEW, din)
        if sc.is_cross:
            read += fig(term("context X", ph.NEW, din, B(ph)))
        read += fig(term("W_K", din, ("Σ_kv d_k", s.kv_dk), B(ph)), term("W_V", din, ("Σ_kv d_v", s.kv_dv), B(ph)))
        written += fig(term("K", ph.NEW, ("Σ_kv d_k", s.kv_dk), B(ph)), term("V", ph.NEW, ("Σ_kv d_v", s.kv_dv), B(ph)))
    biases = [term("b_Q", ("Σd_k", s.sum_dk), B(ph))] if any(h.b_Q is not None for h in sc.heads) else []
    if ph.new and any(h.b_K is not None for h in sc.heads):
        biases.append(term("b_K", ("Σ_kv d_k", s.kv_dk), B(ph)))
    if ph.new and any(h.b_V is not None for h in sc.heads):
        biases.append(term("b_V", ("Σ_kv d_v", s.kv_dv), B(ph)))
    other = fig()
    if ph.new and v_norm.TABLE.of(sc) is not None:  # [v_norm]: a root per new value row of each K/V head, a division per cell
        other = fig(term("root V", ph.NEW, ("h_kv", len(s.kv))), term("div V", ph.NEW, ("Σ_kv d_v", s.kv_dv)))
    return Count(SPEC.stage.key, SPEC.stage.name, ph.name, matmul=matmul, other=other, read=read + fig(*biases),
                 written=written)


def _value_norm(hr: HeadResult) -> ValueNormed | None:
    """The record of a value norm on this head's V (Gemma 3n's v_norm); None without."""
    # Only the value norm's kernel makes that record, so while its module is not loaded no head has one: the V
    # pane's title, on the first screen of every scenario, asks without importing it
    kernel = sys.modules.get("qkv_tui.kernels.v_norm")
    return None if kernel is None else cast("ValueNormed | None", hr.part(kernel.ValueNormed))


def _root_texts(projected: float, root: float, result: str, decimals: int, whole: bool) -> tuple[str, str]:
    """The projection's cell and its row's root, each with the digits that make their quotient the shown V."""
    exact = whole and float(projected).is_integer()
    for p in tries(decimals, False):
        u, r = operand(projected, exact, p), operand(root, root.is_integer(), p)
        if shown(r) == 0:  # a root below these places' last digit (a row of zeros over a small eps): its mantissa
            r = f"{root:.{p}e}"
        if all(agrees(x / shown(r), result) for x in _readings(u, exact, projected)):
            break
    return u, r


def _readings(u: str, exact: bool, projected: float) -> tuple[float, ...]:
    """What the projection's cell may stand for on the line: its text, one unit of its last digit either side
    (the dot product before it agrees with the text to that unit, not to the digit), and its own value."""
    if exact:
        return (shown(u),)
    return shown(u) - unit(u), shown(u), shown(u) + unit(u), projected


def _scaled_formula(formula: str, factor: float) -> str:
    """``0.707·(X·W_V + b_V)``: the factor first, so a narrow pane's title, which drops a remark in parentheses
    after a space, keeps the formula."""
    return f"{factor:g}·({formula})" if " + " in formula else f"{factor:g}·{formula}"


def _factor_texts(projected: float, factor: float, result: str, decimals: int, whole: bool) -> tuple[str, str]:
    """The projection's cell and the factor, each with the digits that make their product the shown V. Where no
    places do, an operand too small for any of them beside a huge one (a factor of 1e-300 on −1e300) is written by
    its mantissa, as dot_line writes one."""
    exact = whole and float(projected).is_integer()
    for write in (operand, tiny_operand):
        for p in tries(decimals, False):
            u, s = write(projected, exact, p), write(factor, factor.is_integer(), p)
            if all(agrees(x * shown(s), result) for x in _readings(u, exact, projected)):
                return u, s
    return u, s


def _titled(trace: TraceContext, name: str) -> str | None:
    """The title a head's part gives one of Project's panes: its record names the stage module that titles them
    (``titles``, loaded with the part's stages); None where no part does."""
    module = next((str(r.titles) for hr in trace.comp.heads for r in ask.answering(hr, "titles")), None)
    if module is None:
        return None
    said: str | None = importlib.import_module(f"qkv_tui.teach.stages.{module}").title(trace, name)
    return said


def _reads_whole(chain: PrintedChain) -> tuple[bool, bool]:
    """Whether what Q, and what K and V, read is whole numbers: 1.000·1 is written 1.000, not 1."""
    sc = chain.sc
    q_whole = is_integral(sc.X) if sc.norm is None else chain.printed["X_norm"].whole
    kv_whole = is_integral(sc.context_X) if sc.context_X is not None else q_whole
    return q_whole, kv_whole


class ProjectBack(BackwardSpec):
    """Project read backwards: Q = X̂·W_Q + b_Q, so dW_Q = X̂ᵀ·dQ and db_Q = Σ rows of dQ (and so for K, V)."""

    stage = Stage("dproject", "dProject",
                  "Back through Project: the weights' own gradients, what training changes. Q[t,c] was X̂[t]·W_Q[:,c],"
                  " so W_Q[r,c] met X̂[t,r] in every token's row: dW_Q = X̂ᵀ·dQ adds up, over the tokens, what each"
                  " row of dQ asks times the input that carried it. The same for dW_K = X̂ᵀ·dK and dW_V = X̂ᵀ·dV;"
                  " a bias met every row with weight 1, so its gradient is its column of dQ (dK, dV) summed.")
    per_head = True
    matrices = ("dW_Q", "dW_K", "dW_V", "db_Q", "db_K", "db_V")

    def runs(self, trace: TraceContext) -> bool:
        return has_backward(trace) and heads_project(trace)  # [mla]: dExpand and dCompress instead

    def meaning(self, trace: TraceContext, head: int | None) -> str:
        text = self.stage.meaning.replace("X̂", x_in(trace)[1])  # X where there is no norm
        sc = trace.comp.scenario
        if head is not None and (trace.kv_owner[head] != head or len(trace.kv_readers.get(head, [])) > 1):
            text += (" This head shares its K/V head with others: dW_K and dW_V here are its own share; training"
                     " moves the shared W_K and W_V by the sum of every reader's share.")
        if sc.is_cross:
            text += " K and V read the context, so dW_K and dW_V are X_ctxᵀ·dK and X_ctxᵀ·dV."
        return text

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        assert head is not None
        hr = trace.comp.heads[head]
        plans = []
        for role, width in (("Q", hr.d_k), ("K", hr.d_k), ("V", hr.d_v)):
            plans.append(Plan(f"dW_{role}", getattr(hr, f"W_{role}").shape[0], width))
            if getattr(hr, f"b_{role}") is not None:
                plans.append(Plan(f"db_{role}", 1, width))
        return plans

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        comp = trace.comp
        hg = grads(trace).heads[h]
        role = seg.target[-1]
        grad = {"Q": hg.dQ, "K": hg.dK, "V": hg.dV}[role]  # (rows, width)
        source = handed_back(trace, h, role) if role != "V" else "dV"
        if seg.target.startswith("db_"):
            value = float(getattr(hg, seg.target)[col])
            return sum_cell(trace, index, seg, row, col, d, value, grad[:, col],
                            f"db_{role}[{col}] = Σ d{role}[:,{col}]", (Ref(source, h, None, col),))
        if role == "Q" or not comp.scenario.is_cross:
            x_name, x_label = x_in(trace)
            X = comp.X_in
        else:
            x_name, x_label, X = "context_X", "X_ctx", comp.scenario.X_kv
        value = float(getattr(hg, seg.target)[row, col])
        return dot_cell(trace, index, seg, row, col, d, value, X[:, row], grad[:, col], trace.integral(x_name, None),
                        False, f"dW_{role}[{row},{col}] = {x_label}[:,{row}]·d{role}[:,{col}]",
                        (Ref(x_name, None, None, row), Ref(source, h, None, col)))

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        if head is None or not has_backward(trace):
            raise KeyError(name)
        value = getattr(grads(trace).heads[head], name)
        if value is None:
            raise KeyError(name)
        return value[None, :] if name.startswith("db_") else value  # type: ignore[no-any-return]

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        h = op.head
        role = op.segment.target[-1]
        source = handed_back(trace, h, role) if role != "V" else "dV"
        if op.segment.target.startswith("db_"):
            return [(source, h), (op.segment.target, h)]
        x_name = x_in(trace)[0] if role == "Q" or not trace.comp.scenario.is_cross else "context_X"
        return [(x_name, None), (source, h), (op.segment.target, h)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("dW_Q", head), ("dW_K", head), ("dW_V", head)] if has_backward(trace) else []

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        role = name[-1]
        if name.startswith("db_"):
            return f"db_{role} = Σ d{role}"
        x_label = x_in(trace)[1] if role == "Q" or not trace.comp.scenario.is_cross else "X_ctx"
        return f"dW_{role} = {x_label}ᵀ·d{role}"


BACKWARD = ProjectBack()
