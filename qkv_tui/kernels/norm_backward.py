"""RMSNorm and LayerNorm read backwards (kernels/norm.py's normalise): the gradient at each row's input from
the gradient at its output, and the gains' and shifts' gradients (docs/backward.md)."""

from __future__ import annotations

from dataclasses import dataclass

from qkv_tui.kernels.attention_backward import row_dots
from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.stats import Matrix


@dataclass(frozen=True, eq=False)
class NormBack:
    dX: Matrix  # (rows, width) the gradient at the norm's input
    dgamma: Matrix  # (width,) Σ over rows of dY ⊙ x̂
    dbeta: Matrix  # (width,) Σ over rows of dY (LayerNorm's shift; RMSNorm has none)


def norm_backward(kind: str, X: Matrix, mean: Matrix, root: Matrix, gamma: Matrix, dY: Matrix,
                  policy: Policy = EXACT) -> NormBack:
    """y = x̂·γ (+ β), x̂ = (x − mean) / root, root = √(spread + eps), over each row of X (rows, width).

    Each x̂ of a row reads every x of the row through the row's statistics, so the gradient has a
    direct part, minus what the root (and, for LayerNorm, the mean) passes back:
    dx = (g − mean(g) − x̂·mean(g ⊙ x̂)) / root with g = dY ⊙ γ (RMSNorm drops the mean(g) term, its
    mean is 0 by definition)."""
    xhat = policy.table((X - mean[:, None]) / root[:, None])  # (rows, width)
    g = dY * gamma[None, :]  # (rows, width)
    # by hand each row's mean is one line worked from the shown numbers, then written down, and each cell too
    inner = policy.table((g * xhat).mean(axis=1))  # (rows,)
    d = g - xhat * inner[:, None]
    if kind == "layer":
        d = d - policy.table(g.mean(axis=1))[:, None]
    return NormBack(policy.table(d / root[:, None]), row_dots(dY.T, xhat.T, policy),
                    policy.table(dY.sum(axis=0)))


def row_means(gamma: Matrix, dY: Matrix, xhat: Matrix) -> tuple[Matrix, Matrix]:
    """What norm_backward subtracts, for the screens that show it: each row's m = mean(γ·dY·x̂) and
    ḡ = mean(γ·dY), (rows,) each (x̂ as kept)."""
    g = dY * gamma[None, :]  # (rows, width)
    m: Matrix = (g * xhat).mean(axis=1)
    gbar: Matrix = g.mean(axis=1)
    return m, gbar
