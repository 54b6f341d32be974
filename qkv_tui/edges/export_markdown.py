"""The Markdown export: a worked-example page, every step with its numbers."""

from __future__ import annotations

from qkv_tui.core import part_questions as ask
from qkv_tui.core.engine import Computation
from qkv_tui.core.fmt import cell_len, fmt, is_integral
from qkv_tui.core.scenario import Matrix
from qkv_tui.teach.stages.common import StageSpec
from qkv_tui.teach.trace import Trace

WORKED_ROWS = 8  # beyond this many query tokens, the page works only the first rows by hand


def _cell(label: str) -> str:
    """A token label inside a Markdown table: a "|" would end the cell, and an empty one would vanish."""
    return label.replace("|", "\\|") if label.strip() else "*(empty)*"


def md_table(array: Matrix, rows: list[str], cols: list[str], corner: str = "", integral: bool | None = None,
             decimals: int = 3) -> str:
    """A table padded so the Markdown source reads as aligned columns; numbers right-aligned."""
    integral = is_integral(array) if integral is None else integral
    header = [corner or " ", *(_cell(c) for c in cols)]
    body = [[f"**{_cell(label)}**", *(fmt(float(v), integral, decimals) for v in row)]
            for label, row in zip(rows, array)]
    widths = [max(cell_len(r[j]) for r in [header, *body]) for j in range(len(header))]
    widths = [max(w, 3) for w in widths]

    def line(cells: list[str]) -> str:
        padded = [c + " " * (widths[0] - cell_len(c)) if j == 0 else " " * (widths[j] - cell_len(c)) + c
                  for j, c in enumerate(cells)]
        return "| " + " | ".join(padded) + " |"

    rule = "| " + " | ".join([":" + "-" * (widths[0] - 1), *("-" * (w - 1) + ":" for w in widths[1:])]) + " |"
    return "\n".join([line(header), rule, *(line(r) for r in body)])


def to_markdown(comp: Computation, decimals: int = 3) -> str:
    """The page; ``decimals`` as the app's +/- keys set them (the seed's 3 by default)."""
    trace = Trace(comp)
    sc = comp.scenario
    tokens, keys = list(sc.labels), list(sc.key_labels)
    multi = len(comp.heads) > 1
    out: list[str] = [f"# {sc.title}", ""]
    if sc.description:
        out += [sc.description, ""]
    if sc.input.schedule:  # a real model's layers, the one shown marked
        out += [sc.input.schedule_text, ""]
    words, formula = ask.lead(sc)
    what = f"{words}**{formula}**," if formula else words
    out += [
        f"{what} worked cell by cell.",
        "",
        f"- Query tokens ({sc.n}): {', '.join(tokens)}",
    ]
    if sc.is_cross:
        out.append(f"- Key/Value tokens from the context ({sc.m}): {', '.join(keys)} (cross-attention)")
    else:
        out.append("- Keys and Values come from the same tokens (self-attention)")
    out.append(f"- Mask: {sc.mask_kind}; heads: {len(comp.heads)}; d_model = {sc.X.shape[1]}")
    out += ["", "Every line of arithmetic below can be redone on a calculator from the numbers it shows"
            f" (within one unit of the last digit); where {decimals} decimals would not be enough, operands carry more.", ""]

    page = _Page(trace, decimals)
    numbers = {spec.stage.key: number for number, spec in enumerate(trace.specs, 1)}
    def section(spec: StageSpec, head: int | None) -> None:
        key = spec.stage.key
        level = "###" if head is not None and multi else "##"
        # the head's own words: gated.toml's sink head and its head without a sink read differently
        out.extend([f"{level} {numbers[key]} · {trace.stage(key).name}", "", trace.meaning(key, head), ""])
        out.extend(spec.markdown(page, head))

    # as the trace walks them: a run of per-head stages head after head (Project … Mix of head 1, then of head 2)
    for per_head, run in trace.stage_groups():
        if not per_head:
            for spec in run:
                section(spec, None)
            continue
        for spec in run:
            out.extend(spec.markdown_before(page))
        for h, head in enumerate(comp.heads):
            if multi:
                out += [f"## {head.name}", ""]
            for spec in run:
                section(spec, h)
    out += decode_section(comp, decimals)
    out += [
        "## Notes",
        "",
        "- Attention weights are not the model's thoughts: a useful diagnostic, one lens, not a mind-read.",
        "- Q is not stored in the KV cache: only past Keys and Values are reused; each new token brings a fresh Query.",
        "- Self- vs cross-attention: the same formula; in cross-attention Queries come from one sequence and"
        " Keys/Values from another.",
        "- These numbers are pedagogical: real embeddings and weights are learned floats; the steps stay the same.",
        "",
    ]
    return "\n".join(out)


class _Page:
    """What a stage's section is written with (teach/stages/markdown.py): the trace's tables, its worked lines."""

    def __init__(self, trace: Trace, decimals: int) -> None:
        self._trace = trace
        self._decimals = decimals
        # found by key: a search per stage would be 300² for 300 heads
        self._runs = {(r.stage, r.head): r for r in trace.runs}

    @property
    def trace(self) -> Trace:
        return self._trace

    @property
    def decimals(self) -> int:
        return self._decimals

    def table(self, name: str, head: int | None, corner: str | None = None) -> str:
        trace = self._trace
        array = trace.matrix(name, head)
        rows = [trace.row_label(name, i) for i in range(array.shape[0])]
        cols = [trace.col_label(name, j) for j in range(array.shape[1])]
        return md_table(array, rows, cols, corner or name, trace.integral(name, head), self._decimals)

    def array(self, array: Matrix, rows: list[str], cols: list[str], corner: str, integral: bool) -> str:
        return md_table(array, rows, cols, corner, integral, self._decimals)

    def worked(self, stage: str, head: int | None) -> list[str]:
        trace = self._trace
        run = self._runs[(stage, head)]
        spec = trace.spec(stage)
        lines = []
        for i in worked_ops(trace, run.start, run.stop):
            op = trace.op(i, self._decimals)
            lines.append(f"    {op.arithmetic}")
            lines += [f"      {detail}" for detail in spec.markdown_details(op)]
        if trace.comp.scenario.n > WORKED_ROWS:
            lines.append(f"\n(Worked by hand for the first {WORKED_ROWS} rows; the tables hold every value.)")
        lines.append("")
        return lines


def worked_ops(trace: Trace, start: int, stop: int) -> list[int]:
    """The operations of start..stop-1 that the page works: those of each matrix's first WORKED_ROWS rows.

    Only these are built (the tables hold every value): a 512-token head's Softmax has 262,144 operations,
    of which the page shows 4,096.
    """
    out: list[int] = []
    i = start
    while i < stop:
        seg = trace.segment_at(i)
        per_row = 1 if seg.per_row else seg.cols
        out += range(i, min(seg.start + min(seg.rows, WORKED_ROWS) * per_row, stop))
        i = seg.stop
    return out


def decode_section(comp: Computation, decimals: int = 3) -> list[str]:
    """The production sections: prefill and decode over a paged KV cache, then FlashAttention's tiles."""
    from qkv_tui.edges.export_production import production_sections

    return production_sections(comp, decimals)
