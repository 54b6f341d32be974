"""``[differential]``: differential attention (Ye et al. 2024, "Differential Transformer"; Hugging Face "diffllama"),
each head's map the difference of two softmax maps (contracts §14; kernels/differential.py computes it).

A head's W_Q and W_K are 2d wide, [first map | second map], and its W_V 2d wide; every head has the same d, so
the four λ vectors are num_heads × d matrices (one row per head). λ_init is given, or computed from the layer's
depth as the paper does. The per-logit steps every map takes alike (the scale, the soft-cap, the ALiBi bias, the
mask) combine with it; what would have to choose one of the two maps, or replaces the softmax, does not.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar, cast

import numpy as np

from qkv_tui.base.values import kind as _kind
from qkv_tui.base.values import show as _show
from qkv_tui.core.arrays import Matrix, Vector
from qkv_tui.core.toml_text import vector
from qkv_tui.core.variants import differential_table
from qkv_tui.core.variants.common import (
    MAX_INDEX,
    Context,
    Reader,
    Table,
    number,
    numbers,
    write_whole,
)
from qkv_tui.core.variants.differential_table import DIFFERENTIAL_KEYS as DIFFERENTIAL_KEYS
from qkv_tui.core.variants.differential_table import LAMBDA_KEYS as LAMBDA_KEYS
from qkv_tui.core.variants.differential_table import LOOKALIKES as LOOKALIKES
from qkv_tui.core.variants.refusals import BUILDS_HEADS, STATE, WHOLE_HEAD, head_keys, refused

if TYPE_CHECKING:  # the kernel loads with the first [differential] scenario read, not with every start-up
    from qkv_tui.kernels.differential import DiffHead

GAMMA_NAME = "gamma_sub"  # the sub-norm's gains in a [backward] train list ("gamma" is [norm]'s)
DEFAULT_DIFF_EPS = 1e-5
MAX_EXPONENT = 709.0  # e^709 is the largest power of e below float64's limit (e^710 overflows)

# what the table cannot combine with: (the key of an earlier table, why)
REFUSED_TABLES = (
    (WHOLE_HEAD, "[{key}] {table.does} a head's whole d_k, while each map scores half of it; no model does either"),
    (BUILDS_HEADS, "[{key}] builds its own heads; differential heads are [[heads]] or [attention] heads"),
    (STATE, "[{key}] replaces the softmax, and [differential] subtracts two softmax maps"),
    ("value_scale", "[differential]'s kernel projects its own 2d-wide V, which the value scale would not reach"),
)


@dataclass(frozen=True, eq=False)
class Differential:
    """Every head's λ vectors, λ_init and the sub-norm."""

    lambda_q1: Matrix  # (num_heads, d)
    lambda_k1: Matrix  # (num_heads, d)
    lambda_q2: Matrix  # (num_heads, d)
    lambda_k2: Matrix  # (num_heads, d)
    lambda_init: float  # as given, or 0.8 − 0.6·e^(−0.3·layer)
    layer: int | None  # the layer λ_init was computed from; None where lambda_init is given
    eps: float  # the sub-norm's eps
    gamma: Vector | None  # (2d,) the sub-norm's gains; None: no gain
    # what the closing summary and the heads view add about a row of the map (core/part_questions.scenario_says)
    weights_note: ClassVar[str] = " (p₁ − λ·p₂: rows sum to 1 − λ, a cell may be negative)"
    # what a page says it works (core/part_questions.lead)
    lead: ClassVar[tuple[str, str]] = ("Differential attention, ",
                                       "(1 − λ_init)·SubNorm((softmax(Q₁K₁ᵀ/√d) − λ·softmax(Q₂K₂ᵀ/√d))V)")

    @property
    def d(self) -> int:
        """The half width: each map's d_k."""
        return int(self.lambda_q1.shape[1])

    @property
    def score_width(self) -> int:
        """Each of a head's two scores reads one half of its Q and K columns (core/part_questions.py score_width)."""
        return self.d

    def trained(self, grads: Sequence[Any], rule: Callable[[tuple[str, int | None], Matrix, Matrix], Matrix],
                train: Collection[str], frozen: Callable[[Matrix], Matrix]) -> Differential:
        """One training step on the λ vectors and the sub-norm's gains ``train`` names (core/training.py): ``grads``
        are the heads' gradients, each with its own DiffBack (``own``); each head's λ rows move by its own
        gradient, the gains every head shares by their sum."""
        changes: dict[str, Any] = {}
        for key in LAMBDA_KEYS:
            if key in train:
                rows = np.stack([getattr(hg.own, "d" + key) for hg in grads])  # (num_heads, d)
                changes[key] = frozen(rule((key, None), getattr(self, key), rows))
        if GAMMA_NAME in train and self.gamma is not None:
            total = np.sum([hg.own.dgamma for hg in grads], axis=0)  # (2d,)
            changes["gamma"] = frozen(rule((GAMMA_NAME, None), self.gamma, total))
        return replace(self, **changes) if changes else self

    def train_params(self, grads: Sequence[Any]) -> list[tuple[str, Matrix | None, Matrix | None]]:
        """Each array trained() moves, as its train name, its value and its gradient (teach/train_walk.py lists
        them beside the heads' weights): a λ vector one row per head, the sub-norm's gains summed over the heads."""
        out: list[tuple[str, Matrix | None, Matrix | None]] = [
            (key, getattr(self, key), np.stack([getattr(hg.own, "d" + key) for hg in grads])) for key in LAMBDA_KEYS]
        if self.gamma is not None:
            out.append((GAMMA_NAME, self.gamma, np.sum([hg.own.dgamma for hg in grads], axis=0)))
        return out

    def trained_note(self, start: Differential, h: int, name: str, decimals: int) -> str:
        """The Train view's line for head ``h``: λ, what the trained vectors make, at step 0 (``start``) and now."""
        from qkv_tui.core.fmt import fmt
        from qkv_tui.kernels.differential import diff_lambda

        was, now = diff_lambda(start.head(h)).value, diff_lambda(self.head(h)).value
        return (f"λ ({name}) = e^(λ_q1·λ_k1) − e^(λ_q2·λ_k2) + λ_init: {fmt(was, False, decimals)} at step 0,"
                f" {fmt(now, False, decimals)} now (each row of its map sums to 1 − λ)")

    def head(self, h: int) -> DiffHead:
        """What the kernel reads for head ``h`` (0-based)."""
        from qkv_tui.kernels.differential import DiffHead

        return DiffHead(self.lambda_q1[h], self.lambda_k1[h], self.lambda_q2[h], self.lambda_k2[h], self.lambda_init,
                        self.eps, self.gamma)


