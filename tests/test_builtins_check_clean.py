"""Every shipped scenario checks clean: ``--check scenarios/*.toml`` prints an ``ok:`` line for each and
nothing on stderr (issue 29 §2). A [model]'s tokens are its tokenizer's: a sentence that repeats "the" is not
a slip in the file, so it is not warned of, while labels a file writes still are."""

from __future__ import annotations

from .conftest import BASE, HEAD, SHIPPED


def test_every_shipped_scenario_checks_without_a_warning(cli) -> None:
    run = cli("--check", *map(str, SHIPPED))
    assert run.code == 0
    assert run.err == ""
    assert run.out.count("\n") == len(SHIPPED) and all(line.startswith("ok: ") for line in run.out.splitlines())


def test_a_models_repeated_tokens_are_not_warned_of(cli) -> None:
    run = cli("--check", "glassllm_previous_word")  # "▁the" three times, "at" twice: the sentence's own
    assert (run.code, run.err) == (0, "")


def test_labels_a_file_writes_still_warn(cli, write) -> None:
    path = write(BASE.replace('"AI"]', '"I"]') + HEAD)
    run = cli("--check", str(path))
    assert run.code == 0
    assert run.err == (f'warning: {path}: tokens: 1 label repeats ("I" at items 1, 3); the screens tell them apart'
                       " by occurrence (I₁, I₂)\n")
