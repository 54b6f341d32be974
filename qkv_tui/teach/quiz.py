"""Predict-then-reveal: checking a learner's answer before the result is shown.

An answer is right when it shows as the displayed value: a whole-number cell wants that
whole number, and a decimal cell wants a number that, written to the shown decimals, is
what the cell shows (at three decimals 0.707 and 0.7068 are right for 0.707, 0.7064 is
not). So one answer is never right for two different displayed values: 0.5 is neither
0 nor 1.

A fair question shows what to compute from, never the work that gives the result away.
Most operations' arithmetic is fair with only its result hidden: ``Q[I,0] = 1·1 + 0·0 +
1·1 + 0·0 = ?`` leaves the sum to do. A softmax weight's is not: it ends
``= 0.099 / 1.414 = ?``, the exponential and the row sum worked, so one division is left.
Its question shows the row's inputs instead, ``e^0.577 / (e^0.577 + e^2.887 + e^1.732) = ?``:
the exponentials and the sum are the learner's to do.

The side views (tiles, cache) ask about a line they show: its result, a number or a row's first
entry, graded by the same rule at the places the line writes it (:func:`about_line`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from qkv_tui.base.values import SUBSCRIPTS
from qkv_tui.core.fmt import fmt
from qkv_tui.teach.trace import Trace

NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
# what a number looks like while it is being typed: 1, 0., .7, -, 1e-, and −∞ or -inf on the way
PARTIAL_NUMBER = re.compile(r"^[+-]?((\d+\.?\d*|\.\d*)([eE][+-]?\d*)?)?$|^-(i|in|inf|∞)$", re.IGNORECASE)
MINUS_SIGNS = str.maketrans({"−": "-", "–": "-", ",": "."})


@dataclass(frozen=True)
class Verdict:
    right: bool | None  # None: the input was not an answer (empty, letters); nothing is scored
    message: str


@dataclass(frozen=True)
class Score:
    right: int = 0
    asked: int = 0

    def add(self, verdict: Verdict) -> Score:
        if verdict.right is None:
            return self
        return Score(self.right + int(verdict.right), self.asked + 1)

    def __str__(self) -> str:
        return f"{self.right}/{self.asked} right"


def is_right(guess: float, value: float, integral: bool, decimals: int) -> bool:
    """Whether ``guess`` shows as ``value`` does (the rule in the module docstring)."""
    if math.isinf(value) or math.isinf(guess):
        return guess == value
    if integral:  # whole numbers are exact: any fraction is a different number
        return guess == value
    return fmt(guess, False, decimals) == fmt(value, False, decimals)


def parse_number(text: str) -> float | None:
    """A number as a person types it: ``0.707``, ``.707``, ``-1``, ``1e-3``, ``−∞``, ``-inf``."""
    cleaned = text.strip().translate(MINUS_SIGNS).replace(" ", "")
    if cleaned.lower() in ("-inf", "-∞", "-infinity"):
        return -math.inf
    if not NUMBER.match(cleaned):
        return None
    return float(cleaned)


def check_number(text: str, value: float, integral: bool, decimals: int) -> Verdict:
    shown = fmt(value, integral, decimals)
    if not text.strip():
        return Verdict(None, "Type your prediction (a number), then enter; or press escape to reveal the answer.")
    guess = parse_number(text)
    if guess is None:
        return Verdict(None, f"{text.strip()!r} is not a number. Try something like 2, 0.707 or -1.5 (escape reveals).")
    if is_right(guess, value, integral, decimals):
        return Verdict(True, f"Right: {shown}.")
    return Verdict(False, f"Not quite: you said {text.strip()}, the value is {shown}.")


def could_be_number(text: str) -> bool:
    """Whether ``text`` is a number being typed (the start of one, or a whole one)."""
    return bool(PARTIAL_NUMBER.match(text.translate(MINUS_SIGNS)))


def could_be_choice(text: str, choices: tuple[str, ...]) -> bool:
    """Whether ``text`` is the start of a key's name (in any case) or of its number, 1 to len(choices)."""
    folded = text.casefold()
    if text.isascii() and text.isdigit():
        return any(str(i).startswith(text) for i in range(1, len(choices) + 1))
    return any(c.casefold().startswith(folded) for c in choices)


