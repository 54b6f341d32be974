"""``--stage TEXT`` for any text a person (or a fuzzer) types: a stage, or one PlaceError line, never a
ValueError from int() (``²`` is a digit int() refuses; 5,000 digits pass Python's conversion limit)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv_tui import compute, load_scenario
from qkv_tui.teach.place import PlaceError, stage_key
from qkv_tui.teach.trace import Trace

TRACE = Trace(compute(load_scenario("i_love_ai")))  # stages 1 Embed … 6 Mix
DIGITS = st.characters(categories=["Nd", "No"])  # every script's decimal digits, and ², ①, ½


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(), st.text(DIGITS, min_size=1), st.text(st.sampled_from("0123456789²٣ "), min_size=1)))
def test_any_text_is_a_stage_or_one_place_error(text: str) -> None:
    try:
        key = stage_key(TRACE, text)
    except PlaceError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 400, str(exc)
        return
    assert key in TRACE.stage_keys


def test_a_digit_of_another_script_reads_as_its_number_and_a_superscript_is_no_stage() -> None:
    assert stage_key(TRACE, "٣") == stage_key(TRACE, "3") == stage_key(TRACE, "003")
    with pytest.raises(PlaceError, match=r"^--stage '²' is not a stage of this scenario"):
        stage_key(TRACE, "²")


def test_five_thousand_digits_are_out_of_range_in_a_short_line() -> None:
    with pytest.raises(PlaceError, match=r"^--stage 999999… \(a number of 5,000 digits\) is out of range; this"
                                         r" scenario's stages are 1 … 6"):
        stage_key(TRACE, "9" * 5000)


@pytest.mark.parametrize("stage", ["²", "9" * 5000, "①"], ids=["superscript", "5000-digits", "circled"])
@pytest.mark.parametrize("mode", [[], ["--serve"]], ids=["app", "serve"])
def test_the_command_line_refuses_them_in_one_line_also_under_serve(cli, stage: str, mode: list[str]) -> None:
    run = cli("i_love_ai", *mode, "--stage", stage)
    assert run.code == 2 and run.out == "", run
    assert run.err.startswith("error: --stage ") and run.err.count("\n") == 1, run.err
    assert "Traceback" not in run.err and len(run.err) < 400
