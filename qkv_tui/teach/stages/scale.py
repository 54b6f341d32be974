"""Stage Scale: every score divided by √dₖ (or the scenario's scale), soft-capped where a head has a cap
(soft_cap.py), with ALiBi's bias and the mask applied here."""

from __future__ import annotations

import math
from types import MappingProxyType
from typing import TYPE_CHECKING

import numpy as np

from qkv_tui.core import part_questions as ask
from qkv_tui.core.fmt import NEG_INF, fmt, is_integral
from qkv_tui.core.part_masks import mask_note, mask_reason
from qkv_tui.core.scenario import Matrix
from qkv_tui.kernels.policy import EXACT
from qkv_tui.kernels.softmax import masked_logits
from qkv_tui.teach.arith import quotient_line, significant
from qkv_tui.teach.stages import loaded, soft_cap
from qkv_tui.teach.stages.common import (
    BIAS,
    DIVIDE,
    FormulaPart,
    Key,
    Operation,
    PaneStyle,
    Plan,
    Ref,
    Segment,
    Stage,
    StageSpec,
    counts,
)
from qkv_tui.teach.stages.context import TraceContext
from qkv_tui.teach.stages.grads import BackwardSpec, formula_cell, grads, has_backward
from qkv_tui.teach.stages.markdown import MarkdownPage
from qkv_tui.teach.stages.printed import PrintedCells, PrintedChain, Table, exact
from qkv_tui.teach.stages.replaced import softmax_runs
from qkv_tui.teach.stages.terms import adds_term, term_lines

if TYPE_CHECKING:  # the cost view's module loads on its first use
    from collections.abc import Sequence

    from qkv_tui.core.cell_edit import InputCell
    from qkv_tui.core.cost import Count, Phase
    from qkv_tui.core.engine import HeadResult
    from qkv_tui.core.scenario import Scenario


def divisor_text(heads: Sequence[HeadResult]) -> str:
    """How a formula writes the divisor of these heads' scores: √dₖ, or the number every one of them divides by
    where the scenario sets it (Embed's and Concat's line, which name no head, said √dₖ beside stages saying /1)."""
    return ask.set_divisor(heads) or "√dₖ"


