"""The weights the first variants add to [backward]'s training, one module here per variant (gate.py, sinks.py, ...).

Each module's ``FACE`` (:class:`TrainFace`) lists the arrays its variant gives, each with its gradient and how a new
value goes back into the scenario (:class:`Weight`). core/training.py steps them and the Train view
(teach/train_walk.py) lists them, walking :func:`faces` without naming a variant; a face's arrays go at a fixed
place among the layer's own (``before`` one of their names, or at the end), faces at one place in the order
``--check`` names their features (core/variants FEATURES), so the Train view's order stays the documented one.
A variant registers by having its module here. (A part registered since [differential] trains its own weights
through its table's value: ``trained`` and ``train_params``.)
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from qkv_tui.core.variants import FEATURES

if TYPE_CHECKING:
    from qkv_tui.core.gradients import Gradients
    from qkv_tui.core.scenario import Matrix, Scenario


@dataclass(frozen=True, eq=False)
class Weight:
    """One array [backward] may train, at one step: its value, its gradient and where a new value goes."""

    train: str  # its name in a [backward] train list ("W_G", "sinks")
    name: str  # the Train view's name of it ("sink")
    head: int | None  # the query head it belongs to (a K/V head's: its first reader); None for the layer's
    value: Any  # Matrix (a sink's logit as a 0-d array); None where the scenario gives none
    grad: Any  # its gradient, the same shape; None where the backward has none
    put: Callable[[Scenario, Matrix], Scenario]  # (scenario, the new value) -> the scenario with it
    bare: bool = False  # one number, which the views write without an index (a head's sink logit)


@dataclass(frozen=True)
class TrainFace:
    """One variant's trainable arrays."""

    feature: object  # its entry in core/variants FEATURES: orders the faces that share a place
    # (scenario, gradients, query head h) -> head h's arrays of the variant, before the head's array named
    # ``head_before`` ("" at the head's end)
    head: Callable[[Scenario, Gradients, int], list[Weight]] | None = None
    head_before: str = ""
    # (scenario, gradients) -> the variant's arrays of the whole layer, before the layer's array named ``layer_before``
    layer: Callable[[Scenario, Gradients], list[Weight]] | None = None
    layer_before: str = ""
    # (scenario) -> whether the variant's table holds every head's projections ([mla]'s latent layer): its layer
    # arrays then stand for every head's and every other variant's, and ``heads_from`` gives the heads after a step
    owns_heads: Callable[[Scenario], bool] | None = None
    heads_from: Callable[[Scenario], Scenario] | None = None


@cache
def faces() -> tuple[TrainFace, ...]:
    """Every variant's face, in the order ``--check`` names the features."""
    found = [importlib.import_module(f"{__name__}.{m.name}").FACE for m in pkgutil.iter_modules(__path__)]
    order = {id(f): i for i, f in enumerate(FEATURES)}
    return tuple(sorted(found, key=lambda f: order[id(f.feature)]))


def owner(sc: Scenario) -> TrainFace | None:
    """The face whose table holds every head's projections, where the scenario has one."""
    return next((f for f in faces() if f.owns_heads is not None and f.owns_heads(sc)), None)


def placed(own: Sequence[Weight], extra: Sequence[tuple[str, list[Weight]]]) -> list[Weight]:
    """``own`` with each of ``extra``'s weights before the array it names ("" at the end)."""
    out: list[Weight] = []
    for w in own:
        out += [x for before, ws in extra if before == w.train for x in ws]
        out.append(w)
    return out + [x for before, ws in extra if before == "" for x in ws]


def with_heads(sc: Scenario, heads: Sequence[int], **changes: object) -> Scenario:
    """The scenario with ``changes`` made to each head in ``heads``."""
    new = list(sc.heads)
    for h in heads:
        new[h] = dataclasses.replace(new[h], **changes)  # type: ignore[arg-type]
    return dataclasses.replace(sc, heads=tuple(new))


def in_head(h: int, field: str) -> Callable[[Scenario, Matrix], Scenario]:
    """A put that writes head h's ``field``."""
    return lambda sc, new: with_heads(sc, (h,), **{field: new})


def in_table(key: str, field: str) -> Callable[[Scenario, Matrix], Scenario]:
    """A put that writes ``field`` of the scenario's ``key`` (a first variant's table, kept in that field)."""
    return lambda sc, new: dataclasses.replace(sc, **{key: dataclasses.replace(getattr(sc, key), **{field: new})})
