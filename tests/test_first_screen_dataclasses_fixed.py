"""The dataclasses the first screen imports are made as ``@fixed`` (base/fixed.py): no ``__setattr__`` or
``__delattr__`` compiled to freeze them, no generated ``__repr__`` except where one is kept; and ``@fixed``
compares, hashes and replaces as the frozen dataclass it stands in for."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from qkv_tui.base.fixed import fixed

# Scenario, Computation and HeadResult, the package's exports, keep their printed form
PRINTED = {"qkv_tui.core.scenario.Scenario", "qkv_tui.core.engine.Computation", "qkv_tui.core.head.HeadResult"}


def test_first_screen_dataclasses_are_made_without_freezing_methods() -> None:
    code = (
        "import sys, json, dataclasses\n"
        "import qkv_tui.edges.cli, qkv_tui.ui.app\n"
        "found = {}\n"
        "for name, module in list(sys.modules.items()):\n"
        "    if not name.startswith('qkv_tui'): continue\n"
        "    for value in vars(module).values():\n"
        "        if isinstance(value, type) and dataclasses.is_dataclass(value) and value.__module__ == name:\n"
        "            p = value.__dataclass_params__\n"
        "            found[f'{name}.{value.__qualname__}'] = [p.frozen, '__setattr__' in vars(value), p.repr]\n"
        "print(json.dumps(found))\n"
    )
    found = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                      check=True).stdout)
    assert len(found) >= 40, sorted(found)  # the command line and the app's first screen make about 50
    frozen = sorted(name for name, (is_frozen, setattr_made, _) in found.items() if is_frozen or setattr_made)
    assert frozen == [], "use @fixed (base/fixed.py): frozen=True compiles two methods on every start"
    printed = sorted(name for name, (_, _, has_repr) in found.items() if has_repr)
    assert set(printed) <= PRINTED, printed


@fixed
class _Pass:
    """A result of a pass: compared by identity."""

    a: int
    b: list[int] = dataclasses.field(default_factory=list)


@fixed(eq=True)
class _Place:
    """A value: compared and hashed by its fields."""

    index: int
    head: int = 0


@dataclasses.dataclass(frozen=True)
class _FrozenPlace:
    index: int
    head: int = 0


def test_fixed_compares_by_identity_and_replaces() -> None:
    one = _Pass(1)
    assert one == one and one != _Pass(1) and hash(one) == object.__hash__(one)
    other = dataclasses.replace(one, a=2)
    assert (other.a, other.b) == (2, []) and one.a == 1
    assert "__setattr__" not in vars(_Pass) and "__repr__" not in vars(_Pass)


@pytest.mark.parametrize(("index", "head"), [(0, 0), (3, 1), (-2, 7)])
def test_fixed_eq_compares_and_hashes_as_a_frozen_dataclass(index: int, head: int) -> None:
    here, there = _Place(index, head), _Place(index, head)
    assert here == there and hash(here) == hash(there) == hash(_FrozenPlace(index, head))
    assert here != _Place(index + 1, head) and {here: 1}[there] == 1
    assert "__setattr__" not in vars(_Place)
