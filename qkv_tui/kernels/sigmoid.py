"""The logistic function as the by-hand policy works it: an output gate's, the delta rule's β and the routers' read it."""

from __future__ import annotations

import numpy as np

from qkv_tui.kernels.policy import EXACT, Policy
from qkv_tui.kernels.stats import Matrix


def sigmoid(logit: Matrix, policy: Policy = EXACT) -> Matrix:
    """1 / (1 + e^−z), as a person works it: e^−z written down, then 1 + e^−z, then the quotient.

    A very negative z makes e^−z overflow to ∞ and the gate exactly 0, which is its limit (closed)."""
    with np.errstate(over="ignore"):
        e = policy.worked(np.exp(-logit))  # (n, d_v)
    return policy.table(1.0 / policy.worked(1.0 + e))
