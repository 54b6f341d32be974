"""What a person types counts as docs/scenario-format.md#counting decided: the head in view is a word, "head 2
(2/2)", so ``--head`` counts from 1; a real model's layers and heads keep the model's own numbers, from 0, so
``--layer`` and ``--heads`` do, as ``[model] layer`` and ``heads`` do. A number out of range says so in one line
(issue 29 §2)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(("scenario", "head", "expected"), [
    ("two_heads", "0", "error: --head 0 is out of range: --head counts the heads in view from 1, as the status"
                       " line's (1/2) does; this scenario has heads 1 … 2"),
    ("two_heads", "3", "error: --head 3 is out of range: --head counts the heads in view from 1"),
    ("i_love_ai", "0", "error: --head 0 is out of range: --head counts the heads in view from 1, as the status"
                       " line's (1/1) does; this scenario has one head (--head 1)"),
])
def test_head_out_of_range_says_it_counts_from_one(cli, scenario: str, head: str, expected: str) -> None:
    run = cli(scenario, "--stage", "score", "--head", head)
    assert (run.code, run.out) == (2, "")
    assert run.err.startswith(expected) and run.err.count("\n") == 1, run.err


COUNTING = "--layer and --heads use the model's own numbers, from 0 (--head, the head in view, counts from 1)"


@pytest.mark.parametrize(("args", "expected"), [
    (["--layer", "4"], "error: glassllm:en: --layer 4 is out of range; the model has 4 layers, numbered 0 … 3: "
                       + COUNTING + "\n"),
    (["--heads", "0,4"], "error: glassllm:en: --heads 4 is out of range; the model has 4 heads, numbered 0 … 3: "
                         + COUNTING + "\n"),
    (["--layer", "-1"], f"error: argument --layer: -1 is below 0; {COUNTING} (see qkv-tui --help)\n"),
    (["--heads", "1,-2"], f"error: argument --heads: -2 is below 0; {COUNTING} (see qkv-tui --help)\n"),
    (["--heads", "1,1"], "error: glassllm:en: --heads lists head 1 twice; expected each head at most once\n"),
])
def test_a_models_layer_and_heads_say_they_count_from_zero(cli, args: list[str], expected: str) -> None:
    run = cli("--model", "glassllm:en", "--text", "The cat sat", *args, "--check")
    assert (run.code, run.out) == (2, "")
    assert run.err == expected


def test_layer_zero_and_head_zero_are_a_models_first(cli) -> None:
    run = cli("--model", "glassllm:en", "--text", "The cat sat", "--layer", "0", "--heads", "0", "--check")
    assert run.code == 0 and run.out.startswith("ok: glassllm:en: ")


def test_help_says_how_each_counts(cli) -> None:
    text = " ".join(cli("--help").out.split())
    assert "--head N with --stage: the head in view, 1-based as the status line's (2/2)" in text
    assert "--layer L the layer, numbered from 0 as the model numbers it (default 0)" in text
    assert "--heads H,H query heads, numbered from 0 as the model numbers them, in this order" in text
