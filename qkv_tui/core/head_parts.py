"""Each variant's part of a head's forward pass, built from the scenario (the driver, core/forward.py, runs them).

A builder reads the scenario once for every head (QK-norm's statistics over all heads, [deltanet]'s gates) and
answers each head's spec (kernels/attention.py PartSpec), or None where the scenario or the head has no such
part. Each lives in its variant's own module, named by its registry entry's faces (core/variants/common.py
Faces.head); HEAD_PARTS is their order in a head's pass, the registry's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np

from qkv_tui.base.fixed import fixed
from qkv_tui.core import variants
from qkv_tui.core.head import HeadResult
from qkv_tui.core.scenario import Matrix, Scenario
from qkv_tui.core.variants.common import Keys, Table, face
from qkv_tui.kernels.attention import PartSpec
from qkv_tui.kernels.policy import Policy


@fixed
class Run:
    """What the builders read: the scenario, what its projections read, the policy, and (by hand) the exact heads."""

    sc: Scenario
    X_in: Matrix  # (n, d_model) what the Query projection reads, normalised where the scenario says so
    X_kv: Matrix  # (m, d_in) what the Keys and Values read
    policy: Policy
    exact: Sequence[HeadResult] | None  # by hand: the exact heads, whose divisor and ALiBi bias are kept

    def quiet(self) -> AbstractContextManager[object]:
        """The exact run lets float64 overflow quietly (the engine's checks then name what did); by hand,
        NumPy's own rule stands, as it always did there."""
        return np.errstate(over="ignore", invalid="ignore") if self.exact is None else nullcontext()


PerHead = Callable[[int], "PartSpec | None"]
Builder = Callable[[Run], "PerHead | None"]


def _part(table: Table[object], path: str) -> Builder:
    """A table's builder (its ``faces.head``), imported the first time a scenario has the table."""
    def build(run: Run) -> PerHead | None:
        if table.of(run.sc) is None:
            return None
        made: PerHead | None = face(path)(run)
        return made
    return build


def _keys_part(keys: Keys, path: str) -> Builder:
    """The builder of keys that sit in the heads' own tables (a sink, a soft-cap, a gate): it answers None for each
    head without one, and is imported the first time a scenario has the keys (the features a scenario uses are
    those its ``--check`` summary names), with its kernel: no head of a scenario without them has the part."""
    def build(run: Run) -> PerHead | None:
        if not keys.summary_parts(run.sc):
            return None
        made: PerHead | None = face(path)(run)
        return made
    return build


def _builder(f: Table[Any] | Keys) -> Builder | None:
    if f.faces is None or f.faces.head is None:
        return None
    return _part(f, f.faces.head) if isinstance(f, Table) else _keys_part(f, f.faces.head)


# every builder in FEATURES's order: QK-norm before RoPE (RoPE turns the normalised vectors), the gate before
# [deltanet]'s output norm (Concat joins the last part's output), [value_scale] before [differential] (its
# attend hook runs both maps)
HEAD_PARTS: tuple[Builder, ...] = tuple(b for b in map(_builder, variants.FEATURES) if b is not None)


def head_parts(run: Run) -> Callable[[int], list[PartSpec]]:
    """Each head's specs in HEAD_PARTS's order, the scenario read once."""
    built = [per for per in (builder(run) for builder in HEAD_PARTS) if per is not None]
    return lambda h: [spec for spec in (per(h) for per in built) if spec is not None]
