"""Repeated token labels: told apart everywhere they are shown (one function), and warned about in one line.

A real sentence repeats "the" and word pieces; the panes, the arithmetic lines, the map, the closing
summary, the quiz and the edit prompt all name ▁the₂ for the second "▁the".
"""

from __future__ import annotations

import pytest

from qkv_tui import compute, load_scenario
from qkv_tui.base.values import distinct_labels
from qkv_tui.core.cell_edit import parse_address
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.display.heatmap import attention_map
from qkv_tui.edges.export_markdown import to_markdown
from qkv_tui.teach.quiz import questions
from qkv_tui.teach.summary import closing_summary
from qkv_tui.teach.trace import Trace


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        (("I", "love", "AI"), ("I", "love", "AI")),  # nothing repeats: nothing changes
        (("the", "cat", "the", "the"), ("the₁", "cat", "the₂", "the₃")),
        (("a", "a₂", "a"), ("a@0", "a₂", "a@2")),  # a subscript would collide with a real label: positions instead
    ],
)
def test_distinct_labels(given: tuple[str, ...], shown: tuple[str, ...]) -> None:
    assert distinct_labels(given) == shown
    assert len(set(distinct_labels(given))) == len(given)


@pytest.fixture(scope="module")
def trace() -> Trace:
    return Trace(compute(load_scenario("glassllm_previous_word")))


def test_the_built_in_names_each_the(trace: Trace) -> None:
    sc = trace.comp.scenario
    assert [sc.tokens[i] for i in (6, 10, 17)] == ["▁the"] * 3  # the tokens stay as the tokenizer spells them
    assert [sc.labels[i] for i in (6, 10, 17)] == ["▁the₁", "▁the₂", "▁the₃"]
    assert (sc.labels[2], sc.labels[8]) == ("at₁", "at₂") and sc.labels[7] == "▁m"
    rows = [trace.row_label("Q", r) for r in range(sc.n)]
    cols = [trace.col_label("weights", c) for c in range(sc.m)]
    assert len(set(rows)) == len(set(cols)) == sc.n == 20


def test_arithmetic_lines_name_the_occurrence(trace: Trace) -> None:
    assert trace.op(10).arithmetic.startswith('X[▁the₂] = residual stream entering layer 1 at "▁the₂" = [')
    score = next(s for s in trace.segments if s.stage == "score")
    line = trace.op(score.start + 12 * 20 + 10).arithmetic  # row g, key ▁the₂
    assert line.startswith("scores[g,▁the₂] = ")
    layer0 = Trace(compute(parse_scenario(
        '[model]\nsource = "glassllm:en"\ntext = "a cat and the dog and the bird"\nlayer = 0\nheads = [0]\n', "l0.toml")))
    second = layer0.comp.scenario.labels.index("▁the₂")
    assert layer0.op(second).arithmetic.startswith('X[▁the₂] = embedding of "▁the" = [')  # one embedding per token


def test_the_map_the_summary_and_the_page(trace: Trace) -> None:
    last = len(trace) - 1
    amap = attention_map(trace, 0, last)
    assert amap.row_labels[10].rstrip() == "10 ▁the₂" and amap.row_labels[17].rstrip() == "17 ▁the₃"
    summary = " ".join(closing_summary(trace.comp, 0, len(trace), 3)).replace("\xa0", " ")
    assert "▁sa → at₁ 0.675" in summary and "▁m → ▁the₁ 0.885" in summary
    page = to_markdown(trace.comp)
    assert "▁the₂" in page and "| ▁the₃ |" in page


def test_the_quiz_offers_distinct_keys_and_takes_typed_digits(trace: Trace) -> None:
    softmax = next(s for s in trace.segments if s.stage == "softmax")
    question = questions(trace, softmax.start + 12 * 20, 3)[0]  # row g: its largest weight is on ▁the₂
    assert question.kind == "argmax" and "▁the₂" in question.choices and question.best == frozenset({"▁the₂"})
    assert question.check("▁the2").right and question.check("▁the₂").right
    assert question.check("▁the1").right is False


def test_an_edit_names_the_occurrence() -> None:
    sc = parse_scenario('tokens = ["the", "cat", "the"]\nX = [[1], [2], [3]]\n[[heads]]\nW_Q = [[1]]\nW_K = [[1]]\nW_V = [[1]]\n',
                        "t.toml")
    cell, _ = parse_address(sc, "X[the₂,0] = 5")
    assert cell is not None and cell.row == 2 and cell.label(sc) == "X[the₂,0]"
    cell, _ = parse_address(sc, "X[the,0] = 5")  # as the file spells it: the first occurrence, as before
    assert cell is not None and cell.row == 0


def test_a_real_sentence_warns_once(cli, write) -> None:
    """Frozen into a file, the tokenizer's tokens are labels the file writes: repeats get one warning line.
    Read from the model they are the sentence's own (test_builtins_check_clean): no warning."""
    text = "the cat and the dog and the bird and the fish saw the other cat and the other dog by the door"
    run = cli("--model", "glassllm:en", "--text", text, "--check")
    assert run.code == 0 and run.err == "", run.err
    frozen = cli("--model", "glassllm:en", "--text", text, "--export", "toml")
    path = write(frozen.out)
    run = cli("--check", str(path))
    assert run.code == 0 and run.err.count("\n") == 1, run.err
    assert run.err.startswith(f"warning: {path}: tokens: ") and "labels repeat" in run.err
    assert '"▁the" at items 5, 9, 14, 18, …' in run.err and "and 3 more" in run.err and len(run.err) < 400
    assert run.err.endswith("the screens tell them apart by occurrence (▁c₁, ▁c₂)\n")
