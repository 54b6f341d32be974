"""The stages, in the order the trace walks them: one module each, registered here.

A scenario runs the stages whose ``runs`` says so; consecutive per-head stages run head after
head (Project … Mix for head 1, then for head 2), shared ones once. Adding a stage is one module
with a :class:`~qkv_tui.teach.stages.common.StageSpec` and one line in ``REGISTRY`` (or
:func:`register` at run time, as the tests do).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from qkv_tui.teach.stages import (
    concat,
    deltanet,
    deltanet_io,
    embed,
    gate,
    linear,
    loss,
    mix,
    mla_absorb,
    mla_compress,
    mla_expand,
    mla_rotate,
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

REGISTRY: list[StageSpec] = [
    embed.SPEC,
    norm.SPEC,
    project.SPEC,
    mla_compress.SPEC,
    mla_expand.SPEC,
    mla_rotate.SPEC,
    qk_norm.SPEC,
    rotate.SPEC,
    score.SPEC,
    scale.SPEC,
    softmax.SPEC,
    mix.SPEC,
    mla_absorb.SPEC,
    linear.FEATURE,
    linear.QUADRATIC,
    linear.RECURRENT,
    deltanet_io.CONV_STAGE,
    deltanet.NORMALISE,
    deltanet.GATES,
    deltanet.DELTA,
    deltanet_io.OUTPUT_NORM,
    gate.SPEC,
    concat.SPEC,
    wo.SPEC,
    # the backward pass, where the scenario has [backward] (docs/backward.md): each stage in its forward stage's module
    loss.SPEC,
    wo.BACKWARD,
    gate.BACKWARD,
    mix.BACKWARD,
    linear.BACKWARD,
    deltanet.BACKWARD,
    deltanet.GATES_BACKWARD,
    softmax.BACKWARD,
    scale.BACKWARD,
    score.BACKWARD,
    rotate.BACKWARD,
    mla_rotate.BACKWARD,
    mla_rotate.KEY_BACKWARD,
    mla_expand.BACKWARD,
    mla_compress.BACKWARD,
    qk_norm.BACKWARD,
    project.BACKWARD,
    embed.BACKWARD,
    norm.BACKWARD,
]


def spec(key: str) -> StageSpec:
    """The registered stage with this key."""
    for s in REGISTRY:
        if s.stage.key == key:
            return s
    raise KeyError(key)


def register(new: StageSpec, after: str) -> None:
    """Add a stage to the walk, right after the stage ``after``."""
    if any(s.stage.key == new.stage.key for s in REGISTRY):
        raise ValueError(f"a stage {new.stage.key!r} is registered already")
    REGISTRY.insert(REGISTRY.index(spec(after)) + 1, new)


def unregister(key: str) -> None:
    REGISTRY.remove(spec(key))


@contextmanager
def registered(new: StageSpec, after: str) -> Iterator[StageSpec]:
    """A stage registered for the length of a ``with`` block (traces built inside keep it)."""
    register(new, after)
    try:
        yield new
    finally:
        unregister(new.stage.key)
