"""``fixed``: a dataclass whose fields the type checker holds read-only, made without the methods that freeze it
at run time.

``dataclass(frozen=True)`` writes a ``__setattr__`` and a ``__delattr__`` for each class and compiles them with
``exec`` when the class is made: about 0.15 ms a class, paid on every start by each one the first screen imports.
A fixed class's fields are checked read-only by mypy instead (``frozen_default``), so an assignment to one is still an
error before the code runs. ``@fixed`` compares and hashes by identity and has no generated ``__repr__`` (values
nothing compares, hashes or prints: the results of a pass, the registry's entries); ``@fixed(eq=True)`` compares
and hashes by its fields, as a frozen dataclass does; ``@fixed(repr=True)`` is printed as a dataclass is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, dataclass_transform, overload

T = TypeVar("T")


@overload
def fixed(cls: type[T], /) -> type[T]: ...


@overload
def fixed(*, eq: bool = False, repr: bool = False) -> Callable[[type[T]], type[T]]: ...


@dataclass_transform(frozen_default=True, eq_default=False, field_specifiers=(field,))
def fixed(cls: type[T] | None = None, /, *, eq: bool = False, repr: bool = False) -> Any:
    # unsafe_hash with eq: the hash of the fields frozen=True with eq gives (the same generated method)
    make = dataclass(eq=eq, unsafe_hash=eq, repr=repr)
    return make if cls is None else make(cls)
