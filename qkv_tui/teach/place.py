"""A place in the trace named the way the command line names it: ``--stage NAME|N --op N --head N``.

The stage is named as the stage bar shows it (case-insensitive) or by its number there; ``--op`` counts
the operations of that stage alone, from 1 (the status line's ``op 60/66`` counts over the whole trace:
the Mix stage's first operation is ``--stage mix --op 1`` wherever it falls); ``--head`` is 1-based, as
the status line's ``head 2 (2/2)``. The palette's "copy this place" writes the same words back
(``command_line``), so a place copied and pasted opens where it was.
"""

from __future__ import annotations

import shlex

from qkv_tui.teach.stages.common import StageRun
from qkv_tui.teach.stepper import Position
from qkv_tui.teach.trace import Trace

DEFAULT_DECIMALS = 3  # the app's own (display/modes.py): a copied place names its decimals only when they differ


class PlaceError(ValueError):
    """A --stage, --op or --head that names no place of this scenario; the message is one line."""


SAID = 12  # an error line repeats a typed value whole up to this many characters, and cuts it past them


def said_number(digits: str) -> str:
    """Typed digits as an error line repeats them: whole when short, else their start and how many there were
    (5,000 digits would fill the terminal with one line)."""
    return digits if len(digits) <= SAID else f"{digits[:6]}… (a number of {len(digits):,} digits)"


def said_text(text: str) -> str:
    """Typed text as an error line quotes it (repr: a control character shows as its escape), cut as
    ``said_number`` cuts digits."""
    return repr(text) if len(text) <= SAID else f"{text[:SAID]!r}… ({len(text):,} characters)"


def _stages(trace: Trace) -> str:
    return ", ".join(f"{i} {trace.stage(key).name}" for i, key in enumerate(trace.stage_keys, 1))


def stage_key(trace: Trace, stage: str) -> str:
    """The stage ``--stage`` names: its number on the stage bar, or its name in any case."""
    count = trace.stage_count
    text = stage.strip()
    # isdecimal, not isdigit: ``²`` is a digit that int() refuses; a decimal digit of any script reads as its
    # number (int("٣") is 3). Past a few digits no stage can match, and int() refuses 5,000 of them outright
    if text.isdecimal():
        digits = text.lstrip("0")
        number = int(digits) if 0 < len(digits) <= 6 else (0 if not digits else None)
        if number is None or not 1 <= number <= count:
            raise PlaceError(f"--stage {said_number(text)} is out of range; this scenario's stages are 1 … {count}"
                             f" ({_stages(trace)})")
        return trace.stage_keys[number - 1]
    for key in trace.stage_keys:
        if trace.stage(key).name.casefold() == text.casefold():
            return key
    raise PlaceError(f"--stage {said_text(stage)} is not a stage of this scenario; its stages: {_stages(trace)}")


def _run(trace: Trace, key: str, head: int) -> StageRun:
    return next(r for r in trace.runs if r.stage == key and r.head in (None, head))


def find_place(trace: Trace, stage: str, op: int | None = None, head: int | None = None) -> Position:
    """The position ``--stage stage --op op --head head`` names (op and head 1-based); raises PlaceError."""
    heads = len(trace.comp.heads)
    if head is not None and not 1 <= head <= heads:
        raise PlaceError(f"--head {head} is out of range; this scenario has "
                         + ("one head (--head 1)" if heads == 1 else f"heads 1 … {heads}"))
    h = 0 if head is None else head - 1
    key = stage_key(trace, stage)
    run = _run(trace, key, h)
    ops = run.stop - run.start
    if op is not None and not 1 <= op <= ops:
        name = trace.stage(key).name
        raise PlaceError(f"--op {op} is beyond the {name} stage's operations; expected 1 … {ops}")
    return Position(run.start + (0 if op is None else op - 1), h)


def place_of(trace: Trace, pos: Position) -> tuple[int, str, int]:
    """(stage number, stage name, operation within the stage, 1-based) of a position."""
    seg = trace.segment_at(pos.index)
    run = _run(trace, seg.stage, pos.head if seg.head is None else seg.head)
    return seg.number, trace.stage(seg.stage).name, pos.index - run.start + 1


def command_line(path: str, trace: Trace, pos: Position, decimals: int = DEFAULT_DECIMALS) -> str:
    """``qkv-tui PATH --stage NAME --op N``, then ``--head N`` where the head in view is not the first and
    ``--decimals N`` where they are not the default: the words that open the app at this place."""
    _number, name, op = place_of(trace, pos)
    words = ["qkv-tui", path, "--stage", name.lower(), "--op", str(op)]
    if pos.head != 0 and len(trace.comp.heads) > 1:
        words += ["--head", str(pos.head + 1)]
    if decimals != DEFAULT_DECIMALS:
        words += ["--decimals", str(decimals)]
    return shlex.join(words)
