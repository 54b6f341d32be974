"""``[indexer]``: DeepSeek Sparse Attention's lightning indexer (DeepSeek-V3.2, GLM-5; contracts §15).

A few index heads score every visible key, one index key per token shared by them; each query keeps its
``top_k`` keys (qkv_tui/kernels/indexer.py). W_q reads X, or, where ``[mla]`` has a query latent (W_DQ),
c_Q, as the models do. The turned dimensions take the frequencies of ``[rope]`` and their own layout:
DeepSeek-V3.2 turns the indexer in half-split pairs although its MLA turns interleaved ones, GLM-5 in
interleaved pairs.

Its faces (FACES below): the selection narrows every head's mask (core/indexer_part.py), the Index and Select
stages (teach/stages/indexer.py) and the JSON field ``"indexer"`` (edges/export_indexer.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, cast

import numpy as np

from qkv_tui.base.values import kind as _kind
from qkv_tui.base.values import show as _show
from qkv_tui.core.arrays import BoolMatrix, Matrix, Vector
from qkv_tui.core.toml_text import number as num
from qkv_tui.core.toml_text import string, vector
from qkv_tui.core.variants import indexer_table
from qkv_tui.core.variants.common import MAX_SIZE, Context, Reader, Table, choice, number, numbers, write_whole
from qkv_tui.core.variants.indexer_table import INDEXER_KEYS as INDEXER_KEYS
from qkv_tui.core.variants.indexer_table import LOOKALIKES as LOOKALIKES
from qkv_tui.core.variants.indexer_table import WHERE as WHERE
from qkv_tui.core.variants.refusals import STATE, refused
from qkv_tui.core.variants.rope import Rope
from qkv_tui.kernels.policy import EXACT, Policy

if TYPE_CHECKING:  # the kernel loads with the first [indexer] parsed or run, not with every scenario
    from qkv_tui.kernels.indexer import Indexed, IndexerWeights

K_NORM_KEYS = ("gamma", "beta", "eps")

# what the table cannot combine with: (the key of an earlier table, why); the selection narrows one softmax map's mask
REFUSED_TABLES = (
    (STATE, "[{key}] keeps a running state, with no map whose keys the indexer could pick"),
    ("differential", "the models with an indexer have one softmax map per head, [differential] two"),
    ("backward", "the gradients through the selection are not in the app yet (top-k passes none to the indexer)"),
)


@dataclass(frozen=True, eq=False)
class Indexer:
    """The [indexer] table as the kernel reads it."""

    num_heads: int
    W_q: Matrix  # (d_model or d_cq, num_heads·d_I)
    W_k: Matrix  # (d_model, d_I)
    W_w: Matrix  # (d_model, num_heads)
    top_k: int
    rope_dims: int
    rope_layout: str
    k_norm: bool
    k_gamma: Vector  # (d_I,)
    k_beta: Vector  # (d_I,)
    k_eps: float
    from_latent: bool  # W_q reads [mla]'s c_Q, not X
    # what a page says it works (core/part_questions.lead)
    lead: ClassVar[tuple[str, str]] = ("Scaled dot-product attention over each query's top_k keys (DeepSeek Sparse"
                                       " Attention), ", "softmax(QKᵀ/√dₖ)V")

    # the cost view's word on its phases (core/cost.py, display/cost_view.py): each replaces the page's own meaning
    prefill_meaning: ClassVar[str] = (
        "Prefill with DeepSeek Sparse Attention: the indexer (Index) scores every key for every query, masked cells"
        " included as a dense kernel computes them, 2·n·m·H_I·d_I FLOPs for the dots and 2·n·m·H_I for the weighted"
        " sum, and Select keeps each row's top_k; the heads"
        " then score, scale, weigh and mix only those top_k keys a row (a sparse kernel's count, short rows' unused"
        " places included as masked cells are). Bytes: each input a stage reads once and each output it writes once.")
    decode_meaning: ClassVar[str] = (
        "Decode with DeepSeek Sparse Attention: the new token's index query meets every cached index key (Index:"
        " the cache of k_I, d_I numbers a token, is read whole), Select keeps its top_k, at least one comparison a"
        " score and no arithmetic, and the heads read the K and V (or latent) of those top_k keys only. So the heads'"
        " bytes stop growing past top_k while the indexer's still grow with the context, at d_I a token.")
    cache_meaning: ClassVar[str] = (
        "The KV cache: what decoding keeps per token and per layer, Σ over the K/V heads of (d_k + d_v)·bytes (MLA: one"
        " latent of d_c + d_rope), and with DeepSeek Sparse Attention the index key k_I too, d_I numbers a token: the"
        " indexer reads every token's k_I at each step, the heads only the top_k tokens' K and V.")

    @property
    def d_index(self) -> int:
        return int(self.W_k.shape[1])

    @property
    def turns(self) -> bool:
        """Whether its index vectors turn by position (their first rope_dims), so are no plain product of X."""
        return self.rope_dims > 0

    @property
    def turned_words(self) -> str:
        """What the Index stage says of that turn (teach/stages/indexer.py); nothing where none turns."""
        return f", their first {self.rope_dims} dimensions turned by position ({self.rope_layout} pairs)" if self.turns else ""

    def attended_keys(self, keys: int) -> tuple[str, int] | None:
        """Of ``keys``, what each query's heads attend (core/cost.py): top_k, where fewer; None: every key."""
        return ("top_k", self.top_k) if self.top_k < keys else None

    @property
    def cache_also(self) -> tuple[str, tuple[str, int]]:
        """What a layer with an indexer caches per token beside K and V (or the latent): the index key, d_I numbers."""
        return "index key k_I", ("d_I", self.d_index)

    def cache_note(self, bytes_per: int) -> str:
        """The cache page's word on the index key's width: counted at the dtype's B as every number here, and what
        DeepSeek-V3.2's own cache keeps."""
        d = self.d_index
        blocks = -(-d // 128)
        return (f"the index key k_I: d_I = {d} numbers a token, counted at B = {bytes_per} as every number here"
                f" (--dtype); DeepSeek-V3.2 caches it in FP8, 1 byte a number and a float32 scale per block of 128:"
                f" d_I + 4·⌈d_I/128⌉ = {d} + 4·{blocks} = {d + 4 * blocks} B a token at this d_I")

    def weights(self) -> IndexerWeights:
        from qkv_tui.kernels.indexer import IndexerWeights

        return IndexerWeights(self.num_heads, self.W_q, self.W_k, self.W_w, self.top_k,
                              self.k_gamma if self.k_norm else None, self.k_beta if self.k_norm else None, self.k_eps)


def _count(ctx: Context, table: dict[str, Any], key: str, least: int, what: str, default: int | None = None) -> int:
    v = ctx.v
    if key not in table:
        if default is not None:
            return default
        raise v.fail(f"{WHERE} is missing {key!r}; expected {key} = <whole number >= {least}> ({what})")
    value = table[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise v.fail(f"{WHERE} {key} must be a whole number >= {least} ({what}), got {_kind(value)}"
                     f"{write_whole(value, least, MAX_SIZE)}")
    if value > MAX_SIZE:
        raise v.fail(f"{WHERE} {key} = {_show(value)}; expected at most {MAX_SIZE:,} ({what})")
    return value


def _matrix(ctx: Context, table: dict[str, Any], key: str, rows: int, rows_are: str, cols: int | None,
            cols_are: str) -> Matrix:
    v = cast(Reader, ctx.v)
    if key not in table:
        shape = f"{rows} rows ({rows_are}) of {cols if cols is not None else 'd_I'} columns ({cols_are})"
        raise v.fail(f"{WHERE} is missing {key!r}; expected {shape}")
    m = v.matrix(table[key], f"{WHERE} {key}")
    if m.shape[0] != rows:
        raise v.fail(f"{WHERE} {key} has {m.shape[0]} rows; expected {rows_are} = {rows}")
    if cols is not None and m.shape[1] != cols:
        raise v.fail(f"{WHERE} {key} has {m.shape[1]} columns; expected {cols_are} = {cols}")
    return m


def _ones(count: int, fill: float = 1.0) -> Vector:
    out = np.full(count, fill)
    out.setflags(write=False)
    return out


def _k_norm(ctx: Context, value: Any, d_I: int) -> tuple[bool, Vector, Vector, float]:
    """``k_norm = true`` (gain 1, bias 0), false, or a table of ``gamma``, ``beta`` and ``eps``."""
    from qkv_tui.kernels.indexer import DEFAULT_K_EPS

    v = ctx.v
    key = f"{WHERE} k_norm"
    if isinstance(value, bool):
        return value, _ones(d_I), _ones(d_I, 0.0), DEFAULT_K_EPS
    if not isinstance(value, dict):
        raise v.fail(f"{key} must be true, false or a table of gamma, beta and eps (the LayerNorm of the index key),"
                     f" got {_kind(value)}")
    v.known(value, K_NORM_KEYS, key)
    what = f"one per column of W_k, d_I = {d_I}"
    gamma = numbers(v, value["gamma"], f"{key} gamma", d_I, f"gains, {what}") if "gamma" in value else _ones(d_I)
    beta = numbers(v, value["beta"], f"{key} beta", d_I, f"biases, {what}") if "beta" in value else _ones(d_I, 0.0)
    eps = DEFAULT_K_EPS
    if "eps" in value:
        eps = number(v, value["eps"], f"{key} eps")
        if eps <= 0:
            raise v.fail(f"{key} eps = {_show(value['eps'])}; expected a finite number > 0 (it keeps the root away from 0)")
    return True, gamma, beta, eps


def parse_indexer(table: dict[str, Any], ctx: Context) -> Indexer:
    v = ctx.v
    found = refused(ctx, REFUSED_TABLES)
    if found is not None:
        raise v.fail(f"{WHERE} cannot be used with [{found[0]}]: {found[1]}; expected one of the two tables")
    if ctx.is_cross:
        raise v.fail(f"{WHERE} needs self-attention (it selects among the tokens' own keys); remove [context] or {WHERE}")
    H = _count(ctx, table, "num_heads", 1, "how many index heads")
    W_k = _matrix(ctx, table, "W_k", ctx.d_model, "d_model, the width of X", None, "d_I, the index key's width")
    d_I = int(W_k.shape[1])
    # a table parsed before that gives a query latent ([mla]'s c_Q), which W_q then reads
    d_cq = next((width for t in ctx.earlier.values() if (width := getattr(t, "query_latent_width", None))), None)
    latent = d_cq is not None
    if d_cq is not None:
        rows, rows_are = d_cq, "d_cq, the columns of [mla] W_DQ (W_q reads the query latent c_Q, as the models do)"
    else:
        rows, rows_are = ctx.d_model, "d_model, the width of X"
    W_q = _matrix(ctx, table, "W_q", rows, rows_are, H * d_I, f"num_heads × d_I = {H} × {d_I}")
    W_w = _matrix(ctx, table, "W_w", ctx.d_model, "d_model, the width of X", H, f"num_heads = {H} (one weight per index head)")
    top_k = _count(ctx, table, "top_k", 1, "how many keys each query keeps")
    rope_dims = _count(ctx, table, "rope_dims", 0, "the turned dimensions of every index vector", default=0)
    if rope_dims % 2:
        raise v.fail(f"{WHERE} rope_dims = {rope_dims}; expected an even number (the dimensions turn in pairs)")
    if rope_dims > d_I:
        raise v.fail(f"{WHERE} rope_dims = {rope_dims}; expected at most d_I = {d_I} (W_k's columns)")
    rope = ctx.earlier.get("rope")
    if rope_dims and not isinstance(rope, Rope):
        raise v.fail(f"{WHERE} rope_dims = {rope_dims} needs [rope] (its base and positions turn the index vectors);"
                     " add [rope] or write rope_dims = 0")
    layout = "half"
    if "rope_layout" in table:
        from qkv_tui.kernels.indexer import INDEX_LAYOUTS

        layout = choice(v, table["rope_layout"], f"{WHERE} rope_layout", INDEX_LAYOUTS)
    on, gamma, beta, eps = _k_norm(ctx, table.get("k_norm", False), d_I)
    return Indexer(H, W_q, W_k, W_w, top_k, rope_dims, layout, on, gamma, beta, eps, latent)


def write_indexer(ix: Indexer) -> list[str]:
    """Every key, defaults included, so the file says what the scenario computes with."""

    def matrix(m: Matrix) -> str:
        return "[\n" + "".join(f"  {vector(row)},\n" for row in m) + "]"

    lines = [WHERE, f"num_heads = {ix.num_heads}", f"top_k = {ix.top_k}", f"rope_dims = {ix.rope_dims}",
             f"rope_layout = {string(ix.rope_layout)}", f"W_q = {matrix(ix.W_q)}", f"W_k = {matrix(ix.W_k)}",
             f"W_w = {matrix(ix.W_w)}"]
    if ix.k_norm:
        lines.append(f"k_norm = {{ gamma = {vector(ix.k_gamma)}, beta = {vector(ix.k_beta)}, eps = {num(ix.k_eps)} }}")
    else:
        lines.append("k_norm = false")
    return lines


def _summary(ix: Indexer) -> str:
    return f"sparse attention (indexer: {ix.num_heads} index heads, d_I {ix.d_index}, top-{ix.top_k})"


def run(ix: Indexer, X: Matrix, allow: BoolMatrix, turner: Any, c_Q: Matrix | None = None,
        policy: Policy = EXACT) -> Indexed:
    """The table on X (n, d_model): ``c_Q`` is [mla]'s query latent where W_q reads it; ``turner`` ([rope]) turns
    the first rope_dims of the index vectors in the table's own layout (its positions, frequencies and YaRN's
    factor: its ``columns_turn``; None: base 10000 at positions 0, 1, …)."""
    from qkv_tui.kernels.indexer import index
    from qkv_tui.kernels.rope import columns

    if ix.from_latent and c_Q is None:
        raise ValueError("this [indexer] reads [mla]'s c_Q: pass it")
    turn = (columns(ix.rope_dims, ix.rope_layout, tuple(range(X.shape[0]))) if turner is None
            else turner.columns_turn(ix.rope_dims, ix.rope_layout))
    return index(X, ix.weights(), allow, c_Q if ix.from_latent else None, turn, policy)


# registered in indexer_table.py, whose functions are this module's (a scenario without the table loads only that)
TABLE: Table[Indexer] = indexer_table.TABLE
