"""A worksheet as Markdown: the rules, the inputs, a section per stage (and head), the answer key."""

from __future__ import annotations

import numpy as np

from qkv_tui.edges.worksheet_chain import Table, exact
from qkv_tui.edges.worksheet_content import BLANK, WorksheetContent
from qkv_tui.teach.stages.rotate import rope_notes


def _md(label: str) -> str:
    return label.replace("|", "\\|")


def _table_md(ws: WorksheetContent, table: Table) -> str:
    head = "| " + " | ".join([_md(table.name), *(_md(c) for c in table.cols)]) + " |"
    rule = "|" + "---|" * (len(table.cols) + 1)
    body = []
    for i, label in enumerate(table.rows):
        cells = []
        for j in range(len(table.cols)):
            blank = ws.blank_at(table.key, i, j)
            cells.append(f"({blank.number}) {BLANK}" if blank is not None else table.text(i, j, ws.decimals))
        body.append("| " + " | ".join([f"**{_md(label)}**", *cells]) + " |")
    return "\n".join([head, rule, *body])


def _suffix(ws: WorksheetContent, table: Table) -> str:
    """`` (head 2)`` on a head's own table when there are several; K/V tables of shared heads name their readers."""
    heads = ws.comp.heads
    if table.readers or table.head is None or len(heads) == 1 or "K/V head" in table.heading:
        return ""
    return f" ({heads[table.head].name})"


def _rules(ws: WorksheetContent) -> list[str]:
    """The bullets under the title: how to work the page, and each variant stage it has."""
    comp = ws.comp
    sc = comp.scenario
    d = ws.decimals
    out = [
        f"- Work from the numbers printed on this page, in order: every printed number was computed from the"
        f" printed numbers before it and rounded to {d} decimals, so your answer should match within one unit"
        f" of the last decimal.",
    ]
    if sc.norm is not None:
        if sc.norm.kind == "rms":
            out.append("- Norm (RMSNorm), row by row: ms = the mean of the row's squares; each cell"
                       " X̂ = x / √(ms + eps)·γ.")
        else:
            out.append("- Norm (LayerNorm), row by row: mean, then var = the mean of (x − mean)²; each cell"
                       " X̂ = (x − mean) / √(var + eps)·γ + β.")
        reads = ("Q is computed from X̂ (K and V from the context's X, as given)" if sc.is_cross
                 else "Q, K and V are computed from X̂")
        out.append(f"  eps = {float(sc.norm.eps)!r}. {reads}.")
    if any(h.b_Q is not None or h.b_K is not None or h.b_V is not None for h in sc.heads) or sc.b_O is not None:
        out.append("- Biases: a projection with a bias vector b adds b[j] to every cell of its column j"
                   " (Q = X·W_Q + b_Q).")
    out += [line for spec in ws.specs.values() for line in spec.worksheet_rules(comp)]
    if sc.rope is not None:
        shown = ", ".join(f"({a}, {b})" for a, b in sc.rope.pairs(comp.heads[0].d_k))
        places = max(t.places or d for t in ws.tables if t.name == "cos/sin")
        guard = (f" (printed to {places} decimals: with fewer, the turned values could miss the page's last digit)"
                 if places > d else "")
        out.append(f"- Rotate (RoPE, {sc.rope.layout} layout): Q and K (never V) turn in pairs of dimensions"
                   f" {shown}; pair i of a token at position p turns by the angle p·θᵢ, θᵢ = {_base(sc.rope.base)}^(−2i/dₖ):"
                   f" a' = a·cos − b·sin, b' = a·sin + b·cos, with cos and sin read from the table{guard}."
                   " The scores then use Q' and K'.")
        out.extend(rope_notes(sc.rope, comp.heads[0].d_k))
    if sc.linear is None and sc.deltanet is None:  # those keep a state instead (their stages' own rules)
        out.append("- Softmax, row by row: subtract the row's largest scaled score, take e to each difference, divide each"
                   " by their sum. Masked cells are −∞ and get weight 0.")
    if sc.alibi is not None:
        out.append("- ALiBi: each head adds slope·(j − i) to its scaled scores, j the key's position and i the"
                   " query's: the further back the key, the lower its score.")
    if any(h.sink is not None for h in sc.heads):
        out.append("- Attention sink: a head with a sink adds one more term, e^(sink − m), to each row's sum, where m"
                   " is the larger of the row's largest scaled score and the sink; nothing gets that share, so the"
                   " row's weights sum to less than 1.")
    if sc.num_kv_heads is not None or ws.kv_owners != list(range(len(sc.heads))):
        out.append("- Grouped K/V heads: query heads that share a K/V head read the same K and V, printed once in"
                   " the section of the first head that reads them.")
    out.append(
        f"- Query tokens: {', '.join(sc.tokens)}"
        + (f"; key/value tokens from the context: {', '.join(sc.key_tokens)}" if sc.is_cross else "")
        + f"; mask: {sc.mask_kind}; heads: {len(comp.heads)}; blanks: {len(ws.blanks)}."
    )
    return out


def render(ws: WorksheetContent) -> str:
    comp = ws.comp
    sc = comp.scenario
    out = [f"# Worksheet: {sc.title}", ""]
    if sc.description:
        out += [sc.description, ""]
    what = ("Linear attention" if sc.linear is not None else "The gated delta rule" if sc.deltanet is not None
            else "Scaled dot-product attention, **softmax(QKᵀ/√dₖ)V**,")
    out += [f"{what} by hand. Fill in each numbered blank.", ""]
    out += _rules(ws)
    out += ["", "## Inputs", ""]
    for table in ws.tables:
        if table.given:
            out += [f"{table.heading}{_suffix(ws, table)}:", "", _table_md(ws, table), ""]
    if not sc.allow.all():
        mask = Table("mask", "mask", "", "scale", None, sc.allow.astype(np.float64), sc.labels, sc.key_labels, True, False)
        out += ["Mask (1 = the query may attend the key, 0 = masked):", "", _table_md(ws, mask), ""]
    multi = len(comp.heads) > 1
    for head in comp.heads:
        if head.linear is not None or head.deltanet is not None:
            continue  # no scores are scaled
        divisor = f"√{head.d_k} (dₖ = {head.d_k})" if head.scale_is_default else f"{exact(head.scale)} (set by the scenario)"
        out.append(f"- Scale{f' ({head.name})' if multi else ''}: divide every score by {divisor}.")
    out.append("")
    last_section = ""
    for table in ws.tables:
        if table.given:
            continue
        suffix = f" ({comp.heads[table.head].name})" if multi and table.head is not None else ""
        spec = ws.specs[table.stage]  # the section is named for the stage whose table it is
        section = f"## {spec.stage.name}{suffix}"
        if section != last_section:
            out += [section, ""]
            last_section = section
            if table.head is not None:
                out += spec.worksheet_note(comp, ws.kv_owners, table.head)
        out += [f"{table.heading}:", "", _table_md(ws, table), ""]
    out += ["## Answer key", ""]
    if not ws.blanks:
        out += ["(No blanks on this page.)", ""]
    out += [f"- ({b.number}) {b.working}" for b in ws.blanks]
    out.append("")
    return "\n".join(out)


def _base(base: float) -> str:
    return str(int(base)) if base == round(base) and abs(base) < 1e15 else f"{base:g}"
