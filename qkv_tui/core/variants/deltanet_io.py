"""``[deltanet]``'s optional keys for what Qwen3-Next's and Qwen3.5's layers do around the delta rule
(docs/scenario-format.md, "[deltanet]"): the short convolution before it and the gated output norm after it.

- ``conv_q``, ``conv_k``, ``conv_v``: K rows (the taps, the oldest token's first, the current token's last) by
  the heads' Q, K, V columns side by side (head 1's first, as ``[attention]`` cuts them): each column of the
  projection becomes silu(Σ_j conv[j]·x[t − K + 1 + j]), zeros before the first token. All three or none.
- ``W_Z`` (d_model × the heads' d_v side by side), ``gamma_o`` (d_v numbers, shared by the heads) and
  ``eps_o`` (default 1e-6): each head's output o becomes rmsnorm(o)·γ·silu(X̂·W_Z), what W_O reads.
- ``gate_o``: the activation of that gate, "silu" (Qwen3-Next's Qwen3NextRMSNormGated, the default) or "sigmoid"
  (Kimi Linear's KimiLinearRMSNormGated: rmsnorm(o)·γ·σ(X̂·W_Z)).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from qkv_tui.base.values import show as _show
from qkv_tui.core.arrays import Matrix, Vector
from qkv_tui.core.toml_text import number, vector
from qkv_tui.core.variants.common import Context, Reader, numbers, positive
from qkv_tui.core.variants.deltanet_table import IO_KEYS as IO_KEYS
from qkv_tui.core.variants.refusals import ON_QK, last_of

CONV_KEYS = IO_KEYS[:3]
EPS_O = 1e-6  # transformers' rms_norm_eps default for Qwen3-Next and Qwen3.5
MAX_TAPS = 64  # released models use 4; a longer kernel is no short convolution
GATES_O = ("silu", "sigmoid")  # Qwen3-Next's and Qwen3.5's gate, Kimi Linear's


@dataclass(frozen=True, eq=False)
class DeltaIO:
    """Each head's share of the keys, cut from the wide matrices (the file's own matrices kept for write-back)."""

    conv_q: tuple[Matrix, ...] | None  # per head (K, d_k); None without the convolution
    conv_k: tuple[Matrix, ...] | None  # per head (K, d_k)
    conv_v: tuple[Matrix, ...] | None  # per head (K, d_v)
    W_Z: tuple[Matrix, ...] | None  # per head (d_model, d_v); None without the output norm
    gamma_o: Vector | None  # (d_v,)
    eps_o: float
    wide: dict[str, Matrix]  # key -> the matrix as written
    gate_o: str = "silu"  # what gates the output norm: "silu" (Qwen3-Next) or "sigmoid" (Kimi Linear)

    @property
    def taps(self) -> int:
        return 0 if self.conv_q is None else int(self.conv_q[0].shape[0])


def _cut(M: Matrix, widths: list[int]) -> tuple[Matrix, ...]:
    edges = np.cumsum([0, *widths])
    out = []
    for lo, hi in itertools.pairwise(edges):
        part = np.ascontiguousarray(M[:, lo:hi])
        part.setflags(write=False)
        out.append(part)
    return tuple(out)


def parse_io(table: dict[str, Any], ctx: Context) -> DeltaIO | None:
    """The keys' values, or None where the table has none of them."""
    if not any(key in table for key in IO_KEYS):
        return None
    v = cast(Reader, ctx.v)
    d_ks = [d_k for _, d_k in ctx.heads]
    d_vs = [int(head.d_v) for head in ctx.head_tables]
    wide: dict[str, Matrix] = {}
    convs: dict[str, tuple[Matrix, ...]] = {}
    given = [key for key in CONV_KEYS if key in table]
    if given and len(given) < 3:
        missing = next(key for key in CONV_KEYS if key not in table)
        raise v.fail(f"[deltanet] has {given[0]} but not {missing}; expected conv_q, conv_k and conv_v together (the"
                     " short convolution runs over every channel of Q, K and V)")
    taps = None
    for key, widths, role in (("conv_q", d_ks, "Q"), ("conv_k", d_ks, "K"), ("conv_v", d_vs, "V")):
        if key not in table:
            continue
        M = v.matrix(table[key], f"[deltanet] {key}")
        rows = int(M.shape[0])
        if taps is None:
            if rows > MAX_TAPS:
                raise v.fail(f"[deltanet] {key} has {rows} rows; expected at most {MAX_TAPS} taps (a short convolution:"
                             " the released models use 4)")
            taps = rows
        elif rows != taps:
            raise v.fail(f"[deltanet] {key} has {rows} rows but conv_q has {taps}; expected the same kernel size K for"
                         " Q, K and V")
        if M.shape[1] != sum(widths):
            raise v.fail(f"[deltanet] {key} has {M.shape[1]} columns; expected {sum(widths)}, the heads' {role}"
                         f" columns side by side ({' + '.join(map(str, widths))})")
        wide[key], convs[key] = M, _cut(M, widths)
    stepped = last_of(ctx, ON_QK)  # a table that turns or norms Q and K, the one nearest the scores
    if stepped is not None and convs:
        which = f"[{stepped}]"
        raise v.fail(f"[deltanet] conv_q with {which} is not supported: the models convolve the projections"
                     f" themselves, which nothing turns or norms; remove {which} or the convolution")
    W_Z = gamma_o = None
    eps_o, gate_o = EPS_O, "silu"
    if "W_Z" in table:
        M = v.matrix(table["W_Z"], "[deltanet] W_Z")
        if M.shape[0] != ctx.d_model:
            raise v.fail(f"[deltanet] W_Z has {M.shape[0]} rows; expected d_model = {ctx.d_model} (it reads X̂, what"
                         " the projections read)")
        if M.shape[1] != sum(d_vs):
            raise v.fail(f"[deltanet] W_Z has {M.shape[1]} columns; expected {sum(d_vs)}, the heads' d_v side by side"
                         f" ({' + '.join(map(str, d_vs))}), one gate per output column")
        if len(set(d_vs)) != 1:
            raise v.fail(f"[deltanet] W_Z needs every head to have the same d_v (gamma_o is shared), but they have"
                         f" {', '.join(map(str, d_vs))}")
        if "gamma_o" not in table:
            raise v.fail(f"[deltanet] has W_Z but no gamma_o; expected gamma_o = [...] ({d_vs[0]} numbers, the gated"
                         " norm's gain)")
        wide["W_Z"], W_Z = M, _cut(M, d_vs)
        gamma_o = numbers(v, table["gamma_o"], "[deltanet] gamma_o", d_vs[0], "one per output column, d_v")
        if "eps_o" in table:
            eps_o = positive(v, table["eps_o"], "[deltanet] eps_o", " (the gated norm's eps)")
        if "gate_o" in table:
            gate_o = table["gate_o"]
            if gate_o not in GATES_O:
                raise v.fail(f"[deltanet] gate_o = {_show(gate_o)}; expected \"silu\" (Qwen3-Next's gated norm, the"
                             " default) or \"sigmoid\" (Kimi Linear's)")
    else:
        for key in ("gamma_o", "eps_o", "gate_o"):
            if key in table:
                raise v.fail(f"[deltanet] has {key} but no W_Z; expected W_Z (d_model × d_v of every head) with it, the"
                             " gate of the output norm rmsnorm(o)·γ·silu(X̂·W_Z)")
    return DeltaIO(convs.get("conv_q"), convs.get("conv_k"), convs.get("conv_v"), W_Z, gamma_o, eps_o, wide, gate_o)


def _rows(M: Matrix) -> str:
    return "[" + ", ".join(vector(row) for row in M) + "]"


def write_io(io: DeltaIO | None) -> list[str]:
    if io is None:
        return []
    out = [f"{key} = {_rows(io.wide[key])}" for key in ("conv_q", "conv_k", "conv_v", "W_Z") if key in io.wide]
    if io.gamma_o is not None:
        out += [f"gamma_o = {vector(io.gamma_o)}", f"eps_o = {number(io.eps_o)}"]
        if io.gate_o != "silu":  # the default written out only where it is not the default: old files stay as they were
            out.append(f'gate_o = "{io.gate_o}"')
    return out


def summary(io: DeltaIO | None) -> str:
    if io is None:
        return ""
    parts = ([f"a short convolution of {io.taps} taps"] if io.conv_q is not None else []) + \
        ([f"a gated output norm{' (σ gate)' if io.gate_o == 'sigmoid' else ''}"] if io.W_Z is not None else [])
    return ", " + " and ".join(parts)
