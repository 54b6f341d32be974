"""``[norm]``: pre-norm, RMSNorm or LayerNorm on each row of X before the projections (docs/scenario-format.md)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from qkv_tui.base.fixed import fixed
from qkv_tui.base.values import show as _show
from qkv_tui.core.arrays import Vector
from qkv_tui.core.toml_text import string, vector
from qkv_tui.core.variants.common import Context, Table, Trains, choice, number, numbers

NORM_KEYS = ("kind", "gamma", "beta", "eps")
NORM_KINDS = ("rms", "layer")
DEFAULT_EPS = 1e-5


@fixed
class Norm:
    """Normalise each row of X before the projections (pre-norm)."""

    not_plain: ClassVar[str] = "[norm]"  # what makes the attention other than plain (core/diagnose.py)

    kind: str  # "rms" | "layer"
    gamma: Vector  # (d_model,) gains
    beta: Vector | None  # (d_model,) shifts, "layer" only; None = all 0
    eps: float  # added to the mean square (rms) or the variance (layer) under the root


def parse_norm(table: dict[str, Any], ctx: Context) -> Norm:
    v, d_model = ctx.v, ctx.d_model
    if "kind" not in table:
        raise v.fail("[norm] is missing 'kind'; expected kind = \"rms\" (RMSNorm) or \"layer\" (LayerNorm)")
    kind = choice(v, table["kind"], "[norm] kind", NORM_KINDS)
    ones = np.ones(d_model)  # (d_model,)
    ones.setflags(write=False)
    gamma = numbers(v, table["gamma"], "[norm] gamma", d_model, "one gain per column of X, d_model") if "gamma" in table else ones
    beta = None
    if "beta" in table:
        if kind == "rms":
            raise v.fail("[norm] beta is only used with kind = 'layer'; RMSNorm has no shift (remove beta or use 'layer')")
        beta = numbers(v, table["beta"], "[norm] beta", d_model, "one shift per column of X, d_model")
    eps = DEFAULT_EPS
    if "eps" in table:
        eps = number(v, table["eps"], "[norm] eps")
        if eps <= 0:
            raise v.fail(f"[norm] eps = {_show(table['eps'])}; expected a finite number > 0 (it keeps the root away from 0)")
    return Norm(kind, gamma, beta, eps)


def write_norm(norm: Norm) -> list[str]:
    """Every key, defaults included, so the file says what the scenario computes with."""
    lines = ["[norm]", f"kind = {string(norm.kind)}", f"gamma = {vector(norm.gamma)}"]
    if norm.beta is not None:
        lines.append(f"beta = {vector(norm.beta)}")
    lines.append(f"eps = {float(norm.eps)!r}")
    return lines


def trains(ctx: Context) -> tuple[str, ...]:
    """Its gain in [backward]'s train list, and its shift where it gives one."""
    norm = ctx.earlier.get("norm")
    if not isinstance(norm, Norm):
        return ()
    return ("gamma",) if norm.beta is None else ("gamma", "beta")


TABLE: Table[Norm] = Table("norm", NORM_KEYS, parse_norm, lambda norm: f"{norm.kind} norm", write_norm,
                           trains=Trains(("gamma", "beta"), "b_O", trains))
