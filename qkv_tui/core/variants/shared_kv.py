"""``[shared_kv]``: cross-layer KV sharing (Gemma 3n, transformers "gemma3n"; contracts §15): this layer computes
its Queries only and attends over the Keys and Values an earlier layer computed and cached.

In transformers' Gemma3nTextAttention (5.24) the last ``num_kv_shared_layers`` layers have no k_proj, v_proj, k_norm
or v_norm; each reads ``shared_kv_states[layer_type]``, the ``key_states`` and ``value_states`` the last earlier
layer of its type stored: its K after k_norm and RoPE, its V after v_norm, one (m, head_dim) matrix per K/V head.
So the table gives exactly those, and the heads give W_Q alone: a W_K, W_V, b_K or b_V is refused, as the layer has
none. Q still goes through the scenario's [qk_norm] and [rope]; the reused Keys are not normed or turned again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from qkv_tui.base.values import kind as _kind
from qkv_tui.base.values import show as _show
from qkv_tui.core.arrays import Matrix
from qkv_tui.core.toml_text import vector
from qkv_tui.core.variants import shared_kv_table
from qkv_tui.core.variants.common import MAX_INDEX, Checker, Context, Table, write_whole
from qkv_tui.core.variants.refusals import BUILDS_HEADS, STATE, Refused, refused
from qkv_tui.core.variants.shared_kv_table import KEYS as KEYS
from qkv_tui.core.variants.shared_kv_table import LOOKALIKES as LOOKALIKES

KV_ROLES = ("W_K", "W_V", "b_K", "b_V")  # what a head of a sharing layer does not have

# (the key of an earlier table, or what it is; why) — each would compute or change K and V in a layer that computes
# none (core/variants/refusals.py)
REFUSED_TABLES: Refused = (
    (BUILDS_HEADS, "[{key}] computes K and V from its own latent; a layer that reuses another's computes none"),
    (STATE, "[{key}] keeps a state, not K and V another layer could hand over"),
    ("backward", "[backward] would train W_K and W_V, which a layer that reuses another's K and V does not have"),
    ("value_scale", "the value scale multiplies V as this layer projects it, and this layer projects none"),
    ("differential", "[differential] projects its own 2d-wide K and V"),
    ("v_norm", "the source layer's V arrives already normed (Gemma 3n's v_norm runs where V is computed); this layer"
               " has no v_norm of its own"),
    ("indexer", "the sparse indexer is not built with reused K and V"),
    ("ssd", "[ssd] reads its own B, C and x, not K and V"),
)


@dataclass(frozen=True, eq=False)
class SharedKV:
    """The earlier layer named and the K and V it cached, one matrix per K/V head."""

    source_layer: int
    K: tuple[Matrix, ...]  # per K/V head (m, d_k): after the source layer's k_norm and RoPE
    V: tuple[Matrix, ...]  # per K/V head (m, d_v): after its v_norm

    # generic answers (core/part_questions.py): the cost view counts this layer's own cache as none; the JSON's
    # top-level kv_source_layer names the source
    cache_kind: ClassVar[str] = "shared"
    kv_given: ClassVar[bool] = True  # the Project stage's cost counts no K or V projection
    not_plain: ClassVar[str] = "[shared_kv]"

    @property
    def kv_source_layer(self) -> int:
        return self.source_layer


def _width(value: Any) -> int | None:
    """The column count of a matrix as the file or an importer gives it, where it has one."""
    values = getattr(value, "values", value)  # the TOML reader's NumberGrid holds an ndarray
    if isinstance(values, np.ndarray) and values.ndim == 2:
        return int(values.shape[1])
    if isinstance(value, list) and value and isinstance(value[0], list) and value[0]:
        return len(value[0])
    return None


def without_kv(v: Checker, doc: dict[str, Any], d_in: int) -> dict[str, Any]:
    """The file as the loader reads its heads: where it has [shared_kv], each head's K/V projections refused if
    written and stood in by zeros (never read: the part puts the table's K and V in their place, and the exports
    write none), so every head keeps the one shape the rest of the loader checks."""
    table = doc.get("shared_kv")
    if not isinstance(table, dict):
        return doc
    source = table.get("source_layer")
    said = "an earlier layer's"
    if isinstance(source, int) and not isinstance(source, bool):
        said = f"layer {source}'s"
        _earlier(v, doc.get("input"), source)
    v_width = _width(table["V"][0]) if isinstance(table.get("V"), list) and table["V"] else None
    out = dict(doc)
    if isinstance(doc.get("heads"), list):
        heads = []
        for i, head in enumerate(doc["heads"]):
            if isinstance(head, dict):
                head = dict(head)
                _refuse_kv(v, head, f"[[heads]] #{i + 1}", said)
                d_k = _width(head.get("W_Q"))
                if d_k is not None:
                    head["W_K"] = _zeros(d_in, d_k)
                    head["W_V"] = _zeros(d_in, v_width or d_k)
            heads.append(head)
        out["heads"] = heads
    elif isinstance(doc.get("attention"), dict):
        att = dict(doc["attention"])
        _refuse_kv(v, att, "[attention]", said)
        wide, count = _width(att.get("W_Q")), att.get("num_heads")
        if wide is not None and isinstance(count, int) and not isinstance(count, bool) and count > 0 and not wide % count:
            kv = att.get("num_kv_heads", count)
            kv = kv if isinstance(kv, int) and not isinstance(kv, bool) and kv > 0 else count
            att["W_K"] = _zeros(d_in, kv * (wide // count))
            att["W_V"] = _zeros(d_in, kv * (v_width or wide // count))
        out["attention"] = att
    return out


def _earlier(v: Checker, given: Any, source: int) -> None:
    """Where [input] says which layer this is (a model's), the source must be earlier, and a schedule must agree."""
    if not isinstance(given, dict):
        return
    here = given.get("layer")
    if isinstance(here, int) and not isinstance(here, bool):
        if source >= here:
            raise v.fail(f"[shared_kv] source_layer = {source}, but [input] says this is layer {here}; expected an"
                         " earlier layer (K and V are reused from a layer that ran before)")
        schedule = given.get("schedule")
        entry = schedule[here] if isinstance(schedule, list) and 0 <= here < len(schedule) else None
        if isinstance(entry, str) and not entry.endswith(f" kv-from {source}"):
            raise v.fail(f"[shared_kv] source_layer = {source}, but [input] schedule[{here}] = {_show(entry)};"
                         f" expected it to end with ' kv-from {source}'")


def _refuse_kv(v: Checker, head: dict[str, Any], where: str, said: str) -> None:
    for role in KV_ROLES:
        if role in head:
            raise v.fail(f"{where} gives {role}, but [shared_kv] says this layer reuses {said} K and V and computes"
                         f" none of its own; expected W_Q alone (no {', '.join(KV_ROLES)})")


def _zeros(rows: int, cols: int) -> Matrix:
    z = np.zeros((rows, cols))
    z.setflags(write=False)
    return z


def kv_count(ctx: Context) -> int:
    """How many K/V heads the heads read: [attention]'s num_kv_heads (or num_heads), else the largest kv_head."""
    if ctx.num_heads_split is not None:
        return ctx.num_kv_heads if ctx.num_kv_heads is not None else ctx.num_heads_split
    return 1 + max(h if getattr(t, "kv_head", None) is None else t.kv_head for h, t in enumerate(ctx.head_tables))


def parse_shared_kv(table: dict[str, Any], ctx: Context) -> SharedKV:
    v = ctx.v
    found = refused(ctx, REFUSED_TABLES)
    if found is not None:
        key, why = found
        raise v.fail(f"[shared_kv] cannot be used with [{key}]: {why}")
    if ctx.is_cross:
        raise v.fail("[shared_kv] cannot be used with [context]: the reused K and V are an earlier layer's over the"
                     " same tokens; expected self-attention (no [context])")
    for key in KEYS:
        if key not in table:
            what = ("the 0-based layer whose K and V this layer reuses" if key == "source_layer" else
                    f"the source layer's {'keys (after its k_norm and RoPE)' if key == 'K' else 'values (after its v_norm)'},"
                    f" one m × d matrix per K/V head")
            raise v.fail(f"[shared_kv] is missing {key!r}; expected {key} = {'L' if key == 'source_layer' else '[...]'},"
                         f" {what}")
    L = table["source_layer"]
    if isinstance(L, bool) or not isinstance(L, int):
        raise v.fail(f"[shared_kv] source_layer must be a whole number >= 0 (the 0-based layer whose K and V this layer"
                     f" reuses), got {_kind(L)}{write_whole(L, 0)}")
    if not 0 <= L <= MAX_INDEX:
        raise v.fail(f"[shared_kv] source_layer = {_show(L)}; expected a whole number from 0 up to {MAX_INDEX}")
    count, m = kv_count(ctx), int(ctx.allow.shape[1])
    readers: dict[int, int] = {}  # K/V head -> its first query head's index (for d_k and d_v)
    for h, t in enumerate(ctx.head_tables):
        readers.setdefault(h if getattr(t, "kv_head", None) is None else t.kv_head, h)
    for g in range(count):  # a K/V head no chosen query head reads (one head of a model) is as wide as the first's
        readers.setdefault(g, 0)
    K = _per_head(v, table["K"], "K", count, m, [ctx.heads[readers[g]][1] for g in range(count)], "d_k")
    V = _per_head(v, table["V"], "V", count, m, [int(ctx.head_tables[readers[g]].W_V.shape[1]) for g in range(count)],
                  "d_v")
    return SharedKV(int(L), K, V)


def _per_head(v: Checker, value: Any, key: str, count: int, m: int, widths: list[int], d: str) -> tuple[Matrix, ...]:
    where = f"[shared_kv] {key}"
    heads = "K/V head" if count == 1 else "K/V heads"
    if not isinstance(value, list) or len(value) != count:
        got = (f"{len(value)} matri{'x' if len(value) == 1 else 'ces'}" if isinstance(value, list) else _kind(value))
        raise v.fail(f"{where} must be a list of {count} matri{'x' if count == 1 else 'ces'}, one per K/V head"
                     f" ({count} {heads}), got {got}")
    out = []
    for g, item in enumerate(value):
        M = v.matrix(item, f"{where}[{g}]")  # type: ignore[attr-defined]
        if M.shape != (m, widths[g]):
            raise v.fail(f"{where}[{g}] is {M.shape[0]} × {M.shape[1]}; expected m × {d} = {m} × {widths[g]} (one row"
                         f" per key token, as wide as the heads' {d} reading K/V head {g})")
        out.append(M)
    return tuple(out)


def write_shared_kv(s: SharedKV) -> list[str]:
    def rows(Ms: tuple[Matrix, ...]) -> str:
        return "[" + ", ".join("[" + ", ".join(vector(r) for r in M) + "]" for M in Ms) + "]"

    return ["[shared_kv]", f"source_layer = {s.source_layer}", f"K = {rows(s.K)}", f"V = {rows(s.V)}"]


def _summary(s: SharedKV) -> str:
    return f"K and V reused from layer {s.source_layer}"


# registered in shared_kv_table.py, whose functions are this module's (a scenario without the table loads only that)
TABLE: Table[SharedKV] = shared_kv_table.TABLE
