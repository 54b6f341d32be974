"""``[ssd]``: Mamba-2's state-space duality (Dao and Gu 2024; transformers "mamba2"; contracts §15).

Per head a decay rate A < 0 and a step dt per token (given, or dt = softplus(X·W_dt + dt_bias) as the model
computes it); B and C (n × d_state, shared by the heads of a group); the value stream x (X itself where not
given); the skip D. The layer is shown as the recurrence and as masked attention y = (L ∘ C·Bᵀ)·(dt·x) + D·x
(qkv_tui/kernels/ssd.py). With ``z`` the output is gated and RMS-normalised group by group, as a Mamba-2
layer's (``MambaRMSNormGated``).

The scenario's heads are the table's heads, one each: head h's output is its y (what Concat joins, so its W_V
is d wide), and its own W_Q, W_K and W_V are not read (C, B and x stand in Q's, K's and V's places). Its faces:
core/ssd_part.py (the head pass), teach/stages/ssd.py (the stages), edges/export_ssd.py (the JSON).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, cast

import numpy as np

from qkv_tui.base.values import kind as _kind
from qkv_tui.base.values import show as _show
from qkv_tui.core.arrays import Matrix, Vector
from qkv_tui.core.toml_text import number as num
from qkv_tui.core.toml_text import vector
from qkv_tui.core.variants import ssd_table
from qkv_tui.core.variants.common import MAX_SIZE, Context, Reader, Table, number, numbers, write_whole
from qkv_tui.core.variants.refusals import BUILDS_HEADS, ON_LOGITS, ON_QK, STATE, head_keys, refused
from qkv_tui.core.variants.ssd_table import LOOKALIKES as LOOKALIKES
from qkv_tui.core.variants.ssd_table import SSD_KEYS as SSD_KEYS
from qkv_tui.core.variants.ssd_table import WHERE as WHERE
from qkv_tui.kernels.policy import EXACT, Policy

if TYPE_CHECKING:  # the kernel loads with the first [ssd] run, not with every scenario
    from qkv_tui.kernels.ssd import SsdHeads

DEFAULT_SSD_EPS = 1e-5  # Mamba2Config.layer_norm_epsilon

# what the table cannot combine with: (the key of an earlier table, or what it is; why)
REFUSED_TABLES = (
    (ON_QK, "[ssd] has no Q or K, which [{key}] {table.does} (C and B stand in their places)"),
    (BUILDS_HEADS, "[{key}] builds its own attention heads; [ssd]'s heads are [[heads]] or [attention] heads"),
    (ON_LOGITS, "[ssd] has no softmax, whose logits [{key}] {table.does}"),
    (STATE, "[{key}] and [ssd] each replace the softmax with a state of their own"),
    ("backward", "the gradients through the recurrence, the decays and the gated norm are not in the app yet"),
    ("value_scale", "[ssd] reads x, not the heads' V"),
    ("differential", "[differential] subtracts two softmax maps, and [ssd] has no softmax"),
)


@dataclass(frozen=True, eq=False)
class Ssd:
    """The [ssd] table as the kernel reads it."""

    num_heads: int
    num_groups: int
    A: Vector  # (num_heads,) each < 0
    dt: Matrix | None  # (n, num_heads) the steps as given; None with W_dt
    W_dt: Matrix | None  # (d_model, num_heads): dt = softplus(X·W_dt + dt_bias)
    dt_bias: Vector  # (num_heads,) zeros unless given (only with W_dt)
    dt_limit: tuple[float, float]  # softplus's output clamped to it (Nemotron-H: (time_step_min, ∞)); only with W_dt
    B: Matrix  # (n, num_groups·d_state)
    C: Matrix  # (n, num_groups·d_state)
    x: Matrix | None  # (n, num_heads·d); None: X itself
    D: Vector  # (num_heads,)
    z: Matrix | None  # (n, num_heads·d) the gate; None: no gated norm
    gamma: Vector | None  # (num_heads·d,) with z
    eps: float
    d: int = 0  # each head's share of x (its y's width)
    # the cost view's questions (core/cost.py): a fixed d × d_state state per head in place of a cache
    cache_kind: ClassVar[str] = "ssd"
    state: ClassVar[bool] = True
    # what the closing summary and the heads view call a row of L ∘ C·Bᵀ (core/part_questions.scenario_says)
    looks_heading: ClassVar[str] = "Whose dt·x each token weighs most"
    weights_note: ClassVar[str] = " (L ∘ C·Bᵀ: no softmax; not a distribution)"
    # what each earlier layer of a Mamba-2 model added to the stream (teach/stages/embed.py residual_meaning)
    residual_adds: ClassVar[str] = ("its mixer's output (a Mamba-2 block has no attention and no MLP, and the model"
                                    " adds no position embedding: its recurrence reads the tokens in order)")
    # what a page says it works (core/part_questions.lead)
    lead: ClassVar[tuple[str, str]] = ("Mamba-2's state-space duality, ", "y = (L ∘ C·Bᵀ)·(dt·x) + D·x")
    state_width: ClassVar[str] = "d·d_state"

    @property
    def d_state(self) -> int:
        return int(self.B.shape[1]) // self.num_groups

    @property
    def state_sizes(self) -> tuple[int, ...]:
        return (self.d * self.d_state,) * self.num_heads


def _count(ctx: Context, table: dict[str, Any], key: str, what: str, default: int | None = None) -> int:
    v = ctx.v
    if key not in table:
        if default is not None:
            return default
        raise v.fail(f"{WHERE} is missing {key!r}; expected {key} = <whole number >= 1> ({what})")
    value = table[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise v.fail(f"{WHERE} {key} must be a whole number >= 1 ({what}), got {_kind(value)}{write_whole(value, 1, MAX_SIZE)}")
    if value > MAX_SIZE:
        raise v.fail(f"{WHERE} {key} = {_show(value)}; expected at most {MAX_SIZE:,} ({what})")
    return value


def _matrix(ctx: Context, table: dict[str, Any], key: str, rows: int, rows_are: str, cols: int | None,
            cols_are: str) -> Matrix:
    v = cast(Reader, ctx.v)
    if key not in table:
        raise v.fail(f"{WHERE} is missing {key!r}; expected {rows} rows ({rows_are}) of {cols_are}")
    m = v.matrix(table[key], f"{WHERE} {key}", ctx.tokens if rows == len(ctx.tokens) else ())
    if m.shape[0] != rows:
        raise v.fail(f"{WHERE} {key} has {m.shape[0]} rows; expected {rows_are} = {rows}")
    if cols is not None and m.shape[1] != cols:
        raise v.fail(f"{WHERE} {key} has {m.shape[1]} columns; expected {cols_are} = {cols}")
    return m


def _frozen(a: Vector) -> Vector:
    a.setflags(write=False)
    return a


def parse_ssd(table: dict[str, Any], ctx: Context) -> Ssd:
    v = ctx.v
    if ctx.is_cross:
        raise v.fail(f"{WHERE} needs self-attention (the state runs over the tokens themselves); remove [context] or {WHERE}")
    found = refused(ctx, REFUSED_TABLES)
    if found is not None:
        raise v.fail(f"{WHERE} cannot be used with [{found[0]}]: {found[1]}; expected one of the two tables")
    if ctx.mask_kind != "causal":
        raise v.fail(f'{WHERE} needs mask = "causal", got {ctx.mask_kind!r}: the state runs forward only, so L is 0'
                     " above its diagonal")
    n = len(ctx.tokens)
    H = _count(ctx, table, "num_heads", "how many heads, each with its own A, dt and D")
    G = _count(ctx, table, "num_groups", "how many groups of heads share one B and C", default=1)
    if H % G:
        raise v.fail(f"{WHERE} num_groups = {G} does not divide num_heads = {H}; expected a divisor of {H}"
                     " (each group's heads share one B and C)")
    if "A" not in table:
        raise v.fail(f"{WHERE} is missing 'A'; expected {H} numbers < 0 (each head's decay rate: a_t = e^(dt_t·A))")
    A = numbers(v, table["A"], f"{WHERE} A", H, "each head's decay rate, < 0")
    for h, rate in enumerate(A):
        if rate >= 0:
            raise v.fail(f"{WHERE} A item {h + 1} = {_show(table['A'][h])}; expected a number < 0"
                         " (a_t = e^(dt_t·A) must stay below 1, or the state never forgets)")
    steps = f"num_heads = {H} columns (each token's step dt per head)"
    if "dt" in table and "W_dt" in table:
        raise v.fail(f"{WHERE} gives both dt and W_dt; expected dt (the steps) alone, or W_dt (and dt_bias):"
                     " dt = softplus(X·W_dt + dt_bias)")
    dt = W_dt = None
    if "dt" in table:
        if "dt_bias" in table:
            raise v.fail(f"{WHERE} dt_bias needs W_dt beside it (dt = softplus(X·W_dt + dt_bias)); with dt given,"
                         " remove dt_bias")
        dt = _matrix(ctx, table, "dt", n, "one per token", H, steps)
        bad = np.argwhere(dt <= 0)
        if bad.size:
            r, c = (int(i) for i in bad[0])
            raise v.fail(f"{WHERE} dt row {r + 1}, column {c + 1} = {_show(float(dt[r, c]))}; expected a number > 0"
                         " (a step: softplus's output is always positive)")
    elif "W_dt" in table:
        W_dt = _matrix(ctx, table, "W_dt", ctx.d_model, "d_model, the width of X", H, f"num_heads = {H} columns")
    else:
        raise v.fail(f"{WHERE} is missing the steps: expected dt ({n} rows of {H} numbers > 0) or W_dt"
                     f" ({ctx.d_model} × {H}, dt = softplus(X·W_dt + dt_bias))")
    dt_bias = (numbers(v, table["dt_bias"], f"{WHERE} dt_bias", H, "one per head") if "dt_bias" in table
               else _frozen(np.zeros(H)))
    limit = _limit(ctx, table, W_dt is not None)
    B = _matrix(ctx, table, "B", n, "one per token", None, "num_groups × d_state columns")
    if B.shape[1] % G:
        raise v.fail(f"{WHERE} B has {B.shape[1]} columns; expected num_groups × d_state, a multiple of num_groups = {G}")
    C = _matrix(ctx, table, "C", n, "one per token", int(B.shape[1]), "B's columns, num_groups × d_state")
    x = None
    if "x" in table:
        x = _matrix(ctx, table, "x", n, "one per token", None, "num_heads × d columns")
        width = int(x.shape[1])
    else:
        width = ctx.d_model
    if width % H:
        said = f"x has {width} columns" if x is not None else f"x is X (not given), d_model = {width}"
        raise v.fail(f"{WHERE} {said}; expected a multiple of num_heads = {H} (each head reads d of them)")
    _heads_fit(ctx, H, width // H)
    D = numbers(v, table["D"], f"{WHERE} D", H, "each head's skip, y += D·x") if "D" in table else _frozen(np.zeros(H))
    z = gamma = None
    if "z" in table:
        z = _matrix(ctx, table, "z", n, "one per token", width, "x's columns, num_heads × d")
        if width % G:
            raise v.fail(f"{WHERE} z has {width} columns; expected a multiple of num_groups = {G} (RMSNorm runs over"
                         " each group's columns)")
        gamma = (numbers(v, table["gamma"], f"{WHERE} gamma", width, f"one gain per column of z, {width}")
                 if "gamma" in table else _frozen(np.ones(width)))
    elif "gamma" in table or "eps" in table:
        key = "gamma" if "gamma" in table else "eps"
        raise v.fail(f"{WHERE} {key} needs z beside it (the gated RMSNorm of y·SiLU(z)); add z or remove {key}")
    eps = DEFAULT_SSD_EPS
    if "eps" in table:
        eps = number(v, table["eps"], f"{WHERE} eps")
        if eps <= 0:
            raise v.fail(f"{WHERE} eps = {_show(table['eps'])}; expected a finite number > 0 (it keeps the root away from 0)")
    return Ssd(H, G, A, dt, W_dt, dt_bias, limit, B, C, x, D, z, gamma, eps, width // H)


def _heads_fit(ctx: Context, H: int, d: int) -> None:
    """One scenario head per [ssd] head, each as wide as its y (its W_V's columns: Concat joins y in V's place)."""
    v = ctx.v
    if not ctx.head_tables:  # the parser called on its own (tests): no heads to match
        return
    if len(ctx.heads) != H:
        raise v.fail(f"{WHERE} num_heads = {H}, but the scenario has {len(ctx.heads)} head"
                     f"{'s' if len(ctx.heads) != 1 else ''}; expected one head per [ssd] head")
    for i, head in enumerate(ctx.head_tables):
        name = ctx.heads[i][0]
        for key, words in head_keys(head, "softmax"):
            raise v.fail(f"{name} has {words}, but [ssd] has no softmax for it; expected no {key} with {WHERE}")
        for key, words in head_keys(head, "after_mix"):
            raise v.fail(f"{name} has {words} {key}; [ssd] gates with z instead; expected no {key} with {WHERE}")
        width = int(head.W_V.shape[1])
        if width != d:
            raise v.fail(f"{name}'s W_V has {width} columns; expected d = {d}, the head's share of x (its y takes V's"
                         " place in Concat)")


def _limit(ctx: Context, table: dict[str, Any], computed: bool) -> tuple[float, float]:
    """[dt_min, dt_max], what softplus's output is clamped to (the model's time_step_limit); (0, ∞) by default."""
    v = ctx.v
    given = [key for key in ("dt_min", "dt_max") if key in table]
    if given and not computed:
        raise v.fail(f"{WHERE} {given[0]} needs W_dt beside it (it clamps softplus(X·W_dt + dt_bias)); with dt given,"
                     f" remove {given[0]}")
    low = number(v, table["dt_min"], f"{WHERE} dt_min") if "dt_min" in table else 0.0
    high = number(v, table["dt_max"], f"{WHERE} dt_max") if "dt_max" in table else float("inf")
    if low < 0:
        raise v.fail(f"{WHERE} dt_min = {_show(table['dt_min'])}; expected a number >= 0 (a step is never negative)")
    if high <= low:
        raise v.fail(f"{WHERE} dt_max = {_show(table['dt_max'])}; expected a number > dt_min = {_show(low)}")
    return low, high


def write_ssd(s: Ssd) -> list[str]:
    """Every key, defaults included, so the file says what the scenario computes with."""

    def matrix(m: Matrix) -> str:
        return "[\n" + "".join(f"  {vector(row)},\n" for row in m) + "]"

    lines = [WHERE, f"num_heads = {s.num_heads}", f"num_groups = {s.num_groups}", f"A = {vector(s.A)}"]
    if s.dt is not None:
        lines.append(f"dt = {matrix(s.dt)}")
    if s.W_dt is not None:
        lines += [f"W_dt = {matrix(s.W_dt)}", f"dt_bias = {vector(s.dt_bias)}", f"dt_min = {num(s.dt_limit[0])}"]
        if np.isfinite(s.dt_limit[1]):
            lines.append(f"dt_max = {num(s.dt_limit[1])}")
    lines += [f"B = {matrix(s.B)}", f"C = {matrix(s.C)}"]
    if s.x is not None:
        lines.append(f"x = {matrix(s.x)}")
    lines.append(f"D = {vector(s.D)}")
    if s.z is not None and s.gamma is not None:
        lines += [f"z = {matrix(s.z)}", f"gamma = {vector(s.gamma)}", f"eps = {num(s.eps)}"]
    return lines


def _summary(s: Ssd) -> str:
    return f"state-space duality ({s.num_heads} heads, d_state {s.d_state})"


def run(s: Ssd, X: Matrix, policy: Policy = EXACT) -> tuple[SsdHeads, Matrix]:
    """The table on X (n, d_model): every head both ways, and the layer's y (gated and normalised with z)."""
    from qkv_tui.kernels.ssd import gated_norm, ssd, steps

    dt = s.dt if s.dt is not None else steps(policy.matmul(X, cast(Matrix, s.W_dt)), s.dt_bias, s.dt_limit, policy)
    heads = ssd(X if s.x is None else s.x, dt, s.A, s.B, s.C, s.D, s.num_groups, policy)
    if s.z is None or s.gamma is None:
        return heads, heads.y
    return heads, gated_norm(heads.y, s.z, s.gamma, s.num_groups, s.eps, policy)


# registered in ssd_table.py, whose functions are this module's (a scenario without the table loads only that)
TABLE: Table[Ssd] = ssd_table.TABLE
