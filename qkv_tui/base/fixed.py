"""``fixed``: a dataclass whose fields the type checker holds read-only, made without the methods that freeze it
at run time.

``dataclass(frozen=True)`` writes a ``__setattr__`` and a ``__delattr__`` for each class and compiles them with
``exec`` when the class is made: about 0.15 ms a class, paid on every start by each one the first screen imports.
A fixed class's fields are checked read-only by mypy instead (``frozen_default``), so an assignment to one is still an
error before the code runs. It compares and hashes by identity (no generated ``__eq__``, ``__hash__``) and has
no generated ``__repr__``: use it for values nothing compares, hashes or prints, such as the results of a pass
(arrays) and the registry's entries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar, dataclass_transform

T = TypeVar("T")


@dataclass_transform(frozen_default=True, eq_default=False, field_specifiers=(field,))
def fixed(cls: type[T]) -> type[T]:
    return dataclass(eq=False, repr=False)(cls)
