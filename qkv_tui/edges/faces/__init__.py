"""The first variants' faces in the exports, one module here per variant (rope.py, alibi.py, ...).

Each module holds what its variant writes into the JSON and TOML exports, the JSON's gradients and the worksheet
(its rules, tables and SGD step), as one :class:`ExportFace` named ``FACE``; the exports walk :func:`faces` and never
name a variant. A face's fields go
in at a fixed place among the export's own (``before`` or ``after`` one of its keys, or at the end), the faces at
one place in the order ``--check`` names their features (core/variants FEATURES), so every document keeps its
documented key order.

A variant registers by having its module here: the exports find the modules of this package, so adding one
touches no export. (The parts registered since [differential] name their JSON face on their Table instead.)
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from qkv_tui.core.variants import FEATURES

Fields = list[tuple[str, Any]]


@dataclass(frozen=True)
class At:
    """Where a face's fields go among an export's own: ``before`` or ``after`` the key named, or (neither) at the end."""

    before: str | None = None
    after: str | None = None


END = At()


@dataclass(frozen=True)
class ExportFace:
    """One variant's fields in the exports. Each callable gives the fields with null values where the scenario
    (or head) has none of the variant, as the documents always hold every field (docs/reference.md)."""

    feature: object  # its entry in core/variants FEATURES: orders the faces that share a place
    head: Callable[[Any], Fields] | None = None  # (HeadResult) -> its fields in a head's entry of "heads"
    head_at: At = END
    # (scenario, norm, write_fields) -> its fields at the document's top level
    document: Callable[[Any, Any, Any], Fields] | None = None
    document_at: At = END
    # (scenario, Gradients, write_fields) -> its fields in "grad"
    grad: Callable[[Any, Any, Any], Fields] | None = None
    grad_at: At = END
    # (scenario, Gradients, head index) -> its fields in one entry of "grad"'s "heads": a key the export already
    # writes is replaced in place (what the head's weight gradients are under the variant), any other goes at grad_head_at
    grad_head: Callable[[Any, Any, int], Fields] | None = None
    grad_head_at: At = END
    # the TOML export (a scenario file that loads back to the same computation), each -> its lines:
    toml_top: Callable[[Any], list[str]] | None = None  # (scenario) at the top level, after the scale's keys
    toml_attention: Callable[[Any], list[str]] | None = None  # (scenario) in [attention], after its weights
    toml_head: Callable[[Any, int], list[str]] | None = None  # (scenario, head index) in that head's [[heads]]
    toml_head_at: At = END
    toml_writes_heads: Callable[[Any], bool] | None = None  # (scenario) its table writes the heads itself
    # the worksheet's SGD step (edges/worksheet/sgd.py): each [backward] train name the variant gives, with the
    # (weight's table key, its gradient's table key) pairs that print it, the first found on the page used; a
    # query head's own ({h} its index), before the head's name ``sgd_head_at`` names, or the whole layer's
    sgd_head: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    sgd_head_at: At = END
    sgd_layer: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    # a weight whose new value is no cell-by-cell table of the pairs above (a head's sink, one column of a table
    # of every head's): (train name, (tables by key, head, lr, decimals) -> the head's table or None,
    # (its table's key) -> (weight key, gradient key, the weight's column) or None where the key is not its)
    sgd_own: tuple[str, Callable[[Any, int, float, int], Any], Callable[[str], Any]] | None = None
    # (scenario) -> the worksheet's rule lines for the variant read backwards (edges/worksheet/backward/tables.py),
    # at a place among the rules of the backward ("head", "W_O", "kv", "norm"); the backward walks the faces in the
    # opposite order, as it walks the forward's stages
    sheet_back_rules: Callable[[Any], list[str]] | None = None
    # (the worksheet's content, whether the sheet asks about a stage by its key) -> the variant's rule lines of the
    # forward, at a place among the page's rules (edges/worksheet/sheet.py: "norm", "biases", "stages", "softmax",
    # "kv", "left_out", "asked")
    sheet_rules: Callable[[Any, Callable[[str], bool]], list[str]] | None = None
    sheet_rules_at: At = At(after="softmax")
    sheet_back_rules_at: At = At(after="W_O")
    # (add a table, the printed chain, head index, the head's printed HeadResult, its HeadGrad) -> adds the variant's
    # tables of a softmax head read backwards, after dS (edges/worksheet/backward/tables.py's Add takes key, name,
    # heading, values, rows, cols, head, allow)
    sheet_back_softmax: Callable[[Any, Any, int, Any, Any], None] | None = None
    # (add a table, the printed chain, head index, HeadResult, HeadGrad, the name of what the projections read) ->
    # adds the variant's tables between Concat and the head's own output, first in the head's part
    sheet_back_out: Callable[[Any, Any, int, Any, Any, str], None] | None = None
    # (scenario) -> the name of the variant's own path into X̂ for dX̂'s heading, or None where it has none
    sheet_back_path: Callable[[Any], str | None] | None = None
    # (its backward table kinds, the app's backward stage that computes them), for --stages (edges/worksheet/select.py)
    sheet_back_stages: tuple[tuple[tuple[str, ...], str], ...] = ()
    # ((scenario) -> whether the page prints roots of the variant's norm, (scenario, the printed computation) ->
    # each root as (name, spread, root, eps, row labels)): the roots the backward divides by
    sheet_roots: tuple[Callable[[Any], bool], Callable[[Any, Any], list[Any]]] | None = None
    # (add a table, the chain, the printed computation, head index, whether it owns its K/V head, its HeadGrad) ->
    # adds the tables of a norm of the head's Q and K read backwards, after the turn back, before the projections
    sheet_back_normed: Callable[[Any, Any, Any, int, bool, Any], None] | None = None
    # (add a table, the chain, Gradients) -> adds the variant's gradients summed over the heads, after the K/V sums
    sheet_back_sums: Callable[[Any, Any, Any], None] | None = None
    # (the printed chain, head index, its HeadResult) -> (the head's map as printed, its record as printed) where the
    # variant puts a map in place of the softmax, else None
    sheet_map: Callable[[Any, int, Any], tuple[Any, object] | None] | None = None
    # (add a table, the chain, head index, HeadGrad, the page's operand keys) -> whether it added the head's tables
    # of that map read backwards, in place of the softmax's
    sheet_back_map: Callable[[Any, Any, int, Any, Any], bool] | None = None
    # (scenario) -> whether the backward tables cover the variant as the scenario has it
    sheet_back_covers: Callable[[Any], bool] | None = None
    # (scenario) -> what the rule saying the page leaves the backward to the app names first, or None
    sheet_back_uncovered: Callable[[Any], str | None] | None = None
    # (the chain, a printed HeadResult) -> the head as a layer that makes its projections prints it
    sheet_printed_head: Callable[[Any, Any], Any] | None = None
    # (the chain) -> a shared rotary part's cos and sin as the page prints them, or None
    sheet_latent_trig: Callable[[Any], Any] | None = None
    # (add a table, the chain, head index, Gradients) -> whether it added the layer's tables that stand for the rest of
    # the head's (its projections' weights)
    sheet_back_head_rest: Callable[[Any, Any, int, Any], bool] | None = None
    # (add a table, the chain, Gradients, the name of X̂) -> dX̂'s heading after the layer's own tables, which it
    # added, or None where the scenario has no such layer
    sheet_back_layer: Callable[[Any, Any, Any, str], str | None] | None = None
    # (the printed chain, head index, the head's HeadResult, its weights as printed) -> the head's records of the
    # variant as the page prints them, and the head's fields they change: what the backward reads of the page
    sheet_printed: Callable[[Any, int, Any, Any], tuple[list[object], dict[str, object]]] | None = None
    # (the printed chain) -> the turn's cos and sin by d_k as the page prints them, or None
    sheet_trig: Callable[[Any], Any] | None = None
    # the backward answer key (edges/worksheet/backward/lines.py): (cells, table, row, col, answer, the page's operand
    # keys) -> the line of a cell of one of the variant's backward tables, or None where the table is not its
    sheet_back_line: Callable[[Any, Any, int, int, str, Any], str | None] | None = None
    # (scenario) -> what the variant makes of Q and K before they are scored, where it does: (the mark its name
    # takes, Q' or Q̂; its forward table's key with {role} for Q or K; the key of the gradient read back to what it
    # took, with {r} for Q or K), the faces in the forward's order
    sheet_scored: Callable[[Any], tuple[str, str, str] | None] | None = None
    # (scenario) -> the key of the table a one-head page's output is (the gate's gated.0), or None: output.0
    sheet_out: Callable[[Any], str | None] | None = None
    # ((scenario) -> its words in dX̂'s line (" + dz·W_Gᵀ") or "", (scenario, head, row, col) -> its (gradient,
    # weight) cells among dX̂'s terms): the variant's own path into X̂ in the answer key
    sheet_back_term: tuple[Callable[[Any], str], Callable[[Any, int, int, int], list[Any]]] | None = None
    # (scenario) -> the key of each of its layer's tables whose columns are every head's side by side, to the
    # columns a head has there (edges/worksheet/columns.py: a --heads sheet prints the asked heads' only)
    sheet_head_columns: Callable[[Any], dict[str, int]] | None = None


@cache
def faces() -> tuple[ExportFace, ...]:
    """Every variant's face, in the order ``--check`` names the features."""
    found = [importlib.import_module(f"{__name__}.{m.name}").FACE for m in pkgutil.iter_modules(__path__)]
    order = {id(f): i for i, f in enumerate(FEATURES)}
    return tuple(sorted(found, key=lambda f: order[id(f.feature)]))


def placed(own: Iterable[tuple[str, Any]], extra: Sequence[tuple[At, Fields]]) -> Fields:
    """``own`` with each of ``extra``'s fields at its place; a field whose key ``own`` already has replaces it."""
    own = list(own)
    keys = {key for key, _ in own}
    replaced = {key: value for _, fields in extra for key, value in fields if key in keys}
    added = [(at, [f for f in fields if f[0] not in keys]) for at, fields in extra]
    out: Fields = []
    for key, value in own:
        out += [f for at, fields in added if at.before == key for f in fields]
        out.append((key, replaced.get(key, value)))
        out += [f for at, fields in added if at.after == key for f in fields]
    out += [f for at, fields in added if at == END for f in fields]
    return out
