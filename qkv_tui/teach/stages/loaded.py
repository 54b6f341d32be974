"""A head's record of a part whose kernel may not be loaded: the stages every scenario walks ask for the
sinks', the soft-cap's and the gate's records on every screen, and only that part's kernel makes its record,
so while the kernel's module is not loaded no head has one. Asking here leaves the kernel unimported for the
scenarios without the part (their first screen need not load it)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from qkv_tui.core.engine import HeadResult
    from qkv_tui.kernels.gate import Gated
    from qkv_tui.kernels.sinks import Sunk
    from qkv_tui.kernels.softcap import Capped


def _part(hr: HeadResult, module: str, name: str) -> object | None:
    kernel = sys.modules.get(module)
    return None if kernel is None else hr.part(getattr(kernel, name))


def _need(hr: HeadResult, module: str, name: str) -> object:
    found = _part(hr, module, name)
    if found is None:  # as HeadResult.need says it
        raise LookupError(f"{hr.name} has no {name}")
    return found


def sunk(hr: HeadResult) -> Sunk | None:
    """The head's attention-sink record (kernels/sinks.py); None without a sink."""
    return cast("Sunk | None", _part(hr, "qkv_tui.kernels.sinks", "Sunk"))


def need_sunk(hr: HeadResult) -> Sunk:
    """The head's attention-sink record, where the caller knows it has one."""
    return cast("Sunk", _need(hr, "qkv_tui.kernels.sinks", "Sunk"))


def capped(hr: HeadResult) -> Capped | None:
    """The head's soft-cap record (kernels/softcap.py); None without a cap."""
    return cast("Capped | None", _part(hr, "qkv_tui.kernels.softcap", "Capped"))


def need_capped(hr: HeadResult) -> Capped:
    """The head's soft-cap record, where the caller knows it has one."""
    return cast("Capped", _need(hr, "qkv_tui.kernels.softcap", "Capped"))


def gated(hr: HeadResult) -> Gated | None:
    """The head's output-gate record (kernels/gate.py); None without a gate."""
    return cast("Gated | None", _part(hr, "qkv_tui.kernels.gate", "Gated"))


def need_gated(hr: HeadResult) -> Gated:
    """The head's output-gate record, where the caller knows it has one."""
    return cast("Gated", _need(hr, "qkv_tui.kernels.gate", "Gated"))