def parse_differential(table: dict[str, Any], ctx: Context) -> Differential:
    v = ctx.v
    _refuse_with(ctx)
    d = _half_width(ctx)
    H = len(ctx.heads)
    lambdas = []
    for key in LAMBDA_KEYS:
        if key not in table:
            raise v.fail(f"[differential] is missing {key!r}; expected {key} = [[...]], num_heads × d = {H} × {d}"
                         f" (one row per head, d = half of a head's W_Q width)")
        lambdas.append(_grid(v, table[key], f"[differential] {key}", H, d))
    for h in range(H):
        for q, k in ((0, 1), (2, 3)):
            with np.errstate(over="ignore", invalid="ignore"):
                dot = float(lambdas[q][h] @ lambdas[k][h])
            name = ctx.heads[h][0]
            if math.isnan(dot) or dot == -math.inf:  # NaN: products past float64 of opposite signs
                # e^ of it would be 0, but no line can show the product it came from (it is past float64)
                raise v.fail(f"[differential] {LAMBDA_KEYS[q]}·{LAMBDA_KEYS[k]} for {name} is past float64; expected"
                             f" a dot product of at most {MAX_EXPONENT:g} whose terms and sum float64 can hold")
            if not dot <= MAX_EXPONENT:
                raise v.fail(f"[differential] {LAMBDA_KEYS[q]}·{LAMBDA_KEYS[k]} for {name} is {dot:g}, and e^ of it"
                             f" overflows float64; expected a dot product of at most {MAX_EXPONENT:g}")
    lambda_init, layer = _lambda_init(v, table)
    eps = DEFAULT_DIFF_EPS
    if "eps" in table:
        eps = number(v, table["eps"], "[differential] eps")
        if eps <= 0:
            raise v.fail(f"[differential] eps = {_show(table['eps'])}; expected a finite number > 0"
                         " (it keeps the sub-norm's root away from 0)")
    gamma = None
    if "gamma" in table:
        gamma = numbers(v, table["gamma"], "[differential] gamma", 2 * d, f"the sub-norm's gains, 2d = {2 * d}")
    q1, k1, q2, k2 = lambdas
    return Differential(q1, k1, q2, k2, lambda_init, layer, eps, gamma)


def _refuse_with(ctx: Context) -> None:
    v = ctx.v
    found = refused(ctx, REFUSED_TABLES)
    if found is not None:
        raise v.fail(f"[differential] cannot be used with [{found[0]}]: {found[1]}; expected one of the two tables")
    for i, head in enumerate(ctx.head_tables):
        name = ctx.heads[i][0]
        for key, words in head_keys(head, "joins_sum"):
            raise v.fail(f"{name} has {words}, but [differential] has two softmax maps and {words} joins one softmax;"
                         f" expected no {key} with [differential]")
        for key, words in head_keys(head, "after_mix"):
            raise v.fail(f"{name} has {words} {key}, but [differential] does not say whether it gates before or"
                         f" after the sub-norm; expected no {key} with [differential]")


