"""Every figure the built-in real head's description and its section of docs/real-models.md state, recomputed from the model.

The measurement is benchmarks/previous_word.py (glassllm's own weights, every head of glassllm:en);
the built-in sentence's own rows are recomputed a second time from qkv-tui's computation of the
scenario, the numbers the app shows. Change the model, the sentences or the wording's figures and a
test here fails.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import tomllib
from functools import cache
from pathlib import Path
from types import ModuleType

from qkv_tui import compute, load_scenario

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "glassllm_previous_word.toml"


@cache
def measure() -> ModuleType:
    spec = importlib.util.spec_from_file_location("previous_word", ROOT / "benchmarks" / "previous_word.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@cache
def survey() -> dict:  # type: ignore[type-arg]
    pw = measure()
    return pw.survey(pw.attention_weights())  # type: ignore[no-any-return]


def flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def description() -> str:
    return flat(load_scenario("glassllm_previous_word").description)


def readme_paragraph() -> str:
    """The section "The built-in head" of docs/real-models.md (once the README's paragraph), to the next section or the end."""
    text = (ROOT / "docs" / "real-models.md").read_text(encoding="utf-8")
    start = text.index("## The built-in head\n")
    end = text.find("\n## ", start + 1)
    return flat(text[start:] if end < 0 else text[start:end])


def test_the_sentences_are_the_ones_the_file_lists() -> None:
    pw = measure()
    raw = SCENARIO.read_text(encoding="utf-8")
    listed = [line[4:] for line in raw.splitlines() if line.startswith("#   ") and not line.startswith("#   qkv-tui")]
    assert tuple(listed) == pw.SENTENCES
    assert tomllib.loads(raw)["model"]["text"] == pw.BUILTIN == pw.SENTENCES[0]
    assert f'"{pw.SENTENCES[1]}"' in description()
    for sentence in pw.SENTENCES:
        assert sentence in readme_paragraph()


def test_the_word_rule() -> None:
    pw = measure()
    labels = ["The", "▁c", "at", "▁m", "at", "▁door", "."]
    assert pw.word_starts(labels) == [0, 1, 1, 3, 3, 5, 5]


def test_the_built_in_sentence_row_by_row() -> None:
    """The first paragraph's examples and the second's counts, from the app's own weights."""
    pw = measure()
    comp = compute(load_scenario("glassllm_previous_word"))
    tokens, weights = list(comp.scenario.tokens), comp.heads[0].weights
    top = weights.argmax(axis=1)
    starts = pw.word_starts(tokens)
    rows = [i for i in range(1, len(tokens)) if starts[i] > 0]
    word_first = {i: starts[starts[i] - 1] for i in rows}
    at_word_first = [i for i in rows if top[i] == word_first[i]]
    coinciding = [i for i in at_word_first if word_first[i] == i - 1]
    elsewhere = [i for i in rows if i not in at_word_first]
    just_before = [i for i in elsewhere if top[i] == i - 1]
    themselves = [tokens[i] for i in elsewhere if top[i] == i]
    d = description()
    assert (f"On this sentence {len(at_word_first)} of the {len(rows)} rows peak at the previous word's first token, but for"
            f" {len(coinciding)} of them that is also the token just before; {len(elsewhere)} rows peak elsewhere"
            f" ({len(just_before)} at the token just before, {' and '.join(themselves)} at themselves)") in d
    mat, dog = tokens.index("▁m"), tokens.index("▁do")
    assert tokens[mat + 1] == "at" and tokens[dog + 1] == "g"
    assert tokens[top[mat + 1]] == tokens[top[dog + 1]] == "▁the"
    labels = comp.scenario.labels  # as the screen names them
    assert (f'at₂ of "mat" peaks at {labels[top[mat + 1]]} and g of "dog" at {labels[top[dog + 1]]}' ==
            'at₂ of "mat" peaks at ▁the₁ and g of "dog" at ▁the₂') and labels[mat + 1] == "at₂"
    assert 'at₂ of "mat" peaks at ▁the₁ and g of "dog" at ▁the₂' in d
    assert top[mat + 1] == word_first[mat + 1] and top[dog + 1] == word_first[dog + 1]
    # the app's weights and glassllm's own agree on every row's largest weight
    labels, glass = measure().attention_weights((measure().BUILTIN,))[0]
    assert labels == tokens and (glass[1, 0].argmax(axis=1) == top).all()


def test_the_figures_over_eight_sentences() -> None:
    counts = survey()
    head = counts[(1, 0)]
    later_wf, later = head.hits("word_first", True)
    later_prev, _ = head.hits("previous", True)
    first_prev, first = head.hits("previous", False)
    prev_hits = {key: c.hits("previous")[0] for key, c in counts.items()}
    ranked = sorted((k for k in prev_hits if k != (1, 0)), key=lambda k: -prev_hits[k])
    in_word = {key: c.in_previous_word for key, c in counts.items()}
    runner_up = max((k for k in in_word if k != (1, 0)), key=lambda k: in_word[k])
    assert ranked[:2] == [(1, 2), (2, 1)]  # the two heads the text names are the two that follow the token before most
    assert runner_up == (2, 3) and all(in_word[(1, 0)] > v for k, v in in_word.items() if k != (1, 0))
    # "a word's first piece mostly looks at the token just before it": coinciding rows and the others together
    assert 2 * (first_prev + head.same_hit) > first + head.same
    d = description()
    assert len(head.rows) == later + first
    assert (f"later pieces peak at the previous word's first token {later_wf} times in {later} and at the token just"
            f" before {later_prev} times; a first piece after a word of several pieces peaks at the token just before"
            f" {first_prev} times in {first}.") in d
    assert (f"On those {len(head.rows)} rows other heads follow the token just before far more often: layer 1 head 2"
            f" {prev_hits[(1, 2)]} times, layer 2 head 1 {prev_hits[(2, 1)]} times, this head {prev_hits[(1, 0)]}.") in d
    assert (f"of all {head.with_previous_word} rows with a word before their own, its largest weight lies in that previous"
            f" word {head.in_previous_word} times (the next head, layer 2 head 3: {in_word[(2, 3)]})") in d
    readme = readme_paragraph()
    for figure in (f"{later_wf} of {later}", f"{later_prev} of {later}", f"{first_prev} of {first}",
                   f"{head.in_previous_word} of {head.with_previous_word}", f"layer 2 head 3, {in_word[(2, 3)]}",
                   f"layer 1 head 2 {prev_hits[(1, 2)]}", f"layer 2 head 1 {prev_hits[(2, 1)]}",
                   f"this head {prev_hits[(1, 0)]}", f"{len(head.rows)} rows"):
        assert figure in readme, figure


def test_no_overstated_claim_remains() -> None:
    for text in (description(), readme_paragraph()):
        assert "no cleaner previous-token head" not in text and "64 times in 100" not in text
        assert "evidence, not a rule" in text