class Scale(StageSpec):
    stage = Stage("scale", "Scale",
                  "Divide every score by √dₖ (Vaswani et al. §3.2.1): dot products grow with the width dₖ, and large"
                  " scores push softmax to all-or-nothing weights with tiny gradients. Dividing never changes which"
                  " key scores highest in a row, only how sharp the softmax is.")
    per_head = True
    matrices = ("scaled", "bias", "capped")
    key_columns = ("scaled", "bias", "capped")
    styles = MappingProxyType({"scaled": PaneStyle(row_max=True), "capped": PaneStyle(row_max=True)})

    def runs(self, trace: TraceContext) -> bool:
        return softmax_runs(trace)  # [linear] and [deltanet] replace it

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        sc = trace.comp.scenario
        if soft_cap.has_cap(trace, head):  # each cell divided, then each capped: a segment each
            return [Plan("scaled", sc.n, sc.m), Plan("capped", sc.n, sc.m)]
        return [Plan("scaled", sc.n, sc.m)]

    def edit_cell(self, trace: TraceContext, op: Operation) -> InputCell | None:
        """The mask where this operation applies it to a hidden cell, the cap where it caps, else the scale."""
        from qkv_tui.core.cell_edit import InputCell

        capping = self.segments(trace, op.head)[-1].target == "capped"
        masks_here = op.segment.target == "capped" or not capping  # with a soft-cap the mask comes after it
        if masks_here and not trace.comp.scenario.allow[op.row, op.col or 0]:
            return InputCell("mask", None, op.row, op.col or 0)
        if op.segment.target == "capped":  # the cap is what this operation reads besides the scaled score
            return InputCell("softcap", op.head)
        return InputCell("scale")

    def meaning(self, trace: TraceContext, head: int | None) -> str:
        sc = trace.comp.scenario
        text = self.stage.meaning
        hr = trace.comp.heads[head if head is not None else 0]
        if not hr.scale_is_default:
            text = _own_scale(hr.scale, hr.d_k, scale_origin(sc))
        text += soft_cap.meaning(list(trace.comp.heads) if head is None else [hr])
        lines = term_lines(trace.comp.heads)
        if lines is not None:
            text += lines.MEANING
        if sc.mask_kind == "sliding" and sc.window is not None:
            w = sc.window
            text += (f" The sliding window of {w} applies here: a token sees itself and the {w - 1} before it"
                     f" (0 ≤ i − j < {w}), so older keys become −∞ as well as later ones. That counts {w} keys,"
                     " the query's own included, as Hugging Face transformers and gpt-oss count their"
                     f" sliding_window; FlashAttention writes the same window as window_size = ({w - 1}, 0), and"
                     f" the Mistral paper, where position i sees i − W … i, as W = {w - 1}.")
        elif sc.mask_kind != "none":
            text += (f" The {sc.mask_kind} mask applies here: masked cells become −∞ (as PyTorch does with a"
                     " boolean mask; Hugging Face's eager attention adds finfo.min, the original BERT −10000),"
                     " so they get weight 0.")
        return text + mask_note(trace.comp.heads)  # a part that masks keys of its own (the indexer) says so

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        comp = trace.comp
        head = comp.heads[h]
        if seg.target == "capped":
            reason = None if comp.allow[row, col] else _mask_reason(trace, row, col)
            return soft_cap.capped_operation(trace, index, seg, row, col, d, reason)
        capping = loaded.capped(head) is not None  # the bias and the mask come after the cap, in its own operation
        q, k = comp.scenario.labels[row], comp.scenario.key_labels[col]
        scaled = fmt(float(head.scaled[row, col]), False, d)
        # by hand √dₖ is written down rounded (√3 ≈ 1.732) and divided by as such
        symbol = f"√{head.d_k}" if head.scale_is_default and trace.hand is None else None
        work = quotient_line(float(head.scores[row, col]), trace.integral("scores", h), head.scale, symbol,
                             head.scale == round(head.scale), scaled, d)
        extra: tuple[str, ...] = ()
        lines = term_lines([head])
        if lines is not None and comp.scenario.positions is not None and not capping:
            work, extra = lines.scaled_line(head, row, col, comp.scenario.positions, trace.integral("scores", h),
                                            symbol, d, trace.hand)
        text = f"scaled[{q},{k}] = {work}"
        details: tuple[str, ...] = ()
        value = float(head.masked[row, col] if not capping else head.scaled[row, col])
        if not comp.allow[row, col] and not capping:
            text += f", masked → {NEG_INF}"
            details = (_mask_reason(trace, row, col),)
        elif head.scale_is_default and trace.hand is None:
            details = (f"dₖ = {head.d_k}, so √dₖ = √{head.d_k} = {fmt(math.sqrt(head.d_k), False, d)}",)
        elif head.scale_is_default:
            details = (f"dₖ = {head.d_k}; by hand √{head.d_k} is rounded to {fmt(head.scale, False, d)} first",)
        else:
            tiny = head.scale < 1e-3  # fixed decimals would read 0.000000: its significant digits instead
            given = significant(head.scale, head.scale == round(head.scale), d if tiny else d + 3, tiny)
            origin = scale_origin(comp.scenario)
            details = (f"the scenario sets scale = {given}" + (f" ({origin})" if origin is not None else "")
                       + f" instead of √dₖ = √{head.d_k}",)
        operands: tuple[Ref, ...] = (Ref("scores", h, row, col),)
        if ask.term_name(head) is not None and not capping:
            operands += (Ref("bias", h, row, col),)
        return Operation(index, seg, row, col, value, operands, text, extra + details)

    def withheld(self, trace: TraceContext, op: Operation, decimals: int) -> str | None:
        """A capped cell is asked from its scaled score, not from s/c worked out: ``capped[I,love] = 5·tanh(5.774/5) = ?``."""
        if op.segment.target != "capped":
            return None
        return " = ".join(op.arithmetic.split(" = ")[:2]) + " = ?"

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        if head is None:
            raise KeyError(name)
        hr = trace.comp.heads[head]
        if loaded.capped(hr) is not None and name in ("scaled", "capped"):  # the mask is applied to the capped scores
            return hr.scaled if name == "scaled" else hr.masked
        if name == "capped":
            raise KeyError(name)
        return hr.masked if name == "scaled" else ask.term(hr)  # type: ignore[return-value]

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        h = op.head
        if soft_cap.has_cap(trace, h):
            bias = [("bias", h)] if adds_term(trace.comp.heads) else []
            return [("scores", h), ("scaled", h), *bias, ("capped", h)]
        if adds_term(trace.comp.heads):
            return [("scores", h), ("bias", h), ("scaled", h)]
        return [("scores", h), ("scaled", h)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        if soft_cap.has_cap(trace, head):
            return [("scaled", head), ("capped", head)]
        return [("scaled", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        sc = trace.comp.scenario
        hr = trace.comp.heads[head] if head is not None else None
        lines = term_lines(trace.comp.heads)
        if name == "bias" and lines is not None:
            return str(lines.title(hr))
        divisor = "" if hr is None else (f"√{hr.d_k}" if hr.scale_is_default else f"{hr.scale:g}")
        masked = "" if sc.mask_kind == "none" else f" +{sc.mask_kind} mask"
        if sc.mask_kind == "sliding":
            masked = f" +sliding mask (window {sc.window})"
        bias = " + bias" if adds_term(trace.comp.heads) else ""
        if hr is not None and loaded.capped(hr) is not None:
            return soft_cap.capped_title(trace, hr, masked) if name == "capped" else f"scaled = scores/{divisor}"
        return f"scaled = scores/{divisor}{bias}{masked}"

    def formula(self, trace: TraceContext, op: Operation) -> list[FormulaPart]:
        h = op.head
        parts = [FormulaPart(DIVIDE, f"/{divisor_text(trace.comp.heads if h is None else [trace.comp.heads[h]])}")]
        if soft_cap.has_cap(trace, h):
            parts.append(FormulaPart(DIVIDE, "→cap"))
        if adds_term(trace.comp.heads):
            parts.append(FormulaPart(BIAS, " + bias"))
        return parts

    def lights(self, seg: Segment) -> frozenset[int]:
        return frozenset({DIVIDE, BIAS})


    def markdown(self, page: MarkdownPage, head: int | None) -> list[str]:
        assert head is not None
        sc, hr, decimals = page.trace.comp.scenario, page.trace.comp.heads[head], page.decimals
        divisor = f"√{hr.d_k} = {hr.scale:.{decimals}f}" if hr.scale_is_default else f"{hr.scale:g} (set by the scenario)"
        if scale_origin(sc) is not None and not hr.scale_is_default:
            divisor = f"{hr.scale:g} (set by the scenario: {scale_origin(sc)})"
        out = [f"Divide by {divisor}." + (" Masked cells are −∞." if not sc.allow.all() else ""), ""]
        if loaded.capped(hr) is not None:
            c = soft_cap.cap_text(loaded.need_capped(hr).softcap)
            lines = term_lines([hr])
            bias = " + bias" if lines is not None else ""
            if lines is not None:
                out += lines.markdown(page, hr, head, after_step=True)
            out += [page.table("scaled", head), "", f"Soft-cap each scaled score: {c}·tanh(scaled/{c}){bias}"
                    " (the softmax's input):", "", page.table("capped", head), "", *page.worked(self.stage.key, head)]
            return out
        lines = term_lines([hr])
        if lines is not None:
            out += lines.markdown(page, hr, head, after_step=False)
        return [*out, page.table("scaled", head), "", *page.worked(self.stage.key, head)]

    def markdown_details(self, op: Operation) -> tuple[str, ...]:
        return tuple(detail for detail in op.details if "mask" in detail)

    def worksheet_tables(self, chain: PrintedChain, head: int | None) -> list[Table]:
        assert head is not None
        h, sc, page = head, chain.sc, chain.page
        hr = chain.comp.heads[h]
        scores = chain.printed[f"scores.{h}"]
        divisor = f"√{hr.d_k}" if hr.scale_is_default else exact(hr.scale)
        quotient = page.worked(scores.values / page.divisor(hr.scale))  # (n, m) from the printed scores
        added = ""
        terms: Matrix | None = None
        lines = term_lines(chain.comp.heads)
        if lines is not None:
            terms, added = lines.printed_terms(chain, h)  # (n, m) the term from its printed inputs, and its words
        if loaded.capped(hr) is not None:
            return soft_cap.worksheet_tables(chain, h, quotient, terms, added, divisor)
        logits = EXACT.logits(quotient, terms)  # (n, m) before it is printed: its whole-number flag reads this
        scaled = masked_logits(quotient, sc.allow, terms, page)  # (n, m) printed rounded, −∞ where masked
        return [Table(f"scaled.{h}", "scaled", f"scaled = scores / {divisor}{added}", "scale", h, scaled, sc.labels,
                      sc.key_labels, False, True, sc.allow,
                      whole=scores.whole and is_integral(np.where(sc.allow, logits, 0.0)))]

    def worksheet_line(self, cells: PrintedCells, table: Table, row: int, col: int, answer: str) -> str:
        h = table.head
        assert h is not None
        sc = cells.sc
        if table.name == "capped":
            return soft_cap.worksheet_line(cells, table, row, col, answer)
        q, k = sc.labels[row], sc.key_labels[col]
        own = sc.scale
        if own is None and scale_origin(sc) is not None:  # a table's own divisor (DeepSeek's YaRN: √d_qk / m²)
            own = float(ask.scenario_answer(sc, "divisor"))
        divisor = f"√{sc.heads[h].d_k}" if own is None else exact(own)
        score = cells.txt(f"scores.{h}", row, col)
        lines = term_lines(cells.comp.heads)
        line = None if lines is None or sc.heads[h].softcap is not None else lines.worksheet_line(
            cells, h, row, col, score, divisor, answer)
        return f"scaled[{q},{k}] = {score} / {divisor} = {answer}" if line is None else line


SPEC = Scale()


@counts(SPEC)
def _cost(sc: Scenario, ph: Phase) -> Count:
    """A division per score; a soft-capped head's cell also a tanh and its two divisions by c (ALiBi and the
    mask are additions, the mask worked from positions)."""
    from qkv_tui.core.cost import B, Count, fig, term

    h, capped = len(sc.heads), sum(1 for head in sc.heads if head.softcap is not None)
    cells = (ph.R, ph.A)
    other = fig(term("div", ("h", h), *cells))
    if capped:
        other += fig(term("tanh", ("capped heads", capped), *cells), term("div by c", ("capped heads", capped), *cells))
    return Count(SPEC.stage.key, SPEC.stage.name, ph.name, other=other,
                 read=fig(term("scores", ("h", h), *cells, B(ph))), written=fig(term("scaled", ("h", h), *cells, B(ph))))


def _mask_reason(trace: TraceContext, row: int, col: int) -> str:
    sc = trace.comp.scenario
    q, k = sc.labels[row], sc.key_labels[col]
    if sc.allow[row, col]:  # the scenario's mask lets it through: a part masked it (the indexer left it out)
        said = mask_reason(trace.comp.heads, row, col, q, k)
        if said is not None:
            return said
    if sc.mask_kind == "causal":
        return f'causal mask: "{k}" comes after "{q}", and a token may not look ahead; weight will be exactly 0'
    if sc.mask_kind == "sliding" and col <= row:
        return (f'sliding window of {sc.window}: "{k}" is {row - col} tokens before "{q}", out of reach;'
                " weight will be exactly 0")
    if sc.mask_kind == "sliding":
        return f'sliding window (causal): "{k}" comes after "{q}"; weight will be exactly 0'
    if sc.mask_kind == "padding":
        return f'padding mask: "{k}" is padding, never attended; weight will be exactly 0'
    return f'custom mask: "{q}" may not attend "{k}"; weight will be exactly 0'


def scale_origin(sc: Scenario) -> str | None:
    """Where a divisor other than √dₖ comes from: the file's ``scale_from``, or what a table says of the divisor it
    makes (DeepSeek's YaRN m² under [mla]: core/part_questions.scenario_says ``scale_origin``)."""
    return sc.scale_from if sc.scale_from is not None else ask.scenario_says(sc, "scale_origin")


def _own_scale(scale: float, d_k: int, origin: str | None = None) -> str:
    """The Scale stage's meaning when the scenario sets its own divisor instead of √dₖ (``origin``: where the
    scenario says it comes from, its ``scale_from``)."""
    paper = (f"Vaswani et al. (§3.2.1) divide by √dₖ = √{d_k} instead, because dot products grow with the"
             " width dₖ and large scores push softmax to all-or-nothing weights with tiny gradients.")
    if origin is not None:
        undivided = " (the scores pass through undivided)" if scale == 1 else ""
        return (f"Divide every score by {scale:g}, the scale this scenario sets ({origin}){undivided}. {paper}"
                " Any division leaves which key scores highest in a row unchanged, only how sharp the softmax is.")
    if scale == 1:
        return ("This scenario sets scale = 1: the scores pass through undivided, as several published"
                f" walkthroughs do. {paper}")
    return (f"Divide every score by {scale:g}, the scale this scenario sets. {paper} Any division leaves which"
            " key scores highest in a row unchanged, only how sharp the softmax is.")


class ScaleBack(BackwardSpec):
    """Back through what Scale did, last step first: the bias and the mask (the bias is added, so dS passes
    through it unchanged), the soft-cap (× its slope 1 − tanh²), then the division by the scale."""

    stage = Stage("dscale", "dScale",
                  "Back through Scale. The softmax read scaled + bias; adding a bias changes no slope, so the gradient"
                  " at the scaled scores is dS itself (ALiBi's bias is fixed: nothing of it is learned). The scores"
                  " were divided by the scale, so their gradient is divided by it too: dscores = dscaled / scale.")
    per_head = True
    matrices = ("dscaled", "dscores")
    styles = MappingProxyType({"dscores": PaneStyle(masked=True), "dscaled": PaneStyle(masked=True)})

    def runs(self, trace: TraceContext) -> bool:
        return has_backward(trace) and softmax_runs(trace)  # [linear] and [deltanet] have their own

    def meaning(self, trace: TraceContext, head: int | None) -> str:
        if head is None or loaded.capped(trace.comp.heads[head]) is None:
            return self.stage.meaning
        # under a cap the softmax read the capped scores: dS is their gradient, and the cap's slope comes first
        return ("Back through Scale, last step first. The softmax read capped + bias; adding a bias changes no"
                " slope, so the gradient at the capped scores is dS itself (ALiBi's bias is fixed: nothing of it"
                " is learned). The soft-cap capped = c·tanh(s/c) has slope 1 − tanh²(s/c), near 1 where |s| ≪ c"
                " and near 0 where the cap flattens a large score, so the gradient at the scaled scores is"
                " dscaled = dS·(1 − tanh(s/c)·tanh(s/c)): a capped score barely learns. The scores were divided by"
                " the scale, so their gradient is divided by it too: dscores = dscaled / scale.")

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        assert head is not None
        sc = trace.comp.scenario
        capped = [Plan("dscaled", sc.n, sc.m)] if loaded.capped(trace.comp.heads[head]) is not None else []
        return [*capped, Plan("dscores", sc.n, sc.m)]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        ab, hr, sc = grads(trace).heads[h].attend, trace.comp.heads[h], trace.comp.scenario
        q, k = sc.labels[row], sc.key_labels[col]
        masked = "" if sc.allow[row, col] else " (masked)"
        if seg.target == "dscaled":
            step = loaded.need_capped(hr)  # the cap writes the line back through its step (as differential attention's does)
            refs = (Ref("dS", h, row, col), Ref("scaled", h, row, col))
            op = formula_cell(trace, index, seg, row, col, d, float(ab.dscaled[row, col]), step.back_value,
                              [float(ab.dS[row, col]), float(hr.scaled[row, col]), *step.back_operands],
                              step.back_written, f"dscaled[{q},{k}] = dS[{q},{k}]·{step.back_symbolic.format(scaled='scaled')}",
                              refs)
            return Operation(op.index, seg, row, col, op.value, refs, op.arithmetic + masked)
        source = "dscaled" if loaded.capped(hr) is not None else "dS"
        symbol = f"√{hr.d_k}" if hr.scale_is_default and trace.hand is None else None
        value = float(ab.dscores[row, col])
        work = quotient_line(float(ab.dscaled[row, col]), False, hr.scale, symbol, hr.scale == round(hr.scale),
                             trace.formatted("dscores", h, value, d), d)
        return Operation(index, seg, row, col, value, (Ref(source, h, row, col),),
                         f"dscores[{q},{k}] = {source}[{q},{k}] / scale = {work}{masked}")

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        if head is None or not has_backward(trace):
            raise KeyError(name)
        ab = grads(trace).heads[head].attend
        return ab.dscaled if name == "dscaled" else ab.dscores

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        h = op.head
        if op.segment.target == "dscaled":
            return [("dS", h), ("scaled", h), ("dscaled", h)]
        source = "dscaled" if loaded.capped(trace.comp.heads[h or 0]) is not None else "dS"
        return [(source, h), ("dscores", h)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        hr = trace.comp.heads[head or 0]
        divisor = f"√{hr.d_k}" if hr.scale_is_default else f"{hr.scale:g}"
        if name == "dscaled":
            return "dscaled = dS·(1 − tanh²)"
        return f"dscores = {'dscaled' if loaded.capped(hr) is not None else 'dS'} / {divisor}"


BACKWARD = ScaleBack()
