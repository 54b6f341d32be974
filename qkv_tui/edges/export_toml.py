"""The TOML export: any scenario, a real model's head included, as a plain scenario file with every number.

A teacher freezes a head this way and shares one file that opens without the model. Floats are
written with ``repr`` (the shortest text that reads back to the same float64), so loading the
export gives bit-for-bit the same matrices, and the same computation.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from qkv_tui.base.values import escaped
from qkv_tui.core import part_questions as ask
from qkv_tui.core import variants
from qkv_tui.core.scenario import Matrix, Scenario
from qkv_tui.core.toml_text import number as number  # re-exported: how the CLI and the tests write a value
from qkv_tui.core.toml_text import string as string
from qkv_tui.core.toml_text import vector as vector


def matrix(array: Matrix) -> str:
    """One row per line: a diff of two exports shows which rows changed."""
    return "[\n" + "".join(f"  {vector(row)},\n" for row in array) + "]"


def labels(items: Iterable[str]) -> str:
    return "[" + ", ".join(string(t) for t in items) + "]"


def _flags(allow: np.ndarray) -> str:
    return "[\n" + "".join("  [" + ", ".join("1" if v else "0" for v in row) + "],\n" for row in allow) + "]"


def to_toml(scenario: Scenario) -> str:
    """The scenario as a scenario file that loads back to the same computation."""
    sc = scenario
    lines = [
        # escaped: a newline or a control character in the file's name would end the comment or break the TOML
        f"# Exported by qkv-tui --export toml from {escaped(sc.source)}: every number at full precision.",
        f"title = {string(sc.title)}",
    ]
    if sc.description:
        lines.append(f"description = {string(sc.description)}")
    lines += [f"tokens = {labels(sc.tokens)}", f"X = {matrix(sc.X)}"]
    if sc.scale is not None:
        lines.append(f"scale = {number(sc.scale)}")
    if sc.scale_from is not None:
        lines.append(f"scale_from = {string(sc.scale_from)}")
    caps = {h.softcap for h in sc.heads}
    one_cap = len(caps) == 1 and sc.num_heads_split is None  # one cap for every [[heads]] table: at the top level
    if one_cap and sc.heads[0].softcap is not None:
        lines.append(f"softcap = {number(sc.heads[0].softcap)}")
    if sc.mask_kind in ("none", "causal"):
        lines.append(f"mask = {string(sc.mask_kind)}")
    if sc.context_X is not None:
        lines += ["", "[context]", f"tokens = {labels(sc.key_tokens)}", f"X = {matrix(sc.context_X)}"]
    if sc.mask_kind == "sliding":
        lines += ["", "[mask]", 'kind = "sliding"', f"window = {sc.window}"]
    elif sc.mask_kind == "padding":
        lines += ["", "[mask]", 'kind = "padding"', "pad = [" + ", ".join("false" if v else "true" for v in sc.allow[0]) + "]"]
    elif sc.mask_kind == "custom":
        lines += ["", "[mask]", 'kind = "custom"', f"allow = {_flags(sc.allow)}"]
    lines += _modern_tables(sc)
    reused = ask.scenario_has(sc, "kv_given")  # [shared_kv]: the heads have W_Q alone, K and V are another layer's
    if sc.input.kind != "embedding" or sc.input.schedule:  # what X is: a frozen model head keeps saying so
        lines += ["", "[input]", f"kind = {string(sc.input.kind)}"]
        if sc.input.layer is not None:
            lines.append(f"layer = {sc.input.layer}")
        if sc.input.schedule:
            lines.append("schedule = [" + ", ".join(string(e) for e in sc.input.schedule) + "]")
    if sc.num_heads_split is not None:
        lines += ["", "[attention]", f"num_heads = {sc.num_heads_split}"]
        # K/V roles: one slice per K/V head (the first query head reading it), as num_kv_heads expects
        kv_heads = [sc.heads[[sc.kv_head(h) for h in range(len(sc.heads))].index(kv)] for kv in
                    sorted({sc.kv_head(h) for h in range(len(sc.heads))})]
        if sc.num_kv_heads is not None:
            lines.append(f"num_kv_heads = {sc.num_kv_heads}")
        for role in ("W_Q", "W_K", "W_V")[:1 if reused else 3]:
            owners = sc.heads if role == "W_Q" else kv_heads
            wide = np.concatenate([getattr(h, role) for h in owners], axis=1)
            lines.append(f"{role} = {matrix(wide)}")
        for role in ("b_Q", "b_K", "b_V"):
            owners = sc.heads if role == "b_Q" else kv_heads
            parts = [getattr(h, role) for h in owners]
            if parts[0] is not None:
                lines.append(f"{role} = {vector(np.concatenate(parts))}")
        if sc.heads[0].sink is not None:
            lines.append(f"sinks = {vector(h.sink for h in sc.heads if h.sink is not None)}")
        if sc.heads[0].softcap is not None:  # [attention] gives every head the same cap
            lines.append(f"softcap = {number(sc.heads[0].softcap)}")
        if sc.heads[0].W_G is not None:  # the output gate's wide form: a table of its own after [attention]
            lines += ["", "[gate]", f"W_G = {matrix(np.concatenate([h.W_G for h in sc.heads if h.W_G is not None], axis=1))}"]
    elif sc.mla is None:  # [mla] writes its own heads (core/variants/mla.py)
        for i, head in enumerate(sc.heads):
            lines += ["", "[[heads]]", f"name = {string(head.name)}"]
            lines += [f"{role} = {matrix(getattr(head, role))}" for role in ("W_Q", "W_K", "W_V")[:1 if reused else 3]]
            biases = [(role, getattr(head, role)) for role in ("b_Q", "b_K", "b_V")]
            lines += [f"{role} = {vector(b)}" for role, b in biases if b is not None]
            if head.sink is not None:
                lines.append(f"sink = {number(head.sink)}")
            if sc.kv_head(i) != i:  # a real model's K/V head index (docs/real-models.md)
                lines.append(f"kv_head = {sc.kv_head(i)}")
            if not one_cap and head.softcap is not None:
                lines.append(f"softcap = {number(head.softcap)}")
            if head.W_G is not None:
                lines.append(f"W_G = {matrix(head.W_G)}")
    if sc.W_O is not None:
        lines += ["", "[output]", f"W_O = {matrix(sc.W_O)}"]
        if sc.b_O is not None:
            lines.append(f"b_O = {vector(sc.b_O)}")
    return "\n".join(lines) + "\n"


def _modern_tables(sc: Scenario) -> list[str]:
    """The variant tables (docs/scenario-format.md) the scenario has, each written by its own module."""
    lines: list[str] = []
    for table in variants.TABLES:
        value = table.of(sc)
        if value is not None:
            lines += ["", *table.write(value)]
    return lines
