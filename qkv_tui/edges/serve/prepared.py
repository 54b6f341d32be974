"""The served scenario made once in ``--serve``'s app starter, for each forked app to start from.

Every tab opens the same scenario with the same options: the app starter (zygote.py) loads and
computes it once, draws its first frame once, and each forked app takes that work over (it is in the
pages the fork shares) instead of loading, computing and laying out its first screen's text again.
An app takes it only if the file still holds the bytes it was made from; a teacher who edits the
file during the class gives the next student the new numbers, loaded afresh as without a starter.
A scenario with a [model] table is never prepared: its numbers come from model files as well.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from qkv_tui.base.values import escaped
from qkv_tui.core.engine import Computation
from qkv_tui.core.scenario import Scenario, ScenarioError, parse_scenario, resolve
from qkv_tui.core.tomlfile import ReadError, decode, parse_toml, read_bytes, stat_path
from qkv_tui.edges.arithmetic import arithmetic_policy, computed  # the app's own: what would fail there fails here

if TYPE_CHECKING:  # the app's, loaded by prepare(): a command line that only checks or exports never needs it
    from qkv_tui.display.presenter import Presenter


@dataclass(frozen=True)
class Prepared:
    spec: str  # the SCENARIO argument, as every tab's command line gives it
    path: Path  # the file it names
    raw: bytes  # what the file held
    scenario: Scenario
    comp: Computation
    presenter: Presenter  # with the first frame's panes and text already made


_kept: Prepared | None = None


def _read(spec: str) -> tuple[Path, bytes] | None:
    try:
        path = resolve(spec)
        status = stat_path(path)
        return None if status is None else (path, read_bytes(path, status))
    except (ScenarioError, ReadError, OSError):
        return None


def prepare(spec: str) -> Prepared | None:
    """Load and compute ``spec`` as an app would; None when it cannot be prepared (the app then says why)."""
    found = _read(spec)
    if found is None:
        return None
    path, raw = found
    from qkv_tui.display.presenter import Presenter

    try:
        if "model" in parse_toml(decode(raw)):
            return None
        with arithmetic_policy(spec):
            scenario = parse_scenario(raw, spec, default_title=escaped(path.stem), base=path.parent)
            comp = computed(scenario)  # with [backward]'s gradients: a file --check refuses is the tab's to refuse
    except Exception:  # any failure is the app's to report, as it would be without a starter
        return None
    return Prepared(spec, path, raw, scenario, comp, Presenter(comp))


def keep(prepared: Prepared | None) -> None:
    global _kept
    _kept = prepared


def take(spec: str) -> Prepared | None:
    """What was prepared for ``spec``, once, if its file holds the same bytes still; else None."""
    global _kept
    prepared, _kept = _kept, None
    if prepared is None or prepared.spec != spec:
        return None
    found = _read(spec)
    if found is None or found != (prepared.path, prepared.raw):
        return None
    return prepared
