"""The Markdown export: a worked-example page, every step with its numbers."""

from __future__ import annotations

from qkv_tui.core.engine import Computation
from qkv_tui.core.fmt import fmt, is_integral, vector
from qkv_tui.core.scenario import Matrix
from qkv_tui.teach.trace import STAGES, Trace

WORKED_ROWS = 8  # beyond this many query tokens, the page works only the first rows by hand


def _cell(label: str) -> str:
    """A token label inside a Markdown table: a "|" would end the cell."""
    return label.replace("|", "\\|")


def md_table(array: Matrix, rows: list[str], cols: list[str], corner: str = "", integral: bool | None = None) -> str:
    integral = is_integral(array) if integral is None else integral
    rows, cols = [_cell(r) for r in rows], [_cell(c) for c in cols]
    head = "| " + " | ".join([corner or " ", *cols]) + " |"
    rule = "|" + "---|" * (len(cols) + 1)
    body = [
        "| " + " | ".join([f"**{label}**", *(fmt(float(v), integral) for v in row)]) + " |"
        for label, row in zip(rows, array)
    ]
    return "\n".join([head, rule, *body])


def to_markdown(comp: Computation) -> str:
    trace = Trace(comp)
    sc = comp.scenario
    tokens, keys = list(sc.tokens), list(sc.key_tokens)
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
    out.append("")

    def stage_heading(key: str, head_name: str | None = None) -> None:
        number = trace.stage_keys.index(key) + 1
        suffix = f" ({head_name})" if head_name and len(comp.heads) > 1 else ""
        out.extend([f"## {number} · {STAGES[key].name}{suffix}", "", STAGES[key].meaning, ""])

    def worked(stage: str, head: int | None) -> None:
        run = next(r for r in trace.runs if r.stage == stage and r.head == head)
        limit_rows = min(sc.n, WORKED_ROWS)
        lines = []
        for i in range(run.start, run.stop):
            op = trace.op(i)
            if op.segment.target not in ("K", "V") and op.row >= limit_rows:
                continue
            if op.segment.target in ("K", "V") and op.row >= min(sc.m, WORKED_ROWS):
                continue
            lines.append(f"    {op.arithmetic}")
            if stage == "softmax" and op.col == 0:
                lines.extend(f"      {d}" for d in op.details[:2])
            if stage == "softmax" and len(op.details) > 2:
                lines.append(f"      {op.details[2]}")
            if stage == "scale" and op.details and "mask" in op.details[0]:
                lines.append(f"      {op.details[0]}")
        out.extend(lines)
        if sc.n > WORKED_ROWS:
            out.append(f"\n(Worked by hand for the first {WORKED_ROWS} rows; the tables hold every value.)")
        out.append("")

    stage_heading("embed")
    out += [md_table(sc.X, tokens, [str(j) for j in range(sc.X.shape[1])], "X"), ""]
    if sc.is_cross:
        assert sc.context_X is not None
        out += ["The context's embeddings (Keys and Values are built from these):", "",
                md_table(sc.context_X, keys, [str(j) for j in range(sc.context_X.shape[1])], "X_ctx"), ""]
    for h, head in enumerate(comp.heads):
        if len(comp.heads) > 1:
            out += [f"# {head.name}", ""]
        stage_heading("project", head.name)
        for role, array, labels in (("Q", head.Q, tokens), ("K", head.K, keys), ("V", head.V, keys)):
            weight = getattr(head, f"W_{role}")
            out += [f"W_{role}:", "", md_table(weight, [str(i) for i in range(weight.shape[0])],
                                               [str(j) for j in range(weight.shape[1])], f"W_{role}"), ""]
            out += [f"{role} = {'X_ctx' if sc.is_cross and role != 'Q' else 'X'}·W_{role}:", "",
                    md_table(array, labels, [str(j) for j in range(array.shape[1])], role), ""]
        worked("project", h)
        stage_heading("score", head.name)
        out += [md_table(head.scores, tokens, keys, "scores"), ""]
        worked("score", h)
        stage_heading("scale", head.name)
        divisor = f"√{head.d_k} ≈ {head.scale:.3f}" if head.scale_is_default else f"{head.scale:g} (set by the scenario)"
        out += [f"Divide by {divisor}." + (" Masked cells are −∞." if not sc.allow.all() else ""), "",
                md_table(head.masked, tokens, keys, "scaled"), ""]
        worked("scale", h)
        stage_heading("softmax", head.name)
        out += [md_table(head.weights, tokens, keys, "weights", integral=False), "",
                "Every row sums to 1" + (" and masked weights are exactly 0." if not sc.allow.all() else "."), ""]
        worked("softmax", h)
        stage_heading("mix", head.name)
        out += [md_table(head.output, tokens, [str(j) for j in range(head.d_v)], "output"), ""]
        worked("mix", h)
    if "concat" in trace.stage_keys:
        stage_heading("concat")
        out += [md_table(comp.concat, tokens, [str(j) for j in range(comp.concat.shape[1])], "concat"), ""]
    if comp.W_O is not None:
        stage_heading("wo")
        out += [md_table(comp.W_O, [str(i) for i in range(comp.W_O.shape[0])],
                         [str(j) for j in range(comp.W_O.shape[1])], "W_O"), "",
                md_table(comp.output, tokens, [str(j) for j in range(comp.output.shape[1])], "final"), ""]
        worked("wo", None)
    out += decode_section(comp)
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


def decode_section(comp: Computation) -> list[str]:
    """Generation with a KV cache, step by step, each output checked against full attention."""
    from qkv_tui.teach.decode import decode

    dec = decode(comp)
    sc = comp.scenario
    n = min(sc.n, WORKED_ROWS)
    kind = "cross" if sc.is_cross else "causal"
    out = ["## KV-cache decode", "",
           "Generation replayed token by token. Each new token's Query is computed fresh; "
           + ("the context's Keys and Values are computed once, at the first step, and reused at every step."
              if sc.is_cross else "its Key and Value rows are appended to the cache and earlier rows are reused.")
           + f" Decoding is {'cross-attention' if sc.is_cross else 'causal'} whatever mask the scenario declares,"
           f" so each step's output must equal that row of full {kind} attention.", ""]

    def vec(values: Matrix, exact: bool = True) -> str:
        return vector(values, exact and is_integral(values))  # weights and outputs always get decimals

    for h, steps in enumerate(dec.steps):
        if len(comp.heads) > 1:
            out += [f"### {comp.heads[h].name}", ""]
        for step in steps[:n]:
            token = sc.tokens[step.t]
            out.append(f"- step {step.t + 1}, generating **{token}**: q = {vec(step.q)};"
                       f" K/V rows computed {step.kv_computed}, reused {step.kv_reused};"
                       f" scores {vec(step.scores)}, weights {vec(step.weights, False)};"
                       f" out = {vec(step.output, False)} {'=' if step.matches else '≠'}"
                       f" full {kind} row {vec(step.reference, False)}"
                       f" {'✓' if step.matches else '✗'}")
        last = sc.n - 1
        computed, reused = dec.rows_computed(h, last), dec.rows_reused(h, last)
        out += ["", f"Key/Value rows computed: {computed}, reused: {reused}; without a cache:"
                f" {dec.rows_without_cache(last)} computed.", ""]
    if sc.n > n:
        out += [f"(The first {n} steps are listed; every one of the {sc.n} was checked.)", ""]
    return out
