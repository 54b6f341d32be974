"""``--op`` and ``--head`` (and ``--decimals``) for any text a person or a fuzzer types: a whole number, or one
short parser line that repeats the value cut (as ``--stage`` cuts it, teach/place.py), never the whole of 5,000
digits. They read digits of any script exactly where ``--stage`` reads them as a number."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv_tui import compute, load_scenario
from qkv_tui.edges.place_args import add_arguments
from qkv_tui.teach.place import PlaceError, stage_key
from qkv_tui.teach.trace import Trace

TRACE = Trace(compute(load_scenario("i_love_ai")))  # stages 1 Embed … 6 Mix
DIGITS = st.characters(categories=["Nd", "No"])  # every script's decimal digits, and ², ①, ½

def _type_of(flag: str) -> Callable[[str], int]:
    """The parser's reading of the flag's text, as the command line's parser runs it."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    action = next(a for a in parser._actions if flag in a.option_strings)
    parse = action.type
    assert callable(parse) and not isinstance(parse, argparse.FileType)
    return parse


WHOLE = _type_of("--op")
TEXT = st.one_of(st.text(), st.text(DIGITS, min_size=1), st.text(st.sampled_from("0123456789²٣ +-_."), min_size=1),
                 st.integers(-10**30, 10**30).map(str), st.text(min_size=200, max_size=6000),
                 st.integers(1, 6000).map(lambda n: "9" * n))


def _reads_a_number(text: str) -> bool:
    """Whether --stage takes the text as a stage number (in range or not) rather than a name."""
    try:
        stage_key(TRACE, text)
    except PlaceError as exc:
        return " is out of range;" in str(exc)
    return text.strip().isdecimal()


@settings(max_examples=400, deadline=None)
@given(TEXT)
def test_any_text_is_a_whole_number_or_one_short_line(text: str) -> None:
    try:
        value = WHOLE(text)
    except argparse.ArgumentTypeError as exc:
        message = str(exc)
        assert "\n" not in message and len(message) < 200, message
        assert message.endswith(("is not a whole number", "is out of range: no stage has so many operations"))
        return
    body = text.strip()
    assert body.lstrip("+-").isdecimal() and value == int(body)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(DIGITS, min_size=1, max_size=30), st.text(st.sampled_from("0123456789²٣①_ "), min_size=1)))
def test_digits_are_read_where_stage_reads_them(text: str) -> None:
    try:
        value: int | None = WHOLE(text)
    except argparse.ArgumentTypeError as exc:
        value = None
        too_long = "is out of range" in str(exc)
    else:
        too_long = False
    assert (value is not None or too_long) == _reads_a_number(text), text
    if value is not None and 1 <= value <= TRACE.stage_count:
        assert stage_key(TRACE, text) == TRACE.stage_keys[value - 1]


@pytest.mark.parametrize("flag", ["--op", "--head"])
@pytest.mark.parametrize("value", ["9" * 5000, "x" * 5000, "²", "1_0"], ids=["5000-digits", "5000-letters", "sup", "under"])
@pytest.mark.parametrize("mode", [[], ["--serve"]], ids=["app", "serve"])
def test_the_command_line_refuses_them_in_one_short_line(cli, flag: str, value: str, mode: list[str]) -> None:
    run = cli("i_love_ai", *mode, "--stage", "1", flag, value)
    assert run.code == 2 and run.out == "", run
    assert run.err.startswith(f"error: argument {flag}: ") and run.err.count("\n") == 1, run.err
    assert "Traceback" not in run.err and len(run.err) < 200, run.err
    assert value[:13] not in run.err or len(value) < 13


def test_a_digit_of_another_script_opens_as_its_number(cli) -> None:
    run = cli("i_love_ai", "--stage", "1", "--head", "٢")
    assert run.code == 2 and run.err.startswith("error: --head 2 is out of range"), run


def test_a_long_stage_name_is_cut_too(cli) -> None:
    run = cli("i_love_ai", "--stage", "x" * 5000)
    assert run.code == 2 and run.err.count("\n") == 1, run
    assert run.err.startswith("error: --stage 'xxxxxxxxxxxx'… (5,000 characters) is not a stage of this scenario")
