"""The Train view of a scenario that trains only a part's own vectors ([differential]'s λ in differential_learns):
the moves are listed (they read "moved: nothing (0 cells)" while the loss fell), λ is shown at every step, a
change of loss too small for three decimals is written with the digits that show it, and the view's words do not
say that weights q and k are made of move when none does."""

from __future__ import annotations

import math

import numpy as np

from qkv_tui.core.scenario import load_scenario
from qkv_tui.core.variants import differential
from qkv_tui.display.train_view import train_explanation
from qkv_tui.teach.train_walk import TrainRun

from .arith_check import checked


def _lam(sc, h: int) -> float:
    """λ of head h from the scenario's own λ vectors, by the paper's formula (not the kernel's)."""
    df = differential.TABLE.of(sc)
    q1, k1, q2, k2 = (np.asarray(getattr(df, key))[h] for key in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"))
    return math.exp(float(q1 @ k1)) - math.exp(float(q2 @ k2)) + df.lambda_init


def test_the_lambda_vectors_moves_are_listed_and_lambda_is_shown_at_every_step() -> None:
    run = TrainRun(load_scenario("differential_learns"))
    head = 1  # the tilted head: its λ vectors are the ones that move
    name = run.scenario.heads[head].name
    start = _lam(run.at(0).scenario, head)
    for k in range(1, run.total + 1):
        ex = train_explanation(run, k, head, 3)
        moved = next(line for line in ex.details if "moved:" in line)
        assert "nothing" not in moved and "(0 cells)" not in moved, moved
        assert any(line.strip().startswith("lambda_") for line in ex.details), ex.details
        said = next(line for line in ex.details if line.startswith(f"λ ({name})"))
        assert f"{start:.3f} at step 0" in said and f"{_lam(run.at(k).scenario, head):.3f} now" in said, said
    # the climb the scenario's description promises: 0.400, 0.529, 0.632, 0.651
    assert [round(_lam(run.at(k).scenario, head), 3) for k in range(4)] == [0.4, 0.529, 0.632, 0.651]


def test_a_small_change_of_loss_is_written_with_digits_that_show_it() -> None:
    run = TrainRun(load_scenario("differential_learns"))
    for k in range(1, run.total + 1):
        line = train_explanation(run, k, 1, 3).arithmetic
        before, now = run.losses(k)[k - 1], run.losses(k)[k]
        assert before is not None and now is not None
        change = line.split(";")[0].split(" = ")[-1]
        if now != before:
            assert float(change) != 0, line  # "0.000 − 0.000 = 0.000; the loss fell" said nothing
        assert checked([line.split(";")[0]]) == (1, []), line


def test_the_words_name_what_trains_where_no_weight_of_q_or_k_does() -> None:
    run = TrainRun(load_scenario("differential_learns"))
    meaning = train_explanation(run, 1, 1, 3).meaning
    assert "the weights q and k are made of" not in meaning
    assert "lambda_q1" in meaning
