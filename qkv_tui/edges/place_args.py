"""``--stage NAME|N --op N --head N --decimals N``: open the app at a place (teach/place.py says how a place is named).

They go with the app and with --serve (each tab opens there), never with an export or --check, where no
screen is shown; the place itself is checked against the scenario before the app starts, one line per error.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from qkv_tui.core.engine import Computation
from qkv_tui.teach.place import PlaceError, find_place, said_number, said_text
from qkv_tui.teach.stepper import Position
from qkv_tui.teach.trace import Trace

MIN_DECIMALS, MAX_DECIMALS = 1, 8  # display/modes.py's range
MAX_DIGITS = 18  # past any scenario's count of heads or of a stage's operations (and int() refuses 4,301)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("where the app opens")
    group.add_argument("--stage", metavar="NAME|N",
                       help="open at this stage: its name as the stage bar shows it (any case) or its number")
    group.add_argument("--op", metavar="N", type=_whole("no stage has so many operations"),
                       help="with --stage: the Nth operation of that stage (1-based; default 1)")
    group.add_argument("--head", metavar="N", type=_whole("no scenario has so many heads"),
                       help="with --stage: the head in view, 1-based as the status line's (2/2) (default 1)")
    group.add_argument("--decimals", metavar="N", type=_whole(f"expected {MIN_DECIMALS} … {MAX_DECIMALS}"),
                       help=f"decimals shown ({MIN_DECIMALS} … {MAX_DECIMALS}; default 3, as + and - change them)")


def _given(args: argparse.Namespace) -> list[str]:
    return [f"--{name}" for name in ("stage", "op", "head", "decimals") if getattr(args, name, None) is not None]


def misplaced(args: argparse.Namespace) -> str | None:
    """The parser's error line for a place given where no app opens, or half given; None when it fits."""
    flags = _given(args)
    if not flags:
        return None
    if args.export or args.check:
        where = "--export" if args.export else "--check"
        return f"{' and '.join(flags)} {'goes' if len(flags) == 1 else 'go'} only with the app or --serve, not {where}"
    for flag in ("op", "head"):
        if getattr(args, flag) is not None and args.stage is None:
            return f"--{flag} goes with --stage NAME|N (the stage whose operations it counts)"
    if args.decimals is not None and not MIN_DECIMALS <= args.decimals <= MAX_DECIMALS:
        return f"--decimals {args.decimals}: expected {MIN_DECIMALS} … {MAX_DECIMALS}"
    return None


def place(args: argparse.Namespace, comp: Computation) -> Position | None:
    """Where the app opens; None for its first operation. Raises PlaceError (teach/place.py)."""
    if args.stage is None:
        return None
    heads = len(comp.heads)
    if args.head is not None and not 1 <= args.head <= heads:
        raise PlaceError(head_range(args.head, heads))
    return find_place(Trace(comp), args.stage, args.op, args.head)


def head_range(head: int, heads: int) -> str:
    """--head out of range, with the way it counts (docs/scenario-format.md#counting): the head in view is a
    word, "head 2 (2/2)", so it counts from 1; a model's own head numbers, from 0, are --heads'."""
    have = "one head (--head 1)" if heads == 1 else f"heads 1 … {heads}"
    return (f"--head {head} is out of range: --head counts the heads in view from 1, as the status line's"
            f" (1/{heads}) does; this scenario has {have}")


def passed_on(args: argparse.Namespace) -> list[str]:
    """The same words for every --serve tab's app."""
    words: list[str] = []
    for name in ("stage", "op", "head", "decimals"):
        value = getattr(args, name, None)
        if value is not None:
            words += [f"--{name}", str(value)]
    return words


def _whole(too_many: str) -> Callable[[str], int]:
    """The parser of a whole number typed after a flag; ``too_many`` says why one of more than MAX_DIGITS
    digits is out of range. It reads what --stage reads as a number (teach/place.py): decimal digits of any
    script (``٣`` is 3), spaces around, and here a sign, which the range checks then refuse in their words;
    not ``²``, ``1_0`` or ``3.0``, which int() would partly take. The value an error repeats is cut."""

    def whole(text: str) -> int:
        body = text.strip()
        digits = body[1:] if body.startswith(("+", "-")) else body
        if not digits.isdecimal():
            raise argparse.ArgumentTypeError(f"{said_text(text)} is not a whole number")
        if len(digits.lstrip("0")) > MAX_DIGITS:
            raise argparse.ArgumentTypeError(f"{body[:len(body) - len(digits)]}{said_number(digits)} is out of range:"
                                             f" {too_many}")
        return int(body)

    return whole
