"""Each built-in scenario loaded and computed once per test process, for the tests that only read it.

test_calculator.py alone computed every built-in 17 times (once for each decimals it checks). The
cached Computation is shared, so its arrays are frozen: a test or a function under test that writes
into one raises (ValueError: assignment destination is read-only) instead of changing the next test's
input. Use it only where the test reads; a test that edits a scenario computes its own.
"""

from __future__ import annotations

import dataclasses
from functools import cache
from pathlib import Path

import numpy as np

from qkv_tui import Computation, compute, load_scenario


def _freeze(obj: object, seen: set[int]) -> None:
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        obj.setflags(write=False)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for field in dataclasses.fields(obj):
            _freeze(getattr(obj, field.name), seen)
    elif isinstance(obj, list | tuple | set | frozenset):
        for value in obj:
            _freeze(value, seen)
    elif isinstance(obj, dict):
        for value in obj.values():
            _freeze(value, seen)


@cache
def builtin(source: str | Path) -> Computation:
    """compute(load_scenario(source)) for a built-in's name or path, computed once; its arrays read-only."""
    comp = compute(load_scenario(source))
    _freeze(comp, set())
    return comp
