"""How the first variants read a head backwards, one module here per variant (rope.py, sinks.py, ...).

core/gradients.py walks :func:`faces` and never names these variants: what a head's softmax backward takes from a
variant's record (the sink's share of each row, the soft-cap), a part around the head's output read back first (the
gate), a map that is no softmax read back in the softmax's place ([linear], [deltanet]), the turn RoPE gives back,
QK-norm read backwards across the heads, and each variant's own paths into X̂. What a variant reads backwards is its
record on the head's gradients (``HeadGrad.part``) or on the layer's (``Gradients.part``), keyed by its type, as a
head's forward records are. A variant registers by having its module here. (A part registered since [differential]
reads itself backwards through its record's ``backward``.)
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
    from qkv_tui.kernels.attention_backward import AttendBack
    from qkv_tui.kernels.policy import Policy

# each head's dQ and dK at the projections, each head's share of the gains' gradients, the gains' own gradients
QKBack = tuple[list["Matrix"], list["Matrix"], list[Any], list[Any], Any, Any]
# a path into X̂ beside the projections': (the gradient at what a weight gave, that weight), n × w and d_model × w
Path = tuple["Matrix", "Matrix"]


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
    # (head, the gradient at what Concat joins, X̂, policy) -> (the gradient at the head's own output, the variant's
    # record of it read back), or None where the head has no such part around its output
    output_back: Callable[[HeadResult, Matrix, Matrix, Policy], tuple[Matrix, object] | None] | None = None
    # (scenario, head, the gradient at its output, policy) -> (the head's map read back as a softmax's would be, with
    # dV, dQ_used and dK_used to carry on; the variant's record), or None where the head's map is a softmax
    map_back: Callable[[Scenario, HeadResult, Matrix, Policy], tuple[AttendBack, object] | None] | None = None
    # (head, its gradients: core/gradients.py HeadGrad, which imports this module) -> the variant's paths into X̂
    # from that head, after the head's Query, Key and Value
    paths: Callable[[HeadResult, Any], list[Path]] | None = None
    # (computation, every head's HeadGrad, policy) -> (the variant's record of the layer read back, its paths into X̂
    # after every head's), or None where it has none
    layer_back: Callable[[Computation, list[Any], Policy], tuple[object, list[Path]] | None] | None = None


@cache
def faces() -> tuple[GradFace, ...]:
    """Every variant's face, in the order ``--check`` names the features."""
    found = [importlib.import_module(f"{__name__}.{m.name}").FACE for m in pkgutil.iter_modules(__path__)]
    order = {id(f): i for i, f in enumerate(FEATURES)}
    return tuple(sorted(found, key=lambda f: order[id(f.feature)]))


def options(h: HeadResult) -> dict[str, Any]:
    """What the head's softmax backward takes from its variants' records."""
    return {k: v for f in faces() if f.options is not None for k, v in f.options(h).items()}
