"""Every bad scenario gets one clean line on stderr, exit 2, nothing on stdout, no traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .conftest import BASE, HEAD

HEAD2 = HEAD.replace("[[heads]]", "[[heads]]\nname = \"second\"")

CASES = {
    "toml_syntax": ('tokens = ["I"\nX = [[1]]\n', "line 1, column 14: TOML syntax error: expected ',' or ']' here (the array opened at line 1, column 10 continues at line 2, column 1)"),
    "empty_file": ("   \n", "the file is empty"),
    "unknown_top_key": (BASE.replace("tokens", "tokns") + HEAD, "unknown key 'tokns'; did you mean 'tokens'?"),
    "unknown_head_key": (BASE + HEAD.replace("W_V =", "W_v ="), "unknown key 'W_v' in [[heads]] #1; did you mean 'W_V'? (keys are case-sensitive)"),
    "unknown_mask_key": (BASE + '[mask]\nkind = "padding"\npads = [false, false, true]\n' + HEAD,
                         "unknown key 'pads' in [mask]; did you mean 'pad'?"),
    "nan": (BASE.replace("[1, 0, 1, 0]", "[1, nan, 1, 0]") + HEAD, 'X row 1 ("I"), column 2 is nan; expected a finite number'),
    "inf": (BASE + HEAD.replace("[1, 0, 1], [0, 1, 0]", "[1, 0, inf], [0, 1, 0]"), "[[heads]] #1 W_Q row 1, column 3 is inf; expected a finite number"),
    "huge_integer": (BASE.replace("[1, 0, 1, 0]", f"[1, {10**400}, 1, 0]") + HEAD, 'X row 1 ("I"), column 2 is an integer of about 401 digits, too large'),
    "string_in_matrix": (BASE.replace("[1, 0, 1, 0]", '[1, "0", 1, 0]') + HEAD, 'X row 1 ("I"), column 2 must be a number, got a string'),
    "bool_in_matrix": (BASE.replace("[1, 0, 1, 0]", "[1, true, 1, 0]") + HEAD, 'X row 1 ("I"), column 2 must be a number, got a boolean'),
    "ragged": (BASE.replace("[0, 1, 0, 1]", "[0, 1, 0]") + HEAD, 'X is ragged: row 2 ("love") has 3 numbers, row 1 ("I") has 4; every row needs the same count'),
    "three_d": (BASE.replace("[1, 0, 1, 0]", "[[1], 0, 1, 0]") + HEAD, 'X row 1 ("I"), column 1 is a list; X must be 2-D'),
    "not_a_matrix": ('tokens = ["a"]\nX = 3\n' + HEAD, "X must be a non-empty list of rows"),
    "empty_row": ('tokens = ["a"]\nX = [[]]\n' + HEAD, 'X row 1 ("a") is empty; expected numbers'),
    "missing_tokens": ("X = [[1, 0, 1, 0]]\n" + HEAD, "missing key 'tokens'"),
    "missing_x": ('tokens = ["I"]\n' + HEAD, "missing key 'X'"),
    "empty_tokens": ("tokens = []\nX = [[1, 0, 1, 0]]\n" + HEAD, "tokens must be a non-empty list of strings, got an empty list"),
    "token_not_string": ('tokens = ["I", 2, "AI"]\n' + BASE.split("\n", 2)[2] + HEAD, "tokens item 2 must be a string, got a number (2)"),
    "rows_vs_tokens": (BASE.replace('"AI"]', '"AI", "!"]') + HEAD, "X has 3 rows but there are 4 tokens; expected one row per token"),
    "wq_rows": (BASE + HEAD.replace("[0, 1, 0], [1, 0, 0], [0, 1, 1]]\nW_K", "[0, 1, 0], [1, 0, 0]]\nW_K"),
                "[[heads]] #1 W_Q has 3 rows; expected d_model = 4 (the width of X)"),
    "wk_rows": (BASE + HEAD.replace("W_K = [[0, 0, 1], ", "W_K = ["), "[[heads]] #1 W_K has 3 rows; expected d_model (the width of X) = 4"),
    "dk_mismatch": (BASE + HEAD.replace("W_K = [[0, 0, 1], [1, 1, 0], [0, 1, 0], [1, 0, 1]]",
                                        "W_K = [[0, 0], [1, 1], [0, 1], [1, 0]]"),
                    "[[heads]] #1 W_Q has 3 columns but W_K has 2"),
    "w_o_rows": (BASE + HEAD + "[output]\nW_O = [[1], [1]]\n", "[output] W_O has 2 rows; expected 3, one per column of the head's output (d_v = 3)"),
    "w_o_missing": (BASE + HEAD + "[output]\n", "[output] is missing 'W_O'"),
    "context_rows": (BASE + '[context]\ntokens = ["a", "b"]\nX = [[1, 0, 1, 0]]\n' + HEAD,
                     "[context] X has 1 row but there are 2 context tokens; expected one row per context token"),
    "context_width": (BASE + '[context]\ntokens = ["a"]\nX = [[1, 0]]\n' + HEAD,
                      "[[heads]] #1 W_K has 4 rows; expected the width of [context] X = 2"),
    "mask_kind": (BASE + 'mask = "casual"\n' + HEAD, "mask = 'casual' is not a mask kind; expected one of: none, causal, padding, custom, sliding; did you mean 'causal'?"),
    "mask_type": (BASE + "mask = 3\n" + HEAD, "mask must be a string or a [mask] table"),
    "pad_length": (BASE + '[mask]\nkind = "padding"\npad = [false, true]\n' + HEAD,
                   "[mask] pad must have one true/false per key token: expected 3, got 2 flags"),
    "pad_missing": (BASE + '[mask]\nkind = "padding"\n' + HEAD, "mask kind 'padding' needs pad"),
    "pad_not_bool": (BASE + '[mask]\nkind = "padding"\npad = [0, 0, 1]\n' + HEAD, '[mask] pad item 1 (key "I") must be true or false, got a number (0)'),
    "pad_on_causal": (BASE + '[mask]\nkind = "causal"\npad = [false, false, true]\n' + HEAD,
                      "[mask] pad is only used with kind = 'padding'"),
    "allow_rows": (BASE + '[mask]\nkind = "custom"\nallow = [[1, 1, 1]]\n' + HEAD,
                   "[mask] allow must have one row per query token: expected 3, got 1 row"),
    "allow_cols": (BASE + '[mask]\nkind = "custom"\nallow = [[1, 1, 1], [1, 1], [1, 1, 1]]\n' + HEAD,
                   '[mask] allow row 2 ("love") must have one flag per key token: expected 3, got 2 flags'),
    "allow_value": (BASE + '[mask]\nkind = "custom"\nallow = [[1, 1, 1], [1, 2, 1], [1, 1, 1]]\n' + HEAD,
                    '[mask] allow row 2 ("love"), column 2 ("love") must be 1/0 or true/false, got a number (2)'),
    "row_without_key": (BASE + '[mask]\nkind = "custom"\nallow = [[1, 1, 1], [0, 0, 0], [1, 1, 1]]\n' + HEAD,
                        'query row 2 ("love") may attend no key; every query row needs at least one key it may attend'),
    "all_padding": (BASE + '[mask]\nkind = "padding"\npad = [true, true, true]\n' + HEAD, 'query row 1 ("I") may attend no key'),
    "causal_not_square": (BASE + 'mask = "causal"\n[context]\ntokens = ["a", "b"]\nX = [[1, 0, 1, 0], [0, 1, 0, 1]]\n' + HEAD,
                          "a causal mask needs as many keys as queries, but there are 3 queries and 2 keys"),
    "heads_and_attention": (BASE + HEAD + "[attention]\nnum_heads = 1\nW_Q = [[1]]\nW_K = [[1]]\nW_V = [[1]]\n",
                            "both [[heads]] and [attention] are given"),
    "no_heads": (BASE, "no heads: expected [[heads]] tables"),
    "head_missing_wv": (BASE + HEAD.split("W_V")[0], "[[heads]] #1 is missing W_V"),
    "num_heads_divides": (BASE + "[attention]\nnum_heads = 2\n" + HEAD.split("\n", 2)[2], "which num_heads = 2 does not divide"),
    "num_heads_zero": (BASE + "[attention]\nnum_heads = 0\n" + HEAD.split("\n", 2)[2], "[attention] num_heads must be a whole number >= 1, got a number (0)"),
    "scale_zero": (BASE + "scale = 0\n" + HEAD, "scale = 0; expected a finite number > 0"),
    "scale_negative": (BASE + "scale = -2.5\n" + HEAD, "scale = -2.5; expected a finite number > 0"),
    "scale_nan": (BASE + "scale = nan\n" + HEAD, "scale = nan; expected a finite number > 0"),
    "scale_string": (BASE + 'scale = "sqrt"\n' + HEAD, "scale must be a number > 0, got a string"),
    "overflow": (BASE.replace("[1, 0, 1, 0]", "[1e200, 0, 1e200, 0]") + HEAD, "values in scores overflow float64"),
    "title_type": ("title = 3\n" + BASE + HEAD, "title must be a string, got a number (3)"),
    # a key in the wrong table says where it belongs; a case-only slip suggests the key itself
    "case_only_hint": (BASE + HEAD.replace("W_K =", "W_k ="), "unknown key 'W_k' in [[heads]] #1; did you mean 'W_K'? (keys are case-sensitive)"),
    "scale_in_head": (BASE + HEAD + "scale = 1\n",
                      "key 'scale' is not allowed in [[heads]] #1: scale is a top-level key; write it above the first [table] header"
                      " (in TOML every key after a [header] belongs to that table)"),
    "w_o_in_head": (BASE + HEAD + "W_O = [[1]]\n", "key 'W_O' is not allowed in [[heads]] #1: W_O belongs in [output]"),
    "num_heads_in_head": (BASE + HEAD + "num_heads = 1\n", "key 'num_heads' is not allowed in [[heads]] #1: num_heads belongs in [attention]"),
    "pad_at_top": (BASE + "pad = [true, false, false]\n" + HEAD, "key 'pad' is not allowed: pad belongs in [mask]"),
    "w_q_at_top": (BASE + "W_Q = [[1]]\n" + HEAD, "key 'W_Q' is not allowed: W_Q belongs in a [[heads]] table or [attention]"),
    "name_in_attention": (BASE + "[attention]\nname = \"x\"\nnum_heads = 1\n" + HEAD.split("\n", 2)[2],
                          "key 'name' is not allowed in [attention]: name belongs in a [[heads]] table"),
    "w_o_rows_two_heads": (BASE + HEAD + HEAD + "[output]\nW_O = [[1], [1]]\n",
                           "[output] W_O has 2 rows; expected 6, one per column of the 2 heads' outputs side by side (d_v 3 + 3 = 6)"),
    "num_heads_huge": (BASE + f"[attention]\nnum_heads = 0x{'f' * 3000}\n" + HEAD.split("\n", 2)[2],
                       "[attention] W_Q has 3 columns, which num_heads = an integer of about 3,613 digits does not divide"),
    # labels: never empty, never a control character that would tear a pane
    "empty_token": (BASE.replace('"love"', '""') + HEAD, "tokens item 2 is empty; every label needs at least one visible character"),
    "newline_token": (BASE.replace('"love"', '"lo\\nve"') + HEAD, "tokens item 2 contains a new line (U+000A); expected text that shows on one line"),
    "tab_token": (BASE.replace('"love"', '"lo\\tve"') + HEAD, "tokens item 2 contains a tab (U+0009)"),
    "escape_in_head_name": (BASE + HEAD.replace("[[heads]]", '[[heads]]\nname = "\\u001b[31mred"'),
                            "[[heads]] #1 name contains an escape character (U+001B); expected text that shows on one line"),
    "empty_head_name": (BASE + HEAD.replace("[[heads]]", '[[heads]]\nname = ""'), "[[heads]] #1 name is empty"),
    "key_twice": (BASE + HEAD + "W_Q = [[1]]\n", "line 9: TOML syntax error: W_Q is given twice in this table (first at line 6)"),
    "table_twice": (BASE + '[mask]\nkind = "causal"\n[mask]\nkind = "none"\n' + HEAD,
                    "line 6: TOML syntax error: the table [mask] is declared twice (first at line 4); expected one [mask] header"),
    # a key given twice in two forms: tomllib says only "Cannot overwrite a value"
    "mask_string_and_table": (BASE + 'mask = "causal"\n[mask]\nkind = "none"\n' + HEAD,
                              'line 5: TOML syntax error: mask is given twice, as mask = … at line 4 and as the table [mask] here;'
                              ' expected one of the two (mask = "causal" is short for a [mask] table with kind = "causal")'),
    "mask_inline_and_table": (BASE + 'mask = { kind = "causal" }\n[mask]\nwindow = 2\n' + HEAD,
                              "line 5: TOML syntax error: mask is given twice, as the inline table mask = {…} at line 4 and as the"
                              " table [mask] here"),
    "mask_string_and_dotted": (BASE + 'mask = "causal"\nmask.kind = "none"\n' + HEAD,
                               "line 5: TOML syntax error: mask is given twice, as mask = … at line 4 and as a table, by"
                               " mask.kind = … here; expected one of the two"),
    "mask_inline_and_dotted": (BASE + 'mask = { kind = "causal" }\nmask.window = 2\n' + HEAD,
                               "line 5: TOML syntax error: mask is given twice, as the inline table mask = {…} at line 4"),
    "key_twice_after_a_long_value": (BASE + HEAD + "W_V = [\n  [1, 0, 0],\n  [0, 1, 0]\n]\n",
                                     "line 9: TOML syntax error: W_V is given twice in this table (first at line 8)"),
    "heads_table_after_subtable": (BASE + "[[heads.rope]]\n" + HEAD,
                                   "line 6: TOML syntax error: heads is given twice, as a table, by [[heads.rope]] at line 4"
                                   " and as the list of tables [[heads]] here"),
    # a top-level table written inside another: where it goes, not "above the first header"
    "rope_inside_heads": (BASE + HEAD + '[heads.rope]\nlayout = "half"\n',
                          "key 'rope' is not allowed in [[heads]] #1: [rope] is a table of its own at the top level, one for the"
                          " whole scenario; write it under its own [rope] header, not as [heads.rope] or inside a [[heads]] table"),
    "rope_inline_in_heads": (BASE + HEAD + 'rope = { layout = "half" }\n', "write it under its own [rope] header, not as [heads.rope]"),
    "rope_inside_attention": (BASE + "[attention]\nnum_heads = 1\n" + HEAD.split("\n", 2)[2] + '[attention.rope]\nlayout = "half"\n',
                              "key 'rope' is not allowed in [attention]: [rope] is a table of its own at the top level, one for the"
                              " whole scenario; write it under its own [rope] header, not as [attention.rope] or inside [attention]"),
    "mask_inside_heads": (BASE + HEAD + '[heads.mask]\nkind = "causal"\n', "write it under its own [mask] header, not as [heads.mask]"),
    "string_open_at_line_end": ('title = "I love AI\n' + BASE + HEAD,
                                "line 1, column 9: TOML syntax error: the string that starts here is never closed"),
    "blank_token": (BASE.replace('"love"', '"   "') + HEAD,
                    "tokens item 2 is '   ', which shows nothing (only spaces or invisible characters)"),
    "zero_width_token": (BASE.replace('"love"', '"\\u200b"') + HEAD, "tokens item 2 is '\\u200b', which shows nothing"),
    "empty_title": ('title = ""\n' + BASE + HEAD, "title is empty; every label needs at least one visible character"),
    "blank_title": ('title = "  "\n' + BASE + HEAD, "title is '  ', which shows nothing"),
    "bidi_override_in_context": (BASE + '[context]\ntokens = ["a\\u202eb"]\nX = [[1, 0, 1, 0]]\n' + HEAD,
                                 "[context] tokens item 1 contains a control character (U+202E)"),
    "newline_in_title": ('title = "two\\nlines"\n' + BASE + HEAD, "title contains a new line (U+000A); expected text that shows on one line"),
    "escape_in_description": ('description = """fine\nbut \\u001b[2J"""\n' + BASE + HEAD,
                              "description contains an escape character (U+001B); expected printable text (new lines and tabs are fine)"),
    # TOML syntax: the position of the mistake, also at the end of the file
    "missing_comma_between_rows": ('tokens = ["I", "love"]\nX = [[1, 0]\n     [0, 1]]\n' + HEAD,
                                   "line 2, column 12: TOML syntax error: expected ',' or ']' here"
                                   " (the array opened at line 2, column 5 continues at line 3, column 6)"),
    "eof_inside_array": ('tokens = ["I"]\nX = [[1, 0, 1, 0]\n', "line 2, column 5: TOML syntax error: the file ends inside the array that opens here; expected ']'"),
    "eof_inside_inline_table": ('tokens = ["I"]\nmask = {kind = "causal"\n', "line 2, column 24: TOML syntax error: expected ',' or '}' here; an inline table must close on the line where it opens (at line 2, column 8)"),
    "eof_inside_string": ('tokens = ["I"]\ntitle = "abc', 'line 2, column 9: TOML syntax error: the string that starts here is never closed; expected a closing "'),
    "eof_inside_multiline_string": ('description = """abc\n\nmore\n', 'line 1, column 15: TOML syntax error: the string that starts here is never closed; expected a closing """'),
    "eof_missing_value": ('tokens = ["I"]\nX = ', "line 2, column 5 (the end of the file): TOML syntax error: Invalid value"),
    "brackets_in_strings_do_not_count": ('title = "[[[" # ]]\ntokens = ["I"\n', "line 2, column 10: TOML syntax error: the file ends inside the array"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_check_reports_one_clean_line(case: str, cli, write) -> None:
    text, expected = CASES[case]
    path = write(text)
    run = cli("--check", str(path))
    assert run.code == 2
    assert run.out == ""
    lines = run.err.splitlines()
    assert len(lines) == 1, run.err
    assert lines[0].startswith(f"error: {path}: ")
    assert expected in lines[0]
    assert "Traceback" not in run.err


@pytest.mark.parametrize("mode", [("--export", "json"), ("--export", "markdown"), ()])
@pytest.mark.parametrize("case", ["toml_syntax", "nan", "overflow", "row_without_key"])
def test_every_command_refuses_bad_files(case: str, mode: tuple[str, ...], cli, write) -> None:
    path = write(CASES[case][0])
    run = cli(*mode, str(path))
    assert (run.code, run.out) == (2, "")
    assert run.err.count("\n") == 1 and run.err.startswith(f"error: {path}: ")


def test_missing_file(cli) -> None:
    run = cli("--check", "no/such/file.toml")
    assert run.code == 2
    assert run.err.startswith("error: no/such/file.toml: no such file (built-in scenarios: alibi, causal_mask,")


def test_directory(cli, tmp_path) -> None:
    run = cli("--export", "json", str(tmp_path))
    assert run.code == 2
    assert run.err == f"error: {tmp_path}: is a directory; expected a .toml scenario file\n"


def test_not_utf8(cli, write) -> None:
    path = write(b'tokens = ["I"]\ntitle = "caf\xe9"\n')
    run = cli("--check", str(path))
    assert run.code == 2
    assert run.err == f"error: {path}: line 2, column 13: not UTF-8 text (byte 0xe9); save the file as UTF-8\n"


def test_utf8_with_bom_is_fine(cli, write) -> None:
    path = write(("\ufeff" + BASE + HEAD).encode())
    assert cli("--check", str(path)).code == 0


def test_check_mixes_good_and_bad(cli, write) -> None:
    bad = write("tokens = 3\n", "bad.toml")
    run = cli("--check", "i_love_ai", str(bad), "causal_mask")
    assert run.code == 2
    assert run.out.count("\n") == 2 and run.out.startswith("ok: i_love_ai: 'I love AI', 3 tokens")
    assert run.err.startswith(f"error: {bad}: tokens must be")


@pytest.mark.parametrize("args", [("--export", "xml", "i_love_ai"), ("--bogus",), ("a.toml", "b.toml"), ("--check",)])
def test_bad_arguments(args: tuple[str, ...], cli) -> None:
    run = cli(*args)
    assert run.code == 2 and run.out == ""
    assert run.err.startswith("error: ") and run.err.count("\n") == 1


def test_real_process_prints_no_traceback(write) -> None:
    path = write(CASES["overflow"][0])
    proc = subprocess.run([sys.executable, "-m", "qkv_tui", str(path)], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith(f"error: {path}: head 1: values in scores overflow float64")


def test_messages_count_from_one_and_name_rows_by_token() -> None:
    """No 0-based ``X[1][1]`` anywhere: rows and columns are counted as a teacher counts."""
    import re

    from qkv_tui.core.scenario import ScenarioError, parse_scenario
    from qkv_tui.edges.cli import check

    for case, (text, _) in CASES.items():
        try:
            check(parse_scenario(text, "f.toml"))
        except ScenarioError as exc:
            assert not re.search(r"\w\[\d+\]", exc.message), (case, exc.message)
            assert "row 0" not in exc.message and "column 0" not in exc.message, (case, exc.message)
        else:
            raise AssertionError(f"{case} was accepted")


def test_a_models_blank_token_is_shown_not_refused() -> None:
    """A tokenizer may give a token of spaces: the label must show it, and pass the blank-label rule."""
    from qkv_tui.base.values import token_label, visible

    labels = [token_label(t) for t in (" ", "  ", "\u200b", "\n", "", "Ġthe", "a b")]
    assert labels == ["␣", "␣␣", "\\u200b", "\\n", "∅", "Ġthe", "a b"]
    assert all(visible(label) for label in labels)
