"""Kimi Delta Attention's keys in ``[deltanet]`` (contracts: a forget gate per key channel): the log decay g given
per token, head and key channel, or computed from Kimi Linear's low-rank gate projections (kernels/kda.py).

    g = [[[...d_k...], ...num_heads...], ...n...]     # n × num_heads × d_k
    or
    W_fa = [[...]]        # d_model × r: X̂·W_fa, the gate's bottleneck (Kimi Linear's f_a_proj; r = d_k there)
    W_fb = [[...]]        # r × (num_heads·d_k): each head's channels side by side (f_b_proj)
    A_log = [...]         # num_heads: −e^{A_log} is each head's rate
    dt_bias = [[...]]     # num_heads × d_k: one bias per key channel, added before the softplus

β stays ``[deltanet]``'s (``beta`` or ``W_b``). Not registered: [deltanet]'s parser hands a table here when
:func:`per_channel` says it is written the KDA way, once the engine runs kernels/kda.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from qkv_tui.base.values import kind as _kind
from qkv_tui.core.arrays import Matrix, Vector
from qkv_tui.core.toml_text import vector
from qkv_tui.core.variants.common import Checker, Context, Reader, numbers

KDA_GATE_KEYS = ("g", "W_fa", "W_fb", "A_log", "dt_bias")
QWEN_GATE_KEYS = ("W_a", "A_log", "dt_bias")  # [deltanet]'s one-gate-per-head reading


@dataclass(frozen=True, eq=False)
class KdaGates:
    """Each channel's log decay, given or from Kimi Linear's weights; every array read-only."""

    g: tuple[Matrix, ...] | None  # per head (n, d_k): the log decay given; None: computed from W_fa, W_fb, …
    W_fa: Matrix | None = None  # (d_model, r)
    W_fb: Matrix | None = None  # (r, Σ d_k), the heads' channels side by side
    A_log: Vector | None = None  # (num_heads,)
    dt_bias: tuple[Vector, ...] | None = None  # per head (d_k,)


def per_channel(table: dict[str, Any]) -> bool:
    """True where a [deltanet] table is written the KDA way: W_fa given, or g's rows hold one list per head."""
    if "W_fa" in table or "W_fb" in table:
        return True
    g = table.get("g")
    return (isinstance(g, list) and bool(g) and isinstance(g[0], list) and bool(g[0])
            and isinstance(g[0][0], list))


def _channels(v: Checker, value: Any, key: str, d_k: int) -> Vector:
    return numbers(v, value, key, d_k, f"one per key channel of the head, d_k = {d_k}")


def _per_head(v: Checker, value: Any, key: str, ctx: Context, what: str) -> list[Vector]:
    heads = len(ctx.heads)
    if not isinstance(value, list):
        raise v.fail(f"{key} must be a list of {heads} lists ({what}), got {_kind(value)}")
    if len(value) != heads:
        raise v.fail(f"{key} has {len(value)} list{'s' if len(value) != 1 else ''}; expected {heads}, one per head")
    return [_channels(v, item, f"{key} head {h + 1}", d_k) for h, (item, (_, d_k)) in enumerate(zip(value, ctx.heads))]


def _given_g(v: Checker, value: Any, ctx: Context) -> tuple[Matrix, ...]:
    n, key = len(ctx.tokens), "[deltanet] g"
    if not isinstance(value, list):
        raise v.fail(f"{key} must be a list of {n} rows (n × num_heads × d_k, each channel's log decay), got {_kind(value)}")
    if len(value) != n:
        raise v.fail(f"{key} has {len(value)} row{'s' if len(value) != 1 else ''}; expected {n}, one per token")
    rows = [_per_head(v, row, f"{key} row {r + 1}", ctx, "one per head, each d_k log decays")
            for r, row in enumerate(value)]
    out = []
    for h, (name, _) in enumerate(ctx.heads):
        grid = np.stack([row[h] for row in rows])  # (n, d_k)
        if (grid > 0).any():
            r, c = (int(i) for i in np.argwhere(grid > 0)[0])
            raise v.fail(f"{key} row {r + 1}, {name}, channel {c + 1} is {grid[r, c]:g}; expected g <= 0 (a log decay:"
                         " e^g <= 1 shrinks the state, e^g > 1 would grow it without bound)")
        grid.setflags(write=False)
        out.append(grid)
    return tuple(out)


