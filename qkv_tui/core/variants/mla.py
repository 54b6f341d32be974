"""``[mla]``: DeepSeek-V2/V3's multi-head latent attention, instead of ``[[heads]]`` or ``[attention]``
(docs/scenario-format.md, [mla]).

The keys and values of every head are expanded from one latent per token, c_KV = X·W_DKV; one rotary key
k_R = X·W_KR is shared by the heads. ``[rope]`` turns the rotary parts only (q_R and k_R), so a scenario with
``[mla]`` keeps its Rope here, not on the Scenario: nothing else rotates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar, cast

import numpy as np

from qkv_tui.base.values import kind as _kind
from qkv_tui.base.values import show as _show
from qkv_tui.core.arrays import Matrix, Vector
from qkv_tui.core.toml_text import vector
from qkv_tui.core.variants import mla_table
from qkv_tui.core.variants.common import (
    MAX_SIZE,
    Checker,
    Context,
    Reader,
    Table,
    face,
    number,
    numbers,
    write_whole,
)
from qkv_tui.core.variants.mla_table import MLA_KEYS as MLA_KEYS
from qkv_tui.core.variants.mla_table import MLA_TRAINABLE as MLA_TRAINABLE
from qkv_tui.core.variants.rope import Rope, latent_partial, latent_scaling, write_rope
from qkv_tui.kernels.policy import EXACT, Policy

if TYPE_CHECKING:
    from qkv_tui.kernels.attention import Turn
    from qkv_tui.kernels.mla import MlaWeights
    from qkv_tui.kernels.mla_rope import Rotary

MLA_MATRICES = ("W_DKV", "W_UK", "W_UV", "W_KR", "W_Q", "W_DQ", "W_UQ")
DEFAULT_MLA_EPS = 1e-6  # DeepSeek's rms_norm_eps, for both latent norms


@dataclass(frozen=True, eq=False)
class Mla:
    """The latent attention layer: its sizes, weights and latent norms, and the rotation of its rotary parts."""

    not_plain: ClassVar[str] = "[mla]"  # what makes the attention other than plain (core/diagnose.py)
    # the stage module that says what dEmbed computes: the latent layer's down-projections read X (teach/stages/embed.py)
    embed_back: ClassVar[str] = "qkv_tui.teach.stages.mla_compress"
    # the cost view (core/cost.py, display/cost_view.py): what its layers cache, and its own page
    cache_kind: ClassVar[str] = "mla"
    builds_heads: ClassVar[bool] = True  # the heads come from its latent (core/variants/refusals.py)
    runs_heads: ClassVar[str] = "qkv_tui.core.mla_part:mla_heads"  # and run in the forward driver's place
    # and read backwards in the gradients' place (core/gradients.py asks it, as core/forward.py asks runs_heads)
    runs_heads_back: ClassVar[str] = "qkv_tui.core.mla_grad:mla_gradients"
    cost_face: ClassVar[str] = "qkv_tui.display.mla_cost"
    two_forms: ClassVar[str] = (
        "Score, Scale, Softmax and Mix run on the expanded keys and values; Absorb is the same attention on the"
        " latent. A model runs one of the two (at decode, the absorbed); the totals count both.")

    num_heads: int
    d_nope: int  # per-head query/key dimensions that do not turn
    d_rope: int  # the rotary dimensions (even): each head's q_R, and the one shared k_R
    d_v: int
    W_DKV: Matrix  # (d_model, d_c)
    W_UK: Matrix  # (d_c, num_heads·d_nope)
    W_UV: Matrix  # (d_c, num_heads·d_v)
    W_KR: Matrix  # (d_model, d_rope)
    W_Q: Matrix | None  # (d_model, num_heads·(d_nope + d_rope)), each head's columns [nope | rope]
    W_DQ: Matrix | None  # (d_model, d_cq)
    W_UQ: Matrix | None  # (d_cq, num_heads·(d_nope + d_rope))
    kv_norm: bool
    gamma_kv: Vector  # (d_c,)
    q_norm: bool
    gamma_q: Vector | None  # (d_cq,); None without W_DQ
    eps: float
    rope: Rope | None = None  # [rope], turning q_R and k_R only (set by the loader)

    @property
    def d_c(self) -> int:
        return int(self.W_DKV.shape[1])

    @property
    def d_cq(self) -> int | None:
        return None if self.W_DQ is None else int(self.W_DQ.shape[1])

    @property
    def query_latent_width(self) -> int | None:
        """The width of the query latent c_Q a later table may read ([indexer]'s W_q); None without W_DQ."""
        return self.d_cq

    def query_latent(self, X: Matrix, policy: Any) -> Matrix:
        """c_Q = q_norm(X̂·W_DQ), as the heads' own pass computes it under ``policy``: what [indexer]'s W_q reads."""
        from qkv_tui.kernels.mla import mla_shared
        from qkv_tui.kernels.mla_rope import Rotary

        shared = mla_shared(X, self.weights(), Rotary(None), policy)
        assert shared.c_Q is not None
        c_Q: Matrix = shared.c_Q
        return c_Q

    @property
    def d_qk(self) -> int:
        return self.d_nope + self.d_rope

    @property
    def softmax_mscale(self) -> float | None:
        """DeepSeek's YaRN m, whose square multiplies the softmax scale (transformers' DeepseekV3Attention:
        qk_head_dim^(−1/2)·m², m = 0.1·mscale_all_dim·ln(factor) + 1); None where the divisor is √d_qk."""
        scaling = None if self.rope is None else self.rope.scaling
        m = None if scaling is None else scaling.softmax_mscale
        return None if m is None or m == 1.0 else m

    @property
    def divisor(self) -> float:
        """What each head's scores are divided by: √d_qk, over m² under DeepSeek's YaRN."""
        m = self.softmax_mscale
        root = math.sqrt(self.d_qk)
        return root if m is None else root / (m * m)

    @property
    def scale_origin(self) -> str | None:
        """Where the divisor comes from, as the Scale stage says it (core/part_questions.scenario_says); None for
        √d_qk."""
        m = self.softmax_mscale
        if m is None:
            return None
        assert self.rope is not None and self.rope.scaling is not None
        s = self.rope.scaling
        return (f"DeepSeek's YaRN: √d_qk / m², m = 0.1·mscale_all_dim·ln(factor) + 1 = 0.1·{s.mscale_all_dim:g}·ln"
                f" {s.factor:g} + 1 = {m:.6f}, so √{self.d_qk} / {m:.6f}² = {self.divisor:.6f}")

    @property
    def cache_held(self) -> tuple[str, tuple[str, int]]:
        """What every layer caches per token in place of K and V: one latent of d_c + d_rope (core/cost.py)."""
        return "latent", ("d_c + d_rope", self.d_c + self.d_rope)

    def decode_forms(self, N: int) -> object:
        """One decode step's FLOPs, expanded against absorbed, at N keys (core/mla_cost.py)."""
        # the cost view's figures load on its first use, by name: core/mla_cost.py counts with core/cost.py, which
        # reads the scenario this table is part of
        decode: object = face("qkv_tui.core.mla_cost:mla_decode")(self.num_heads, self.d_c, self.d_nope, self.d_v, N,
                                                                    ("d_nope + d_rope", self.d_qk), self.cache_held[1])
        return decode

    def overflow_hint(self, name: str) -> str | None:
        """What to change where a head's Q, K or V overflows (core/part_questions.py): its heads have no W_Q, W_K
        or W_V of their own to blame, their Q, K and V come from the latent layer."""
        if name == "Q":  # the query's latent where the file has no W_Q
            return "expected smaller X or W_Q" if self.W_Q is not None else \
                "expected smaller W_UQ or c_Q = X̂·W_DQ (smaller X or W_DQ)"
        return {"K": "expected smaller W_UK or c_KV = X̂·W_DKV (the no-position part), or X or W_KR (the rotary part)",
                "V": "expected smaller W_UV or c_KV = X̂·W_DKV (smaller X or W_DKV)"}.get(name)

    def weights(self) -> MlaWeights:
        from qkv_tui.kernels.mla import MlaWeights  # the kernel loads with a scenario that has [mla]

        return MlaWeights(self.num_heads, self.d_nope, self.d_v, self.W_DKV, self.W_UK, self.W_UV,
                          self.W_KR, self.W_Q, self.W_DQ, self.W_UQ, self.gamma_kv if self.kv_norm else None,
                          self.gamma_q if self.q_norm else None, self.eps)

    def head_weights(self) -> list[tuple[str, Matrix, Matrix, Matrix]]:
        """Each head as a plain head would hold it: (name, W_Q, W_K, W_V), with the latent multiplied through.

        Exact where there is no latent norm and no rotation; elsewhere they carry the shapes (d_k =
        d_nope + d_rope, d_v) that the scale, W_O and the screens read, and the engine computes from the latent."""
        out = []
        for h in range(self.num_heads):
            cols = slice(h * self.d_qk, (h + 1) * self.d_qk)
            if self.W_Q is not None:
                W_Q = self.W_Q[:, cols]
            else:
                assert self.W_DQ is not None and self.W_UQ is not None
                W_Q = self.W_DQ @ self.W_UQ[:, cols]
            W_K = np.concatenate([self.W_DKV @ self.W_UK[:, h * self.d_nope:(h + 1) * self.d_nope], self.W_KR], axis=1)
            W_V = self.W_DKV @ self.W_UV[:, h * self.d_v:(h + 1) * self.d_v]
            W_Q, W_K, W_V = (_frozen(np.ascontiguousarray(m)) for m in (W_Q, W_K, W_V))
            out.append((f"head {h + 1}", W_Q, W_K, W_V))
        return out

    def cache_per_token(self) -> tuple[int, int]:
        """Numbers the KV cache holds per token and layer: the latent and the rotary key, against multi-head
        attention's K and V for every head, 2·n_h·d_h with the head width d_h = d_nope (the comparison of
        DeepSeek-V2's Table 1, not the scale's d_k = d_nope + d_rope: DeepSeek-V3's 512 + 64 = 576 against
        2·128·128 = 32,768)."""
        return self.d_c + self.d_rope, 2 * self.num_heads * self.d_nope

    # What the other modules of the latent layer ask of its rotary columns (each head's q_R, the shared k_R), so
    # that [rope] and d_rope are named here and where they turn (kernels/mla_rope.py, teach/stages/mla_rotate.py)

    def rotation(self, positions: tuple[int, ...] | None, policy: Policy = EXACT, printed: Turn | None = None) -> Rotary:
        """How the rotary columns turn at these positions: by [rope] where the file has it (cos and sin under
        ``policy``), by ``printed`` where a worksheet gives its own cos and sin, or not at all."""
        from qkv_tui.kernels.mla_rope import Rotary  # the kernels load with a scenario that has [mla]

        if printed is not None:
            return Rotary(printed)
        return Rotary(None if self.rope is None else self.rope.turn_at(positions, self.d_rope, policy))

    @property
    def turns(self) -> bool:
        """Whether q_R and k_R turn by position (a [rope] beside [mla]): the screens then show them primed."""
        return self.rope is not None

    @property
    def rotary_width(self) -> tuple[str, int]:
        """The columns of each head's q_R and of the shared k_R, as the formulas name them."""
        return "d_rope", self.d_rope

    @property
    def cache_sum(self) -> str:
        """What a token caches, summed as the cache view and the Compress stage write it."""
        return f"d_c + d_rope = {self.d_c} + {self.d_rope} = {self.cache_per_token()[0]}"

    @property
    def own_rope(self) -> tuple[Rope, int] | None:
        """The [rope] it keeps for its rotary columns and their width, where it turns them: a table's answer
        (core/part_questions.py scenario_answer) where its [rope] turns columns of its own, not every head's
        (edges/faces/rope.py exports its frequencies)."""
        return None if self.rope is None else (self.rope, self.d_rope)


MLA_VECTORS = ("gamma_kv", "gamma_q")


def mla_weights(mla: Mla) -> tuple[str, ...]:
    """The weights the layer gives, as [backward] train names them (its gains only where its norms are on)."""
    have = [key for key in MLA_MATRICES if getattr(mla, key) is not None]
    if mla.kv_norm:
        have.append("gamma_kv")
    if mla.q_norm:
        have.append("gamma_q")
    return tuple(have)


def editable(mla: Mla) -> dict[str, Matrix]:
    """The inputs a learner may edit, as 2-D arrays (a vector is one row), in the order the arrow keys visit them."""
    out = {key: m for key in MLA_MATRICES if (m := getattr(mla, key)) is not None}
    if mla.kv_norm:
        out["gamma_kv"] = mla.gamma_kv[None, :]
    if mla.q_norm and mla.gamma_q is not None:
        out["gamma_q"] = mla.gamma_q[None, :]
    return out


def with_entry(mla: Mla, key: str, row: int, col: int, value: float) -> Mla:
    """The layer with one input number changed (the heads' shapes stay)."""
    array = np.array(getattr(mla, key), dtype=np.float64)
    if key in MLA_VECTORS:
        array[col] = value
    else:
        array[row, col] = value
    changed: dict[str, Any] = {key: _frozen(array)}
    return replace(mla, **changed)


def _frozen(a: Matrix) -> Matrix:
    a.setflags(write=False)
    return a




def _count(v: Checker, table: dict[str, Any], key: str, least: int, what: str) -> int:
    if key not in table:
        raise v.fail(f"[mla] is missing {key!r}; expected {key} = <whole number >= {least}> ({what})")
    value = table[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise v.fail(f"[mla] {key} must be a whole number >= {least} ({what}), got {_kind(value)}"
                     f"{write_whole(value, least, MAX_SIZE)}")
    if value > MAX_SIZE:  # no matrix could have that many columns; and its products must stay printable
        raise v.fail(f"[mla] {key} = {_show(value)}; expected at most {MAX_SIZE:,} ({what})")
    return value


def _shaped(v: Reader, table: dict[str, Any], key: str, rows: int, rows_are: str, cols: int, cols_are: str) -> Matrix:
    if key not in table:
        raise v.fail(f"[mla] is missing {key!r}; expected {rows} rows ({rows_are}) of {cols} columns ({cols_are})")
    m = v.matrix(table[key], f"[mla] {key}")
    if m.shape[0] != rows:
        raise v.fail(f"[mla] {key} has {m.shape[0]} rows; expected {rows_are} = {rows}")
    if m.shape[1] != cols:
        raise v.fail(f"[mla] {key} has {m.shape[1]} columns; expected {cols_are} = {cols}")
    return m


def _flag(v: Checker, table: dict[str, Any], key: str) -> bool:
    value = table.get(key, False)
    if not isinstance(value, bool):
        raise v.fail(f"[mla] {key} must be true or false, got {_kind(value)}")
    return value


def read_mla(v: Reader, table: dict[str, Any], d_model: int) -> Mla:
    """The [mla] table's values, every shape checked against d_model and the sizes it gives."""
    v.known(table, MLA_KEYS, "[mla]")
    H = _count(v, table, "num_heads", 1, "how many query heads")
    d_nope = _count(v, table, "d_nope", 1, "each head's query/key dimensions without rotation")
    d_rope = _count(v, table, "d_rope", 2, "the rotary dimensions, even")
    if d_rope % 2:
        raise v.fail(f"[mla] d_rope = {d_rope}; expected an even number (the rotary dimensions turn in pairs)")
    d_v = _count(v, table, "d_v", 1, "each head's value dimensions")
    d_qk = d_nope + d_rope
    W_DKV = v.matrix(table["W_DKV"], "[mla] W_DKV") if "W_DKV" in table else None
    if W_DKV is None:
        raise v.fail(f"[mla] is missing 'W_DKV'; expected d_model = {d_model} rows of d_c columns (the latent c_KV)")
    if W_DKV.shape[0] != d_model:
        raise v.fail(f"[mla] W_DKV has {W_DKV.shape[0]} rows; expected d_model = {d_model} (the width of X)")
    d_c = int(W_DKV.shape[1])
    W_UK = _shaped(v, table, "W_UK", d_c, "d_c, the columns of W_DKV", H * d_nope, f"num_heads × d_nope = {H} × {d_nope}")
    W_UV = _shaped(v, table, "W_UV", d_c, "d_c, the columns of W_DKV", H * d_v, f"num_heads × d_v = {H} × {d_v}")
    W_KR = _shaped(v, table, "W_KR", d_model, "d_model, the width of X", d_rope, "d_rope")
    q_cols, q_what = H * d_qk, f"num_heads × (d_nope + d_rope) = {H} × {d_qk}"
    W_Q = W_DQ = W_UQ = None
    if "W_Q" in table and ("W_DQ" in table or "W_UQ" in table):
        raise v.fail("[mla] gives both W_Q and W_DQ/W_UQ; expected W_Q alone, or W_DQ and W_UQ (the query's latent)")
    if "W_Q" in table:
        W_Q = _shaped(v, table, "W_Q", d_model, "d_model, the width of X", q_cols, q_what)
    elif "W_DQ" in table or "W_UQ" in table:
        if "W_DQ" not in table or "W_UQ" not in table:
            given, missing = ("W_DQ", "W_UQ") if "W_DQ" in table else ("W_UQ", "W_DQ")
            raise v.fail(f"[mla] {given} needs {missing} beside it: c_Q = X·W_DQ, then the queries are c_Q·W_UQ")
        W_DQ = v.matrix(table["W_DQ"], "[mla] W_DQ")
        if W_DQ.shape[0] != d_model:
            raise v.fail(f"[mla] W_DQ has {W_DQ.shape[0]} rows; expected d_model = {d_model} (the width of X)")
        W_UQ = _shaped(v, table, "W_UQ", int(W_DQ.shape[1]), "d_cq, the columns of W_DQ", q_cols, q_what)
    else:
        raise v.fail(f"[mla] is missing the queries: expected W_Q ({d_model} × {q_what}) or W_DQ and W_UQ")
    kv_norm = _flag(v, table, "kv_norm")
    q_norm = _flag(v, table, "q_norm")
    if "gamma_kv" in table and not kv_norm:
        raise v.fail("[mla] gamma_kv needs kv_norm = true beside it (the gains of c_KV's RMSNorm)")
    if "gamma_q" in table and not q_norm:
        raise v.fail("[mla] gamma_q needs q_norm = true beside it (the gains of c_Q's RMSNorm)")
    if q_norm and W_DQ is None:
        raise v.fail("[mla] q_norm = true needs W_DQ and W_UQ (it normalises the query's latent c_Q = X·W_DQ)")
    gamma_kv = (numbers(v, table["gamma_kv"], "[mla] gamma_kv", d_c, f"one gain per column of c_KV, d_c = {d_c}")
                if "gamma_kv" in table else _frozen(np.ones(d_c)))
    gamma_q = None
    if W_DQ is not None:
        d_cq = int(W_DQ.shape[1])
        gamma_q = (numbers(v, table["gamma_q"], "[mla] gamma_q", d_cq, f"one gain per column of c_Q, d_cq = {d_cq}")
                   if "gamma_q" in table else _frozen(np.ones(d_cq)))
    eps = DEFAULT_MLA_EPS
    if "eps" in table:
        eps = number(v, table["eps"], "[mla] eps")
        if eps <= 0:
            raise v.fail(f"[mla] eps = {_show(table['eps'])}; expected a finite number > 0 (it keeps the root away from 0)")
    return Mla(H, d_nope, d_rope, d_v, W_DKV, W_UK, W_UV, W_KR, W_Q, W_DQ, W_UQ, kv_norm, gamma_kv, q_norm, gamma_q, eps)


def refuse_with(v: Checker, doc: dict[str, Any]) -> None:
    """[mla] defines the heads itself, for self-attention, with its own latent norms: what cannot sit beside it.
    (The tables and keys of the heads it builds refuse it by what it is: a table that replaces the heads' softmax
    (core/variants/refusals.py replaces_softmax), the [attention] form of a key of the heads (a gate's).)"""
    for key, what in (("heads", "[[heads]]"), ("attention", "[attention]")):
        if key in doc:
            raise v.fail(f"[mla] and {what} are both given; [mla] defines the heads itself (expected one of [mla],"
                         " [[heads]] or [attention])")
    if "context" in doc:
        raise v.fail("[mla] needs self-attention (the latent is of the tokens themselves); remove [context] or [mla]")
    if "qk_norm" in doc:
        raise v.fail("[mla] has its own latent norms (kv_norm, q_norm); remove [qk_norm]")


def parse_mla(table: dict[str, Any], ctx: Context) -> Mla:
    mla = read_mla(cast(Reader, ctx.v), table, ctx.d_model)  # the loader's checker reads matrices too
    rope = ctx.earlier.get("rope")
    if isinstance(rope, Rope) and rope.partial != 1.0:  # parse_rope refuses both first; kept for a Context without latent
        raise ctx.v.fail(latent_partial(f"{rope.partial:g}", mla.d_nope, mla.d_rope))
    if isinstance(rope, Rope) and rope.scaling is not None and rope.scaling.type != "yarn":
        raise ctx.v.fail(latent_scaling(rope.scaling.type))
    return replace(mla, rope=rope) if isinstance(rope, Rope) else mla


def write_mla(mla: Mla) -> list[str]:
    """Every key, defaults included; the [rope] it turns its rotary parts by follows it."""
    from qkv_tui.core.toml_text import number as num

    def matrix(m: Matrix) -> str:
        return "[\n" + "".join(f"  {vector(row)},\n" for row in m) + "]"

    lines = ["[mla]", f"num_heads = {mla.num_heads}", f"d_nope = {mla.d_nope}", f"d_rope = {mla.d_rope}",
             f"d_v = {mla.d_v}"]
    for key in MLA_MATRICES:
        m = getattr(mla, key)
        if m is not None:
            lines.append(f"{key} = {matrix(m)}")
    lines += [f"kv_norm = {'true' if mla.kv_norm else 'false'}"]
    if mla.kv_norm:
        lines.append(f"gamma_kv = {vector(mla.gamma_kv)}")
    if mla.W_DQ is not None:
        lines.append(f"q_norm = {'true' if mla.q_norm else 'false'}")
        if mla.q_norm and mla.gamma_q is not None:
            lines.append(f"gamma_q = {vector(mla.gamma_q)}")
    lines.append(f"eps = {num(mla.eps)}")
    if mla.rope is not None:
        lines += ["", *write_rope(mla.rope)]
    return lines


def _summary(mla: Mla) -> str:
    cached, mha = mla.cache_per_token()
    scaling = None if mla.rope is None else mla.rope.scaling
    yarn = "" if scaling is None else f", RoPE {scaling.type} ×{scaling.factor:g}"  # DeepSeek's YaRN
    return (f"latent attention (d_c {mla.d_c}, d_rope {mla.d_rope}: {cached} cached numbers a token against"
            f" {mha}{yarn})")


def trains(ctx: Context) -> tuple[str, ...]:
    """Its own weights in [backward]'s train list, in its heads' W_Q, W_K and W_V's place."""
    m = ctx.earlier.get("mla")
    return mla_weights(m) if isinstance(m, Mla) else ()


# registered in mla_table.py, whose functions are this module's (a scenario without the table loads only that)
TABLE: Table[Mla] = mla_table.TABLE
