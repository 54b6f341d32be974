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
from qkv_tui.edges.faces import faces, placed


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
    lines += [line for f in faces() if f.toml_top is not None for line in f.toml_top(sc)]
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
        lines += [line for f in faces() if f.toml_attention is not None for line in f.toml_attention(sc)]
    elif not any(f.toml_writes_heads(sc) for f in faces() if f.toml_writes_heads is not None):
        for i in range(len(sc.heads)):
            lines += ["", "[[heads]]", *_head(sc, i, reused)]
    if sc.W_O is not None:
        lines += ["", "[output]", f"W_O = {matrix(sc.W_O)}"]
        if sc.b_O is not None:
            lines.append(f"b_O = {vector(sc.b_O)}")
    return "\n".join(lines) + "\n"


def _head(sc: Scenario, i: int, reused: bool) -> list[str]:
    """The lines of head i's [[heads]] table after its header, each variant's (edges/faces/) at its place; ``reused``:
    its K and V are another layer's, so it gives W_Q alone."""
    head = sc.heads[i]
    own = [("name", [f"name = {string(head.name)}"])]
    own += [(role, [f"{role} = {matrix(getattr(head, role))}"]) for role in ("W_Q", "W_K", "W_V")[:1 if reused else 3]]
    own += [(role, [] if getattr(head, role) is None else [f"{role} = {vector(getattr(head, role))}"])
            for role in ("b_Q", "b_K", "b_V")]
    # a real model's K/V head index (docs/real-models.md)
    own.append(("kv_head", [f"kv_head = {sc.kv_head(i)}"] if sc.kv_head(i) != i else []))
    extra = [(f.toml_head_at, [("", f.toml_head(sc, i))]) for f in faces() if f.toml_head is not None]
    return [line for _, lines in placed(own, extra) for line in lines]


def _modern_tables(sc: Scenario) -> list[str]:
    """The variant tables (docs/scenario-format.md) the scenario has, each written by its own module."""
    lines: list[str] = []
    for table in variants.TABLES:
        value = table.of(sc)
        if value is not None:
            lines += ["", *table.write(value)]
    return lines
