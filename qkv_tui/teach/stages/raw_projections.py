"""Every head's Q, K and V as the printed page's inputs give them, before rounding, and the value scale a part
multiplies V by: what Project, QK-norm and Rotate's printed tables all read (its own module so that Rotate,
which [mla]'s stages read, does not import Project, which asks [mla]'s stages for its titles)."""

from __future__ import annotations

from typing import Protocol, cast

from qkv_tui.core.engine import HeadResult
from qkv_tui.core.scenario import Matrix
from qkv_tui.kernels.attention import project
from qkv_tui.kernels.policy import EXACT
from qkv_tui.teach.stages.printed import PrintedChain


class _Scaled(Protocol):
    V_projected: Matrix
    V_factor: float


def value_factor(hr: HeadResult) -> _Scaled | None:
    """The record of a part that multiplies this head's V after the projection (a value scale); None without."""
    return next((cast(_Scaled, r) for r in hr.parts.values() if hasattr(r, "V_factor")), None)


def factor_of(chain: PrintedChain, head: int) -> float:
    scaled = value_factor(chain.comp.heads[head])
    return 1.0 if scaled is None else float(scaled.V_factor)


def raw_projections(chain: PrintedChain) -> tuple[list[Matrix], dict[int, Matrix], dict[int, Matrix]]:
    """Every head's Q, and each K/V head's K and V, computed exactly from the printed X (or X̂), before rounding.

    Worked out once for the page: the cos/sin table's digits depend on the largest Q and K it turns, and the
    whole-number flags read the unrounded values.
    """

    def make() -> tuple[list[Matrix], dict[int, Matrix], dict[int, Matrix]]:
        sc = chain.sc
        X_src = chain.values("X_norm") if sc.norm is not None else sc.X  # what the Query projection reads, as printed
        X_kv_src = sc.context_X if sc.context_X is not None else X_src
        Q_raw = [project(X_src, hr.W_Q, hr.b_Q, EXACT) for hr in sc.heads]
        K_raw = {g: project(X_kv_src, sc.heads[g].W_K, sc.heads[g].b_K, EXACT) for g in chain.readers}
        V_raw = {g: project(X_kv_src, sc.heads[g].W_V, sc.heads[g].b_V, EXACT) * factor_of(chain, g)
                 for g in chain.readers}
        return Q_raw, K_raw, V_raw

    return chain.memo("raw projections", make)
