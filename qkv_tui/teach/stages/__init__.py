"""The stages, in the order the trace walks them: one module each, registered here.

A scenario runs the stages whose ``runs`` says so; consecutive per-head stages run head after
head (Project … Mix for head 1, then for head 2), shared ones once. Adding a stage every scenario may
run is one module with a :class:`~qkv_tui.teach.stages.common.StageSpec` and one line in ``_REGISTRY``
(or :func:`register` at run time, as the tests do). A variant registered with its faces
(core/variants/common.py Faces) names its stages and the stage each follows or precedes; they are placed
here with no line in this module, a table's as a family imported the first time a scenario has the table
(:func:`for_scenario`), so the first screen of a plain scenario does not load its modules.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from qkv_tui.base.fixed import fixed
from qkv_tui.core.variants import FEATURES, TABLES
from qkv_tui.core.variants.common import Keys, Table
from qkv_tui.teach.stages import concat, embed, loss, mix, norm, project, rotate, scale, score, softmax, wo
from qkv_tui.teach.stages.common import StageSpec


@fixed
class _Later:
    """A stage of a family whose modules load on first use: a table's stages, named by its faces. A scenario
    without the table never runs one of its stages, so its first screen need not import them."""

    family: str
    module: str
    name: str


# the families that load on first use, and whether a scenario has each (every stage of a family runs only there):
# one per table registered with stages (its key), filled by _place_parts
FAMILIES: dict[str, Callable[[Any], bool]] = {}

# the stages every scenario may run, in the walk's order; the parts' stages go in their places among them
# (_place_parts). Read it as REGISTRY (every family loaded) or for_scenario (only the families a scenario has).
_REGISTRY: list[StageSpec | _Later] = [
    embed.SPEC,
    norm.SPEC,
    project.SPEC,
    rotate.SPEC,
    score.SPEC,
    scale.SPEC,
    softmax.SPEC,
    mix.SPEC,
    concat.SPEC,
    wo.SPEC,
    # the backward pass, where the scenario has [backward] (docs/backward.md): each stage in its forward stage's module
    loss.SPEC,
    wo.BACKWARD,
    mix.BACKWARD,
    softmax.BACKWARD,
    scale.BACKWARD,
    score.BACKWARD,
    rotate.BACKWARD,
    project.BACKWARD,
    embed.BACKWARD,
    norm.BACKWARD,
]

# a stage face's first item is the key of the stage it follows, or this prefix and the key of the stage it precedes
BEFORE = "before:"


def _has(table: Table[object]) -> Callable[[Any], bool]:
    return lambda sc: table.of(sc) is not None


def _at(key: str) -> int:
    return next(i for i, s in enumerate(_REGISTRY) if isinstance(s, StageSpec) and s.stage.key == key)


def _place_parts() -> None:
    """Each part registered with stages in its faces (core/variants/common.py Faces) puts them next to the stage
    each names, in the order the part lists them: right after the stage it follows, or right before the one it
    precedes (``before:key``). Parts are placed in FEATURES' order, the tables' first, then the keys that sit in
    other tables ([[heads]]); where several name the same stage, the one placed later sits nearer it.
    A table's stages are a family of its own, named by its key and loaded the first time a scenario has the
    table; a key's stages are in every scenario's walk (their own ``runs`` says where they run), loaded here."""
    owners: list[Table[Any] | Keys] = [*TABLES, *(f for f in FEATURES if isinstance(f, Keys))]
    for owner in owners:
        if owner.faces is None or not owner.faces.stages:
            continue
        family = None
        if isinstance(owner, Table):
            family = owner.key
            FAMILIES[family] = _has(owner)
        placed: dict[str, int] = {}  # the stage followed -> where the part's last stage after it went
        for anchor, module, name in owner.faces.stages:
            entry: StageSpec | _Later = (_Later(family, module, name) if family is not None
                                         else getattr(importlib.import_module(f"{__name__}.{module}"), name))
            if anchor.startswith(BEFORE):
                _REGISTRY.insert(_at(anchor.removeprefix(BEFORE)), entry)
                continue
            if anchor not in placed:
                placed[anchor] = _at(anchor)
            placed[anchor] += 1
            _REGISTRY.insert(placed[anchor], entry)


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
