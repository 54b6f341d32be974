"""The stages, in the order the trace walks them: one module each, registered here.

A scenario runs the stages whose ``runs`` says so; consecutive per-head stages run head after
head (Project … Mix for head 1, then for head 2), shared ones once. Adding a stage is one module
with a :class:`~qkv_tui.teach.stages.common.StageSpec` and one line in ``REGISTRY`` (or
:func:`register` at run time, as the tests do). A family a scenario may lack ([mla], [linear],
[deltanet]) is listed by name and imported the first time a scenario has it (:func:`for_scenario`),
so the first screen of a plain scenario does not load its modules. A part registered with its faces
(core/variants/common.py Faces) names its stages and the stage each follows; it is placed here as a
family of its own, with no line in this module.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from qkv_tui.core.variants import TABLES
from qkv_tui.core.variants.common import Table
from qkv_tui.teach.stages import (
    concat,
    embed,
    gate,
    loss,
    mix,
    norm,
    project,
    qk_norm,
    rotate,
    scale,
    score,
    softmax,
    wo,
)
from qkv_tui.teach.stages.common import StageSpec


@dataclass(frozen=True)
class _Later:
    """A stage of a family whose modules load on first use: [mla]'s latent path, [linear], [deltanet].
    A scenario without the family never runs one of its stages, so its first screen need not import them."""

    family: str
    module: str
    name: str


# the families that load on first use, and whether a scenario has each (every stage of a family runs only there)
FAMILIES: dict[str, Callable[[Any], bool]] = {
    "mla": lambda sc: getattr(sc, "mla", None) is not None,
    "linear": lambda sc: getattr(sc, "linear", None) is not None,
    "deltanet": lambda sc: getattr(sc, "deltanet", None) is not None,
}

# the walk's order; read it as REGISTRY (every family loaded) or for_scenario (only the families a scenario has)
_REGISTRY: list[StageSpec | _Later] = [
    embed.SPEC,
    norm.SPEC,
    project.SPEC,
    _Later("mla", "mla_compress", "SPEC"),
    _Later("mla", "mla_expand", "SPEC"),
    _Later("mla", "mla_rotate", "SPEC"),
    qk_norm.SPEC,
    rotate.SPEC,
    score.SPEC,
    scale.SPEC,
    softmax.SPEC,
    mix.SPEC,
    _Later("mla", "mla_absorb", "SPEC"),
    _Later("linear", "linear", "FEATURE"),
    _Later("linear", "linear", "QUADRATIC"),
    _Later("linear", "linear", "RECURRENT"),
    _Later("deltanet", "deltanet_io", "CONV_STAGE"),
    _Later("deltanet", "deltanet", "NORMALISE"),
    _Later("deltanet", "deltanet", "GATES"),
    _Later("deltanet", "deltanet", "DELTA"),
    _Later("deltanet", "deltanet_io", "OUTPUT_NORM"),
    gate.SPEC,
    concat.SPEC,
    wo.SPEC,
    # the backward pass, where the scenario has [backward] (docs/backward.md): each stage in its forward stage's module
    loss.SPEC,
    wo.BACKWARD,
    gate.BACKWARD,
    mix.BACKWARD,
    _Later("linear", "linear", "BACKWARD"),
    _Later("deltanet", "deltanet", "BACKWARD"),
    _Later("deltanet", "deltanet", "GATES_BACKWARD"),
    softmax.BACKWARD,
    scale.BACKWARD,
    score.BACKWARD,
    rotate.BACKWARD,
    _Later("mla", "mla_rotate", "BACKWARD"),
    _Later("mla", "mla_rotate", "KEY_BACKWARD"),
    _Later("mla", "mla_expand", "BACKWARD"),
    _Later("mla", "mla_compress", "BACKWARD"),
    qk_norm.BACKWARD,
    project.BACKWARD,
    embed.BACKWARD,
    norm.BACKWARD,
]




def _has(table: Table[object]) -> Callable[[Any], bool]:
    return lambda sc: table.of(sc) is not None


def _place_parts() -> None:
    """Each part registered with its faces (core/variants/common.py Faces) is a family of its own, named by its
    table: its stages go right after the stage each follows, in the order the part lists them."""
    for table in TABLES:
        if table.faces is None or not table.faces.stages:
            continue
        FAMILIES[table.key] = _has(table)
        placed: dict[str, int] = {}  # the stage followed -> where the part's last stage after it went
        for after, module, name in table.faces.stages:
            if after not in placed:
                placed[after] = next(i for i, s in enumerate(_REGISTRY)
                                     if isinstance(s, StageSpec) and s.stage.key == after)
            placed[after] += 1
            _REGISTRY.insert(placed[after], _Later(table.key, module, name))


_place_parts()
_FAMILY_OF: dict[int, str] = {}  # id of a loaded family stage -> its family, so for_scenario leaves it out elsewhere


def load(family: str) -> None:
    """Import a family's modules and put its stages in their places in the registry (the same list object)."""
    for i, entry in enumerate(_REGISTRY):
        if isinstance(entry, _Later) and entry.family == family:
            module = importlib.import_module(f"{__name__}.{entry.module}")
            _REGISTRY[i] = getattr(module, entry.name)
            _FAMILY_OF[id(_REGISTRY[i])] = family


def everything() -> list[StageSpec]:
    """The whole registry, every family loaded: what the worksheet and the stage names read."""
    for family in FAMILIES:
        load(family)
    return _REGISTRY  # type: ignore[return-value]  # no _Later is left


def for_scenario(sc: Any) -> list[StageSpec]:
    """The registry in its order, the families the scenario has loaded and those it has not left out
    (none of their stages would run): what a trace walks."""
    kept = {family for family, has in FAMILIES.items() if has(sc)}
    for family in kept:
        load(family)
    # a family loaded for another scenario stays out too: its matrices' names must not answer for this one's
    return [s for s in _REGISTRY if not isinstance(s, _Later) and _FAMILY_OF.get(id(s), "") in kept | {""}]


def spec(key: str) -> StageSpec:
    """The registered stage with this key."""
    for s in everything():
        if s.stage.key == key:
            return s
    raise KeyError(key)


def register(new: StageSpec, after: str) -> None:
    """Add a stage to the walk, right after the stage ``after``."""
    if any(s.stage.key == new.stage.key for s in everything()):
        raise ValueError(f"a stage {new.stage.key!r} is registered already")
    _REGISTRY.insert(_REGISTRY.index(spec(after)) + 1, new)


def unregister(key: str) -> None:
    _REGISTRY.remove(spec(key))


def __getattr__(name: str) -> list[StageSpec]:
    """``REGISTRY``: every registered stage in the walk's order, each family loaded (the same list each time,
    so a stage registered at run time is in it)."""
    if name == "REGISTRY":
        return everything()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@contextmanager
def registered(new: StageSpec, after: str) -> Iterator[StageSpec]:
    """A stage registered for the length of a ``with`` block (traces built inside keep it)."""
    register(new, after)
    try:
        yield new
    finally:
        unregister(new.stage.key)