def parse_kda_gates(table: dict[str, Any], ctx: Context) -> KdaGates:
    """The g part of a [deltanet] table written the KDA way (:func:`per_channel`); β is [deltanet]'s to parse."""
    v = ctx.v
    if "W_a" in table:
        raise v.fail("[deltanet] has both W_a and a per-channel gate; expected W_a (one decay per head, Qwen3-Next)"
                     " or W_fa, W_fb (one per key channel, Kimi Linear)")
    if "g" in table:
        for key in ("W_fa", "W_fb", "A_log", "dt_bias"):
            if key in table:
                raise v.fail(f"[deltanet] has both g and {key}; expected g (n × num_heads × d_k) or W_fa, W_fb, A_log"
                             " and dt_bias, from which g is computed")
        return KdaGates(_given_g(v, table["g"], ctx))
    missing = [k for k in ("W_fa", "W_fb", "A_log", "dt_bias") if k not in table]
    if missing:
        raise v.fail(f"[deltanet] is missing {missing[0]!r}; expected W_fa (d_model × r), W_fb (r × num_heads·d_k),"
                     " A_log (num_heads) and dt_bias (num_heads × d_k), as Kimi Linear computes g")
    reader = cast(Reader, v)
    W_fa = reader.matrix(table["W_fa"], "[deltanet] W_fa")
    if W_fa.shape[0] != ctx.d_model:
        raise v.fail(f"[deltanet] W_fa has {W_fa.shape[0]} rows; expected d_model = {ctx.d_model}"
                     " (it reads X̂, what the projections read)")
    W_fb = reader.matrix(table["W_fb"], "[deltanet] W_fb")
    if W_fb.shape[0] != W_fa.shape[1]:
        raise v.fail(f"[deltanet] W_fb has {W_fb.shape[0]} rows; expected {W_fa.shape[1]}, W_fa's columns (the bottleneck r)")
    widths = {d_k for _, d_k in ctx.heads}
    if len(widths) > 1:
        raise v.fail(f"[deltanet] W_fa and W_fb need every head's d_k equal, as Kimi Linear's (got d_k ="
                     f" {', '.join(str(d) for _, d in ctx.heads)}); expected equal widths, or g given per channel")
    channels = sum(d_k for _, d_k in ctx.heads)
    if W_fb.shape[1] != channels:
        raise v.fail(f"[deltanet] W_fb has {W_fb.shape[1]} columns; expected {channels}, every head's d_k key channels"
                     " side by side")
    A_log = numbers(v, table["A_log"], "[deltanet] A_log", len(ctx.heads), "one per head, num_heads")
    dt_bias = _per_head(v, table["dt_bias"], "[deltanet] dt_bias", ctx, "one per head, each d_k biases")
    for b in dt_bias:
        b.setflags(write=False)
    return KdaGates(None, W_fa, W_fb, A_log, tuple(dt_bias))


def _rows(M: Matrix) -> str:
    return "[" + ", ".join(vector(row) for row in M) + "]"


def write_kda_gates(kg: KdaGates) -> list[str]:
    """The g lines of a [deltanet] table; what :func:`parse_kda_gates` reads back to the same values."""
    if kg.g is not None:
        n = kg.g[0].shape[0]
        rows = ("[" + ", ".join(vector(head[t]) for head in kg.g) + "]" for t in range(n))
        return [f"g = [{', '.join(rows)}]"]
    assert kg.W_fa is not None and kg.W_fb is not None and kg.A_log is not None and kg.dt_bias is not None
    return [f"W_fa = {_rows(kg.W_fa)}", f"W_fb = {_rows(kg.W_fb)}", f"A_log = {vector(kg.A_log)}",
            f"dt_bias = [{', '.join(vector(b) for b in kg.dt_bias)}]"]


def summary(kg: KdaGates) -> str:
    """Its part of the ``--check`` line, saying when it is Gated DeltaNet after all."""
    if kg.g is None:
        return "g per key channel from W_fa, W_fb, A_log and dt_bias (Kimi Delta Attention)"
    if all((head == head[:, :1]).all() for head in kg.g):
        return "g per key channel, every channel's equal (Gated DeltaNet's rule)"
    return "g per key channel (Kimi Delta Attention)"


def kernel_weights(kg: KdaGates) -> tuple[Matrix, Matrix, Vector, Vector]:
    """(W_fa, W_fb, A_log, dt_bias) as kernels/kda.channel_gates takes them (dt_bias flat, H·d_k)."""
    assert kg.W_fa is not None and kg.W_fb is not None and kg.A_log is not None and kg.dt_bias is not None
    return kg.W_fa, kg.W_fb, np.asarray(kg.A_log), np.concatenate(kg.dt_bias)