def check_choice(text: str, choices: tuple[str, ...], best: frozenset[str]) -> Verdict:
    """Which key gets the largest weight: a token label, or its number in the list (any of several tied ones is right)."""
    answer = text.strip()
    if not answer:
        return Verdict(None, "Type the number or the name of the key you think gets the largest weight, then enter.")
    typed = answer.rstrip("0123456789") + answer[len(answer.rstrip("0123456789")):].translate(SUBSCRIPTS)  # the2 → the₂
    numbered = [choices[int(answer) - 1]] if answer.isascii() and answer.isdigit() and 1 <= int(answer) <= len(choices) else []
    matches = (numbered or [c for c in choices if c in (answer, typed)]
               or [c for c in choices if c.lower() in (answer.lower(), typed.lower())])
    if not matches:
        return Verdict(None, f"{answer!r} is not one of the keys here: {', '.join(choices)}.")
    tied = " and ".join(sorted(best))
    gets = "tie for" if len(best) > 1 else "gets"
    if matches[0] in best:
        return Verdict(True, f"Right: {tied} {gets} the largest weight.")
    return Verdict(False, f"Not quite: {tied} {gets} the largest weight, not {matches[0]}.")



@dataclass(frozen=True)
class Question:
    """What the learner is asked before an operation's result is shown."""

    index: int  # the operation
    kind: str  # "value" or "argmax"
    prompt: str
    value: float = 0.0
    integral: bool = False
    decimals: int = 3
    choices: tuple[str, ...] = ()
    best: frozenset[str] = frozenset()
    arithmetic: str = ""  # the operation's arithmetic as shown while asking: what to compute from, no result
    target: str = ""  # what is asked for, as a message names it ("Q[I,1]")
    side: str = ""  # the side view whose step ``index`` is ("" for the trace's operation)

    def check(self, text: str) -> Verdict:
        if self.kind == "argmax":
            return check_choice(text, self.choices, self.best)
        return check_number(text, self.value, self.integral, self.decimals)

    def could_be(self, text: str) -> bool:
        """Whether ``text`` can still become an answer: the answer box takes a key only if so."""
        if self.kind == "argmax":
            return could_be_choice(text, self.choices)
        return could_be_number(text)


def questions(trace: Trace, index: int, decimals: int) -> list[Question]:
    """The questions for one operation, in order; none for look-ups (embedding, concatenation) or for a stage's
    given cells (StageSpec.cells_given: the K and V another layer computed)."""
    op = trace.op(index, decimals)
    if op.col is None or op.value is None or trace.spec(op.segment.stage).cells_given:
        return []
    asked: list[Question] = []
    seg = op.segment
    shown = withheld(trace, index, decimals)
    picked = trace.spec(seg.stage).choice(trace, op)  # a softmax row's first weight: which key gets the most?
    target = op.arithmetic.split(" = ")[0]
    if picked is not None:
        prompt, choices, best = picked
        asked.append(Question(index, "argmax", prompt, choices=choices, best=best, arithmetic=shown,
                              target=f"the largest weight of {target}"))
    integral = trace.integral(seg.target, seg.head)
    asked.append(Question(index, "value", f"What is {target}? Type it, then enter.",
                          value=op.value, integral=integral, decimals=decimals, arithmetic=shown, target=target))
    return asked


def withheld(trace: Trace, index: int, decimals: int) -> str:
    """An operation's arithmetic as shown while its result is asked for (the module docstring says why)."""
    op = trace.op(index, decimals)
    own = trace.spec(op.segment.stage).withheld(trace, op, decimals)
    return hide_result(op.arithmetic) if own is None else own


def hide_result(arithmetic: str) -> str:
    """The arithmetic with its final result replaced by a question mark."""
    head, sep, _ = arithmetic.rpartition(" = ")
    return f"{head}{sep}?" if sep else arithmetic


# a line's result as it is written: a number (−∞ too), or a row of them, then at most a remark
RESULT = re.compile(r"^(?P<row>\[)?(?P<first>[−+-]?(?:∞|\d+(?:\.\d+)?(?:e[+-]\d+)?))(?(row)(?:, [^\]]*)?\])"
                    r"(?:$|;|\s+\()")


def about_line(index: int, line: str, side: str) -> Question | None:
    """A side view's question about one of its lines, ``target = work = result``: the result, or
    for a row the first entry, at the places the line writes it. None when the line works out no
    number (a look-up, a remark)."""
    work, sep, tail = line.rpartition(" = ")
    found = RESULT.match(tail) if sep and " = " in work else None
    if found is None:
        return None
    first = found["first"]
    value = parse_number(first)
    if value is None:
        return None
    target = work.split(" = ")[0]
    if found["row"]:
        target = f"the first entry of {target}"
    mantissa = first.partition("e")[0]
    integral = "." not in mantissa and not math.isinf(value)
    decimals = len(mantissa.partition(".")[2]) if not integral else 0
    return Question(index, "value", f"What is {target}? Type it, then enter.", value=value, integral=integral,
                    decimals=max(decimals, 1), arithmetic=f"{work} = ?", target=target, side=side)
