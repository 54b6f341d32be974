"""The Markdown export: a worked-example page, every step with its numbers."""

from __future__ import annotations

from qkv_tui.core.engine import Computation
from qkv_tui.core.fmt import cell_len, fmt, is_integral
from qkv_tui.core.scenario import Matrix
from qkv_tui.teach.trace import SAME_WEIGHT, Trace

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
    out += [
        "Scaled dot-product attention, **softmax(QKᵀ/√dₖ)V**, worked cell by cell.",
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

    def table(name: str, head: int | None, rows: list[str], cols: list[str], corner: str) -> str:
        return md_table(trace.matrix(name, head), rows, cols, corner, trace.integral(name, head), decimals)

    def numbered(name: str, head: int | None) -> list[str]:
        array = trace.matrix(name, head)
        return [trace.row_label(name, i) for i in range(array.shape[0])]

    def columns(name: str, head: int | None) -> list[str]:
        array = trace.matrix(name, head)
        return [trace.col_label(name, j) for j in range(array.shape[1])]

    meanings: dict[str, str] = {}  # each stage's words once, not once per head (they look at every head)

    def stage_heading(key: str, head: bool = False) -> None:
        number = trace.stage_keys.index(key) + 1
        level = "###" if head and multi else "##"
        if key not in meanings:
            meanings[key] = trace.meaning(key, None)
        out.extend([f"{level} {number} · {trace.stage(key).name}", "", meanings[key], ""])

    runs = {(r.stage, r.head): r for r in trace.runs}  # found by key: a search per stage would be 300² for 300 heads

    def worked(stage: str, head: int | None) -> None:
        run = runs[(stage, head)]
        lines = []
        for i in worked_ops(trace, run.start, run.stop):
            op = trace.op(i, decimals)
            lines.append(f"    {op.arithmetic}")
            for detail in op.details:
                if stage == "softmax" and op.col != 0:  # the row's lines once; then each weight the seed's way
                    _, sep, same = detail.partition(f"; {SAME_WEIGHT}")
                    if not sep:
                        continue
                    detail = f"{SAME_WEIGHT}{same}"
                if stage == "mix" and op.col != op.segment.cols - 1:
                    continue  # the vector form closes the row it sums up
                if stage == "scale" and "mask" not in detail:
                    continue
                lines.append(f"      {detail}")
        out.extend(lines)
        if sc.n > WORKED_ROWS:
            out.append(f"\n(Worked by hand for the first {WORKED_ROWS} rows; the tables hold every value.)")
        out.append("")

    stage_heading("embed")
    out += [table("X", None, tokens, columns("X", None), "X"), ""]
    if sc.is_cross:
        out += ["The context's embeddings (Keys and Values are built from these):", "",
                table("context_X", None, keys, columns("context_X", None), "X_ctx"), ""]
    if comp.norm is not None:  # X is normalised before the projections
        stage_heading("norm")
        out += [f"X̂ = {sc.norm.kind if sc.norm else ''}norm(X):", "",
                table("X_norm", None, tokens, columns("X_norm", None), "X̂"), ""]
        worked("norm", None)
    x_in = "X̂" if comp.norm is not None else "X"
    if trace.split:
        out += [f"The scenario gives one wide matrix per role, cut into {len(comp.heads)} equal column slices:"
                " each head takes the columns labelled with its number (h2:0 is head 2's column 0).", ""]
        for role in (r for r in ("W_Q", "W_K", "W_V") if trace.is_wide(r)):
            name = f"{role}_wide"
            out += [table(name, None, numbered(name, None), columns(name, None), role), ""]
    for h, head in enumerate(comp.heads):
        if multi:
            out += [f"## {head.name}", ""]
        stage_heading("project", True)
        for role, labels in (("Q", tokens), ("K", keys), ("V", keys)):
            weight = f"W_{role}"
            bias = " + b_" + role if getattr(head, f"b_{role}") is not None else ""
            shared = role != "Q" and trace.kv_owner[h] != h
            out += [f"{weight}:", "", table(weight, h, numbered(weight, h), columns(weight, h), weight), ""]
            out += [f"{role} = {'X_ctx' if sc.is_cross and role != 'Q' else x_in}·{weight}{bias}"
                    + (f" (K/V head {head.kv_head + 1}, computed by {comp.heads[trace.kv_owner[h]].name}):" if shared
                       else ":"), "",
                    table(role, h, labels, columns(role, h), role), ""]
        worked("project", h)
        if sc.rope is not None:
            stage_heading("rotate", True)
            pairs = " ".join(f"({a},{b})" for a, b in sc.rope.pairs(head.d_k))
            out += [f"Pairs ({sc.rope.layout} layout): {pairs}; positions {', '.join(map(str, sc.rope.positions))}.", "",
                    table("Q_rot", h, tokens, columns("Q_rot", h), "Q'"), "",
                    table("K_rot", h, keys, columns("K_rot", h), "K'"), ""]
            worked("rotate", h)
        stage_heading("score", True)
        out += [table("scores", h, tokens, keys, "scores"), ""]
        worked("score", h)
        stage_heading("scale", True)
        divisor = f"√{head.d_k} = {head.scale:.{decimals}f}" if head.scale_is_default else f"{head.scale:g} (set by the scenario)"
        out += [f"Divide by {divisor}." + (" Masked cells are −∞." if not sc.allow.all() else ""), ""]
        if head.bias is not None:
            out += [f"ALiBi bias, slope {head.slope:g} · (j − i):", "", table("bias", h, tokens, keys, "bias"), "",
                    "scaled + bias (the softmax's input):", ""]
        out += [table("scaled", h, tokens, keys, "scaled"), ""]
        worked("scale", h)
        stage_heading("softmax", True)
        out += [table("weights", h, tokens, keys, "weights"), ""]
        if head.sink is not None:
            out += [f"With the sink (logit {head.sink:g}) each row sums to less than 1:", "",
                    md_table(trace.sink_panel(h), tokens, ["logit", "exp", "Σw"], "sink", False, decimals), ""]
        else:
            out += ["Every row sums to 1" + (" and masked weights are exactly 0." if not sc.allow.all() else "."), ""]
        worked("softmax", h)
        stage_heading("mix", True)
        out += [table("output", h, tokens, columns("output", h), "output"), ""]
        worked("mix", h)
    if "concat" in trace.stage_keys:
        stage_heading("concat")
        out += [table("concat", None, tokens, columns("concat", None), "concat"), ""]
    if comp.W_O is not None:
        stage_heading("wo")
        out += [table("W_O", None, numbered("W_O", None), columns("W_O", None), "W_O"), "",
                table("final", None, tokens, columns("final", None), "final"), ""]
        worked("wo", None)
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
