"""How the first variants read a head backwards, one module here per variant (rope.py, sinks.py, ...).

core/gradients.py walks :func:`faces` and never names these variants: what a head's softmax backward takes from a
variant's record (the sink's share of each row, the soft-cap), the turn RoPE gives back, QK-norm read backwards
across the heads. A variant registers by having its module here. (A part registered since [differential] reads
itself backwards through its record's ``backward``.)
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from qkv_tui.core.variants import FEATURES

if TYPE_CHECKING:
    from qkv_tui.core.engine import Computation
    from qkv_tui.core.head import HeadResult
    from qkv_tui.core.scenario import Matrix, Scenario
    from qkv_tui.kernels.attention import Turn
    from qkv_tui.kernels.policy import Policy

# each head's dQ and dK at the projections, each head's share of the gains' gradients, the gains' own gradients
QKBack = tuple[list["Matrix"], list["Matrix"], list[Any], list[Any], Any, Any]


@dataclass(frozen=True)
class GradFace:
    """One variant's part in the backward pass."""

    feature: object  # its entry in core/variants FEATURES: orders the faces
    # (head) -> the keyword arguments the head's softmax backward takes from the variant's record ({} without it)
    options: Callable[[HeadResult], Mapping[str, Any]] | None = None
    # (scenario, head, dQ_used, dK_used, policy, the page's cos/sin by d_k or None) -> (dQ and dK where they were
    # turned, dQ and dK before the turn), or None where the scenario turns nothing
    turn_back: Callable[[Scenario, HeadResult, Matrix, Matrix, Policy, Mapping[int, Turn] | None],
                        tuple[Matrix, Matrix, Matrix, Matrix] | None] | None = None
    # (computation, each head's dQ and dK before the turn, policy) -> QKBack, or None where the scenario has none of it
    heads_back: Callable[[Computation, list[Matrix], list[Matrix], Policy], QKBack | None] | None = None


@cache
def faces() -> tuple[GradFace, ...]:
    """Every variant's face, in the order ``--check`` names the features."""
    found = [importlib.import_module(f"{__name__}.{m.name}").FACE for m in pkgutil.iter_modules(__path__)]
    order = {id(f): i for i, f in enumerate(FEATURES)}
    return tuple(sorted(found, key=lambda f: order[id(f.feature)]))


def options(h: HeadResult) -> dict[str, Any]:
    """What the head's softmax backward takes from its variants' records."""
    return {k: v for f in faces() if f.options is not None for k, v in f.options(h).items()}
