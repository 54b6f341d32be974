"""The calculator rule on the cross-entropy Loss stage (teach/stages/loss.py) and on the Train view's AdamW lines
(display/train_view.py): each line, recomputed from the numbers it shows, gives the number it shows last, within
one unit of its last digit; exact and by hand, at several decimals. The calculator here is its own (it knows ln,
powers and √), written apart from qkv_tui.teach.arith."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from qkv_tui import compute, load_scenario
from qkv_tui.core.scenario import Scenario, parse_scenario
from qkv_tui.display.train_view import train_explanation
from qkv_tui.teach.handcalc import compute_hand
from qkv_tui.teach.trace import Trace
from qkv_tui.teach.train_walk import TrainRun

from .test_calculator import assert_holds, check_text

NUMBER = r"-?\d+(?:\.\d+)?(?:e[+-]\d+)?"


def _python(side: str) -> str | None:
    """The side as a Python expression of numbers, or None where it names symbols (p[I,1], m̂)."""
    text = side.replace("−", "-").replace("·", "*")
    text = re.sub(r"e\^\(", "exp(", text)
    text = re.sub(r"e\^(" + NUMBER + ")", r"exp(\1)", text)
    text = re.sub(r"√(" + NUMBER + ")", r"sqrt(\1)", text)
    text = text.replace("ln(", "log(").replace("^", "**")
    if not re.fullmatch(r"[\d.\s+\-*/()e]*", re.sub(r"exp|sqrt|log", "", text)):
        return None
    return text


def _unit(text: str) -> float:
    mantissa, _, exponent = text.lstrip("-").partition("e")
    return float(10.0 ** (int(exponent or 0) - len(mantissa.partition(".")[2])))


def recomputed(line: str, whole: bool = True) -> int:
    """How many sides of the line were recomputed; raises AssertionError where one does not give the result.
    ``whole``: every side gives the result (exact); else the last side before it (by hand each product is
    written down rounded first, so only the sum of the written products must give the result)."""
    chain = line.strip().split("; ")[0]
    sides = [s.strip() for s in chain.split(" = ")]
    result = sides[-1]
    if len(sides) < 2 or not re.fullmatch(NUMBER, result):
        return 0
    done = 0
    for side in sides[1:-1] if whole else sides[-2:-1]:
        expr = _python(side)
        if expr is None:
            continue
        value = eval(expr, {"__builtins__": {}}, {"exp": math.exp, "sqrt": math.sqrt, "log": math.log})
        assert abs(value - float(result)) <= _unit(result) * (1 + 1e-9) + 1e-12 * abs(value), f"{side} = {value}: {line}"
        done += 1
    return done


def check_lines(lines: list[str], whole: bool = True) -> int:
    return sum(recomputed(line, whole) for line in lines)


def test_the_calculator_catches_a_wrong_line() -> None:
    with pytest.raises(AssertionError):
        recomputed("loss[I] = −ln p[I,1] = −ln(0.515) = 0.700")
    with pytest.raises(AssertionError):
        recomputed("v̂ = v / (1 − β₂^t) = 0.000095 / (1 − 0.999^1) = 0.000095 / 0.001000 = 0.0096")
    assert recomputed("m̂ = m / (1 − β₁^t) = 0.0308 / (1 − 0.9^1) = 0.0308 / 0.1000 = 0.308") == 2
    assert recomputed("W = w − lr·wd·w − lr·m̂ / (√v̂ + ε) = 1 − 0.1·0.01·1 − 0.1·0.308 / (√0.095 + 1e-08) = 0.899") == 1


def generated(seed: int) -> Scenario:
    """A two-head scenario with a W_O, random numbers, a vocabulary of 5, trained 4 steps with AdamW."""
    rng = np.random.default_rng(seed)

    def m(r: int, c: int) -> str:
        return "[" + ", ".join("[" + ", ".join(f"{x:.2f}" for x in row) + "]" for row in rng.normal(size=(r, c))) + "]"

    text = (f'tokens = ["a", "b", "c", "d"]\nX = {m(4, 3)}\n'
            f"[[heads]]\nW_Q = {m(3, 2)}\nW_K = {m(3, 2)}\nW_V = {m(3, 2)}\n"
            f"[[heads]]\nW_Q = {m(3, 2)}\nW_K = {m(3, 2)}\nW_V = {m(3, 2)}\n"
            f"[output]\nW_O = {m(4, 3)}\n"
            f'[backward]\nloss = "cross_entropy"\nW_U = {m(3, 5)}\nnext = {rng.integers(0, 5, size=4).tolist()}\n'
            f'lr = 0.05\nsteps = 4\noptimizer = "adamw"\nweight_decay = 0.1\nbetas = [0.8, 0.99]\n')
    return parse_scenario(text, "generated.toml")


SCENARIOS = {"builtin": lambda: load_scenario("next_token_adamw"), "generated 1": lambda: generated(1),
             "generated 2": lambda: generated(2)}


def loss_lines(trace: Trace, decimals: int) -> list[str]:
    lines: list[str] = []
    for seg in trace.segments:
        if seg.stage == "loss":
            for i in range(seg.start, seg.stop):
                op = trace.op(i, decimals)
                lines += [op.arithmetic, *op.details]
    return lines


@pytest.mark.parametrize("hand", [False, True])
@pytest.mark.parametrize("decimals", [1, 2, 3, 5])
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_loss_line_checks_out(name: str, decimals: int, hand: bool) -> None:
    comp = compute(SCENARIOS[name]())
    if hand:
        comp = compute_hand(comp, decimals)
    lines = loss_lines(Trace(comp), decimals)
    n, vocab = comp.output.shape[0], comp.scenario.backward.W_U.shape[1]  # type: ignore[union-attr]
    for prefix, count in (("logits[", n * vocab), ("p[", n * vocab), ("loss[", n), ("dlogits[", n * vocab),
                          ("dO[", None), ("dW_U[", None), ("loss = (", 1)):
        mine = [line for line in lines if line.strip().startswith(prefix)]
        assert mine and (count is None or len(mine) == count), prefix
        assert check_lines(mine, whole=not hand) >= len(mine), prefix  # each one recomputed at least once
    # and the project's own calculator agrees wherever it can read a line
    assert_holds(check_text("\n".join(lines), whole=not hand))


@pytest.mark.parametrize("hand", [None, 1, 2, 3])
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_adamw_line_checks_out(name: str, hand: int | None) -> None:
    sc = SCENARIOS[name]()
    run = TrainRun(sc, hand)
    assert sc.backward is not None
    for decimals in ([hand] if hand is not None else [1, 3, 4]):
        for k in range(1, sc.backward.steps + 1):
            ex = train_explanation(run, k, 0, decimals)
            steps = [line.strip() for line in ex.details]
            moved = len(run.moves(k))
            if not moved:  # by hand at 1 decimal a step can round every change away
                continue
            for prefix in ("g = ", "m = β₁", "v = β₂", "m̂ = ", "v̂ = "):
                assert sum(line.startswith(prefix) for line in steps) == 1, (prefix, steps)
            updates = [line for line in steps if "= w − lr·wd·w − lr·m̂ / (√v̂ + ε) =" in line]
            assert len(updates) == min(3, moved)
            worked = [line for line in steps if line.startswith(("m = ", "v = ", "m̂ = ", "v̂ = "))] + updates
            assert check_lines(worked) >= len(worked), worked
            assert_holds(check_text("\n".join([ex.arithmetic, *ex.details]), whole=False))


def test_the_worked_numbers_are_the_run_s() -> None:
    """The m, v, m̂, v̂ the view works for a cell are the ones core/training.py's AdamW used."""
    sc = load_scenario("next_token_adamw")
    run = TrainRun(sc)
    for k in range(1, 4):
        move = run.moves(k)[0]
        a = move.adam
        assert a is not None and a.t == k
        b1, b2 = sc.backward.betas  # type: ignore[union-attr]
        assert a.m == pytest.approx(b1 * a.m0 + (1 - b1) * move.grad, abs=1e-15)
        assert a.v == pytest.approx(b2 * a.v0 + (1 - b2) * move.grad ** 2, abs=1e-15)
        assert a.m_hat == pytest.approx(a.m / (1 - b1 ** k)) and a.v_hat == pytest.approx(a.v / (1 - b2 ** k))


def test_a_next_token_of_p_zero_is_worked_without_p() -> None:
    """p[next] below float64's smallest: −ln p is worked as ln Σ − (z − max), and checks out."""
    sc = load_scenario("next_token_adamw")
    assert sc.backward is not None and sc.backward.W_U is not None
    W_U = "[" + ", ".join("[" + ", ".join(repr(float(x) * 2000) for x in row) + "]" for row in sc.backward.W_U) + "]"
    text = (load_scenario.__globals__["builtin_dir"]() / "next_token_adamw.toml").read_text().split("[backward]")[0]
    far = parse_scenario(f'{text}[backward]\nloss = "cross_entropy"\nW_U = {W_U}\nnext = [2, 2, 2]\n', "far.toml")
    lines = loss_lines(Trace(compute(far)), 3)
    worked = [line for line in lines if "= ln Σ − (z − max) = ln(" in line]
    assert worked
    assert check_lines(worked) >= len(worked)
