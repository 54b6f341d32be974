"""Wrapping the explanation, the help and the notes: every line fits, nothing is lost, wrapped lines hang."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from qkv_tui.core.fmt import cell_len
from qkv_tui.display.text import wrap
from qkv_tui.teach.trace import STAGES
from qkv_tui.ui.widgets.screens import KEYS, NOTES, HelpScreen, NotesScreen

WORDS = st.lists(st.sampled_from(["a", "row", "(to", "Q)", "e^(0.5", "−", "2.887)", "=", "17.9", "+", "x,",
                                  "[1,", "0]", "sums;", "→", "weights·V", "d_model", "√dₖ", "很好"]),
                 min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(words=WORDS, width=st.integers(min_value=12, max_value=120), prose=st.booleans())
def test_every_line_fits_and_no_word_is_lost(words: list[str], width: int, prose: bool) -> None:
    text = " ".join(words)
    lines = wrap(text, width, prose=prose)
    assert all(cell_len(line) <= width for line in lines)
    assert " ".join(" ".join(lines).split()) == text  # the same words, in order
    assert all(line.startswith("  ") for line in lines[1:])  # continuation lines hang


@settings(max_examples=200, deadline=None)
@given(words=WORDS, width=st.integers(min_value=20, max_value=120))
def test_prose_fills_each_line_before_breaking(words: list[str], width: int) -> None:
    lines = wrap(" ".join(words), width, prose=True)
    for line, following in pairwise(lines):
        words_after = following.split()
        # a line never ends with a lone operator: "− a" moves as one piece
        first_word = " ".join(words_after[:2]) if words_after[0] in ("−", "=", "+", "→") else words_after[0]
        # the next line's first word would not have fitted at the end of this one
        if cell_len(first_word) <= width - 2:
            assert cell_len(line) + 1 + cell_len(first_word) > width


def test_a_stage_meaning_wraps_at_words_not_at_its_first_comma() -> None:
    lines = wrap(STAGES["embed"].meaning, 78, prose=True)
    assert lines[0].startswith("Each token becomes a row of numbers, its embedding; stacked")


def rendered(body: object, width: int) -> list[str]:
    console = Console(width=width, record=True, color_system=None)
    console.print(body)
    return console.export_text().splitlines()


def test_help_descriptions_hang_under_their_own_column() -> None:
    lines = rendered(HelpScreen([STAGES["embed"], STAGES["project"]]).body(), 70)
    start = next(i for i, line in enumerate(lines) if line.startswith("  k "))
    column = lines[start].index("KV cache")
    assert column == 19
    following = lines[start + 1]
    assert following[:column].strip() == "" and following[column] != " "  # the wrap lines up with "KV cache"
    meaning = next(i for i, line in enumerate(lines) if line.strip() == "2 Project") + 1
    assert all(line.startswith("    ") for line in lines[meaning:meaning + 3])  # a stage's words stay indented


def test_notes_hang_after_their_bullet() -> None:
    lines = rendered(NotesScreen().body(), 50)
    first = NOTES[0][1].split()[0]
    body = next(i for i, line in enumerate(lines) if line.startswith(f"  {first}"))
    assert lines[body + 1].startswith("  ") and lines[body + 1][2] != " "
    assert len(KEYS) == sum(1 for line in rendered(HelpScreen([]).body(), 200) if line.startswith("  ") and
                            line[19:20] != " " and line[:19].strip() in {k for k, _ in KEYS})


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(-99, 99, allow_nan=False), min_size=8, max_size=40), st.integers(30, 100))
def test_a_long_list_inside_brackets_breaks_between_its_numbers(values: list[float], width: int) -> None:
    """Found in the cache view: ``softmax([0.707, …, 2.`` / ``121, …])`` cut a number in two at 80 columns."""
    numbers = [f"{v:.3f}" for v in values]
    text = "weights[then] = softmax([" + ", ".join(numbers) + "]) = 1.000"
    lines = wrap(text, width)
    assert all(cell_len(line) <= width for line in lines)
    words = " ".join(lines).replace("softmax([", "").replace("])", "").replace(",", " ").split()
    assert [w for w in words if w in numbers or w.lstrip("-").replace(".", "").isdigit()][: len(numbers)] == numbers