def _half_width(ctx: Context) -> int:
    """d, from the heads: every W_Q and W_K 2d wide (d the same for every head), every W_V 2d wide."""
    v = ctx.v
    widths = set()
    for i, head in enumerate(ctx.head_tables):
        name = ctx.heads[i][0]
        for what, M in (("W_Q", head.W_Q), ("W_K", head.W_K)):
            if M.shape[1] % 2:
                raise v.fail(f"[differential] needs {name}'s {what} to have an even number of columns, 2d"
                             f" ([{what[-1]}₁ | {what[-1]}₂], one half per map), but it has {M.shape[1]}")
        d = head.W_Q.shape[1] // 2
        if head.W_V.shape[1] != 2 * d:
            raise v.fail(f"[differential] needs {name}'s W_V to have 2d = {2 * d} columns (as wide as its W_Q: both"
                         f" maps mix the same 2d-wide values), but it has {head.W_V.shape[1]}")
        widths.add((d, name))
    if len({d for d, _ in widths}) > 1:
        said = ", ".join(f"{name} has d = {d}" for d, name in sorted(widths)[:4])
        raise v.fail(f"[differential] needs every head to have the same half width d (the λ vectors are num_heads × d),"
                     f" but {said}; expected one W_Q width for every head")
    d = next(iter(widths))[0]
    for key, table in ctx.earlier.items():  # a step on Q and K runs on each half as on a head d wide
        refusal = getattr(table, "block_refusal", None)
        why = refusal(d, 2 * d) if callable(refusal) else None
        if why is not None:  # what the table does to Q and K is its ``does`` (core/variants/refusals.py)
            raise v.fail(f"[differential] with [{key}] {cast(Any, table).does} each half of a head on its own, {why}")
    return int(d)


def _grid(v: Any, value: Any, key: str, rows: int, d: int) -> Matrix:
    if not isinstance(value, list):
        raise v.fail(f"{key} must be a list of {rows} row{'s' if rows != 1 else ''} (num_heads × d = {rows} × {d}),"
                     f" got {_kind(value)}")
    M = cast(Reader, v).matrix(value, key)
    if M.shape[0] != rows:
        raise v.fail(f"{key} has {M.shape[0]} row{'s' if M.shape[0] != 1 else ''}; expected num_heads = {rows},"
                     " one per head")
    if M.shape[1] != d:
        raise v.fail(f"{key} has {M.shape[1]} column{'s' if M.shape[1] != 1 else ''}; expected d = {d}"
                     " (half of a head's W_Q width)")
    return M


def _lambda_init(v: Any, table: dict[str, Any]) -> tuple[float, int | None]:
    if "lambda_init" in table and "layer" in table:
        raise v.fail("[differential] has both lambda_init and layer; expected lambda_init = <number> or layer = L,"
                     " from which λ_init = 0.8 − 0.6·e^(−0.3·L)")
    if "lambda_init" in table:
        return number(v, table["lambda_init"], "[differential] lambda_init"), None
    if "layer" not in table:
        raise v.fail("[differential] is missing 'lambda_init'; expected lambda_init = <number>, or layer = L"
                     " (0-based) for the paper's λ_init = 0.8 − 0.6·e^(−0.3·L)")
    L = table["layer"]
    if isinstance(L, bool) or not isinstance(L, int):
        raise v.fail(f"[differential] layer must be a whole number >= 0 (the layer's depth, counted from 0), got"
                     f" {_kind(L)}{write_whole(L, 0)}")
    if not 0 <= L <= MAX_INDEX:
        raise v.fail(f"[differential] layer = {_show(L)}; expected a whole number >= 0 (the layer's depth, counted from 0)"
                     f" up to {MAX_INDEX}")
    from qkv_tui.kernels.differential import lambda_init_of_layer

    return lambda_init_of_layer(L), int(L)


def _rows(M: Matrix) -> str:
    return "[" + ", ".join(vector(row) for row in M) + "]"


def write_differential(df: Differential) -> list[str]:
    """Every key, eps included, so the file says what the scenario computes with; λ_init as it was given."""
    out = ["[differential]", *(f"{key} = {_rows(getattr(df, key))}" for key in LAMBDA_KEYS)]
    out.append(f"layer = {df.layer}" if df.layer is not None else f"lambda_init = {float(df.lambda_init)!r}")
    out.append(f"eps = {float(df.eps)!r}")
    if df.gamma is not None:
        out.append(f"gamma = {vector(df.gamma)}")
    return out


def _summary(df: Differential) -> str:
    where = f"layer {df.layer}" if df.layer is not None else "given"
    return f"differential attention (λ_init {df.lambda_init:.4g}, {where})"


def trainable(table: dict[str, Any]) -> tuple[str, ...]:
    """The weights [backward] trains by default where the file has [differential]: the four λ vectors, and the
    sub-norm's gains where the table gives them (read from the table as written: [backward] is parsed first)."""
    return LAMBDA_KEYS + ((GAMMA_NAME,) if "gamma" in table else ())


# registered in differential_table.py, whose functions are this module's (a scenario without the table loads only that)
TABLE: Table[Differential] = differential_table.TABLE
