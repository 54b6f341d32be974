"""The command line: check, export, version, built-in names from any folder."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import subprocess
import sys

import pytest

from .conftest import SCENARIOS


def test_check_all_shipped(cli) -> None:
    run = cli("--check", *map(str, SCENARIOS))
    assert run.code == 0 and run.err == ""
    assert run.out.count("ok: ") == len(SCENARIOS) == 36


def test_json_export_has_full_precision(cli) -> None:
    run = cli("--export", "json", "i_love_ai")
    data = json.loads(run.out)
    head = data["heads"][0]
    assert data["tokens"] == data["key_tokens"] == ["I", "love", "AI"]
    assert data["context_X"] is None and data["W_O"] is None
    assert head["scores"] == [[1, 5, 3], [3, 3, 3], [2, 4, 3]]
    assert head["scale"] == math.sqrt(3)
    assert head["scaled"][0][1] == 5 / math.sqrt(3)  # not rounded
    assert [round(w, 3) for w in head["weights"][0]] == [0.070, 0.707, 0.223]
    assert data["output"] == head["output"] == data["concat"]
    assert set(head) == {"name", "d_k", "scale", "W_Q", "W_K", "W_V", "Q", "K", "V",
                         "scores", "scaled", "masked", "weights", "output",
                         "Q_rot", "K_rot", "bias", "sink", "kv_head", "b_Q", "b_K", "b_V",
                         "Q_norm", "K_norm", "capped", "gate", "gated_output"}  # the modern keys, the biases, the newer ones
    assert (head["gate"], head["gated_output"]) == (None, None)
    assert (head["Q_rot"], head["K_rot"], head["bias"], head["sink"], head["kv_head"]) == (None, None, None, None, 0)
    assert (data["X_norm"], data["positions"], data["b_O"]) == (None, [0, 1, 2], None)
    assert head["capped"] is None and head["Q_norm"] is None and head["K_norm"] is None and data["rope"] is None


def test_json_masked_entries_are_null(cli) -> None:
    data = json.loads(cli("--export", "json", "causal_mask").out)
    assert data["mask"] == [[True, False, False], [True, True, False], [True, True, True]]
    assert data["heads"][0]["masked"][0][1:] == [None, None]
    assert data["heads"][0]["weights"][0] == [1.0, 0.0, 0.0]


def test_json_cross_attention(cli) -> None:
    data = json.loads(cli("--export", "json", "cross_attention").out)
    assert data["tokens"] == ["J'", "aime", "l'IA"]  # the French decoder asks
    assert data["key_tokens"] == ["I", "love", "AI"]  # the English encoder answers
    assert len(data["context_X"][0]) == 4 and len(data["X"][0]) == 3


def test_markdown_holds_the_seed_numbers(cli) -> None:
    page = re.sub(r" +", " ", cli("--export", "markdown", "i_love_ai").out)  # tables are padded to align
    for text in ("Q[I,0] = X[I]·W_Q[:,0] = 1·1 + 0·0 + 1·1 + 0·0 = 2", "| **I** | 1 | 5 | 3 |",
                 "| **love** | 3 | 3 | 3 |", "| **AI** | 2 | 4 | 3 |", "0.577", "2.887", "1.732",
                 "| **I** | 0.070 | 0.707 | 0.223 |", "| **love** | 0.333 | 0.333 | 0.333 |",
                 "| **I** | 1.000 | 1.637 | 0.070 |", "| **love** | 1.000 | 1.000 | 0.333 |",
                 "17.939 / 25.372 = 0.707", "## 6 · Mix", "not the model's thoughts"):
        assert text in page, text


def test_markdown_has_masks_and_heads(cli) -> None:
    page = cli("--export", "markdown", "two_heads").out
    assert "\n## head 2\n" in page and "\n### 6 · Mix\n" in page and "## 7 · Concat" in page and "## 8 · W_O" in page
    masked = cli("--export", "markdown", "causal_mask").out
    assert "−∞" in masked and "masked weights are exactly 0" in masked


def test_version_and_help(cli) -> None:
    run = cli("--version")
    assert run.code == 0 and run.out.startswith("qkv-tui 0.")
    help_run = cli("--help")
    assert help_run.code == 0 and "causal_mask" in help_run.out


def test_builtin_names_work_from_any_folder(tmp_path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-m", "qkv_tui", "--check", "causal_mask", "two_heads.toml"],
                          capture_output=True, text=True, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ok: causal_mask: ")


def test_local_file_wins_over_builtin_name(cli, write, tmp_path, monkeypatch) -> None:
    from .conftest import BASE, HEAD

    write('title = "mine"\n' + BASE + HEAD, "i_love_ai.toml")
    monkeypatch.chdir(tmp_path)
    run = cli("--check", "i_love_ai.toml")
    assert "'mine'" in run.out


def test_markdown_escapes_pipes_in_labels(cli, write) -> None:
    path = write('tokens = ["a|b", "c"]\nX = [[1], [2]]\n[[heads]]\nW_Q = [[1]]\nW_K = [[1]]\nW_V = [[1]]\n')
    page = cli("--export", "markdown", str(path)).out
    assert "| **a\\|b** |   1 |" in page


# --- bare names: the path as given, then NAME.toml here, then the built-in ----------------


def test_bare_name_finds_a_local_file(cli, write, tmp_path, monkeypatch) -> None:
    from .conftest import BASE, HEAD

    write('title = "the cat"\n' + BASE + HEAD, "cat_sat.toml")
    monkeypatch.chdir(tmp_path)
    run = cli("--check", "cat_sat")
    assert run.code == 0 and run.out.startswith("ok: cat_sat: 'the cat'")


def test_local_file_shadows_a_builtin_of_the_same_name(cli, write, tmp_path, monkeypatch) -> None:
    from .conftest import BASE, HEAD

    write('title = "my causal"\n' + BASE + HEAD, "causal_mask.toml")
    monkeypatch.chdir(tmp_path)
    from qkv_tui.core.scenario import builtin_dir

    builtin = builtin_dir() / "causal_mask.toml"
    for spec in ("causal_mask", "causal_mask.toml"):  # a name: one note on stderr says which file, and how to get the other
        run = cli("--check", spec)
        assert "'my causal'" in run.out
        assert run.err == (f"note: {spec}: using ./causal_mask.toml from this folder, not the built-in scenario"
                           f" causal_mask; for the built-in: qkv-tui {builtin}\n")
        assert "'I love AI, causal'" in cli("--check", str(builtin)).out  # ... which works
    run = cli("--check", "./causal_mask.toml")  # a path is only a path: nothing to say
    assert "'my causal'" in run.out and run.err == ""


def test_a_shadowed_builtin_is_noted_but_an_export_writes_only_the_export(cli, write, tmp_path, monkeypatch) -> None:
    from .conftest import BASE, HEAD

    write('title = "mine"\n' + BASE + HEAD, "i_love_ai.toml")
    monkeypatch.chdir(tmp_path)
    for export in ("json", "markdown", "toml", "worksheet"):
        run = cli("--export", export, "i_love_ai")
        assert run.code == 0 and run.err.startswith("note: i_love_ai: using ./i_love_ai.toml from this folder")
        assert run.err.count("\n") == 1 and "note" not in run.out
    assert json.loads(cli("--export", "json", "i_love_ai").out)["title"] == "mine"


def test_no_note_for_a_name_that_is_not_built_in_or_is_the_builtin_itself(cli, write, tmp_path, monkeypatch) -> None:
    from qkv_tui.core.scenario import builtin_dir

    from .conftest import BASE, HEAD

    write(BASE + HEAD, "mine.toml")
    monkeypatch.chdir(tmp_path)
    assert cli("--check", "mine").err == ""
    monkeypatch.chdir(builtin_dir())  # the built-in's own folder: the file found is the built-in
    run = cli("--check", "causal_mask")
    assert run.code == 0 and run.err == ""


def test_builtin_when_nothing_local(cli, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli("--check", "causal_mask").out.startswith("ok: causal_mask: 'I love AI, causal'")
    assert cli("--check", "causal_mask.toml").out.startswith("ok: causal_mask.toml: 'I love AI, causal'")
    run = cli("--check", "./causal_mask.toml")  # a path is only a path
    assert run.code == 2 and "no such file" in run.err
    assert cli("--check", "causal_mask").err == ""  # nothing shadows it: no note


def test_a_file_without_extension_is_taken_as_given(cli, write, tmp_path, monkeypatch) -> None:
    from .conftest import BASE, HEAD

    write('title = "bare"\n' + BASE + HEAD, "i_love_ai")
    write('title = "dot toml"\n' + BASE + HEAD, "i_love_ai.toml")
    monkeypatch.chdir(tmp_path)
    run = cli("--check", "i_love_ai")
    assert "'bare'" in run.out and run.err.startswith("note: i_love_ai: using ./i_love_ai from this folder, not the built-in")


# --- --check warnings -------------------------------------------------------------------


def test_duplicate_tokens_are_valid_with_a_warning(cli, write) -> None:
    path = write('tokens = ["the", "cat", "the"]\nX = [[1], [2], [3]]\n[[heads]]\nW_Q = [[1]]\nW_K = [[1]]\nW_V = [[1]]\n')
    run = cli("--check", str(path))
    assert run.code == 0 and run.out.startswith(f"ok: {path}: ")
    assert run.err == (f'warning: {path}: tokens: 1 label repeats ("the" at items 1, 3);'
                       " the screens tell them apart by occurrence (the₁, the₂)\n")


# --- the JSON layout --------------------------------------------------------------------


def test_json_has_one_matrix_row_per_line(cli) -> None:
    out = cli("--export", "json", "i_love_ai").out
    lines = out.splitlines()
    start = lines.index('      "scores": [')
    assert lines[start + 1: start + 5] == ["        [1.0, 5.0, 3.0],", "        [3.0, 3.0, 3.0],",
                                           "        [2.0, 4.0, 3.0]", "      ],"]
    assert '  "tokens": ["I", "love", "AI"],' in lines
    assert len(lines) < 150


def test_json_numbers_round_trip_exactly(cli) -> None:
    from qkv_tui import compute, load_scenario

    for name in ("two_heads", "cross_attention", "padding_mask", "split_heads"):
        data = json.loads(cli("--export", "json", name).out)
        comp = compute(load_scenario(name))
        for got, head in zip(data["heads"], comp.heads, strict=True):
            for key in ("W_Q", "Q", "K", "V", "scores", "scaled", "weights", "output"):
                assert got[key] == getattr(head, key).tolist(), (name, key)  # bit for bit
            masked = [[None if math.isinf(v) else v for v in row] for row in head.masked.tolist()]
            assert got["masked"] == masked
        assert data["output"] == comp.output.tolist()
        assert data["concat"] == comp.concat.tolist()


def test_json_keeps_unicode_labels_and_escapes_quotes(cli, write) -> None:
    path = write('tokens = ["猫", "say \\"hi\\""]\nX = [[1], [2]]\n[[heads]]\nW_Q = [[1]]\nW_K = [[1]]\nW_V = [[1]]\n')
    out = cli("--export", "json", str(path)).out
    assert '"tokens": ["猫", "say \\"hi\\""]' in out
    assert json.loads(out)["tokens"] == ["猫", 'say "hi"']


# --- the app's exit status -----------------------------------------------------------------


def test_app_crash_gives_a_nonzero_exit_status(cli, monkeypatch) -> None:
    from qkv_tui.ui.app import QKVApp

    def crash(self: QKVApp) -> None:
        raise RuntimeError("boom")

    def headless_run(self: QKVApp) -> None:
        from textual.app import App

        App.run(self, headless=True)

    monkeypatch.setattr(QKVApp, "on_mount", crash)
    monkeypatch.setattr(QKVApp, "run", headless_run)
    monkeypatch.setattr("qkv_tui.edges.cli.terminal_problem", lambda: None)  # headless: no terminal needed
    run = cli("i_love_ai")
    assert run.code == 1


def test_app_normal_exit_is_zero(cli, monkeypatch) -> None:
    from qkv_tui.ui.app import QKVApp

    def headless_run(self: QKVApp) -> None:
        from textual.app import App

        async def leave(pilot: object) -> None:
            self.exit()

        App.run(self, headless=True, auto_pilot=leave)  # type: ignore[arg-type]

    monkeypatch.setattr(QKVApp, "run", headless_run)
    monkeypatch.setattr("qkv_tui.edges.cli.terminal_problem", lambda: None)  # headless: no terminal needed
    assert cli("i_love_ai").code == 0


def test_a_missing_bare_name_says_where_it_looked(cli, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    run = cli("--check", "cat_sat")
    assert run.code == 2
    assert run.err.startswith("error: cat_sat: no such file, no cat_sat.toml in this folder, and no built-in scenario"
                              " of that name (built-in scenarios: ")
    assert "causal_mask, " in run.err and run.err.count("\n") == 1


# --- options where they do nothing ----------------------------------------------------------------


def test_worksheet_options_elsewhere_are_errors(cli, monkeypatch) -> None:
    def started(*_: object, **__: object) -> None:  # an old version ignored the option and went on
        pytest.fail("the app or the server was started")

    monkeypatch.setattr("qkv_tui.ui.app.QKVApp.run", started)
    monkeypatch.setattr("qkv_tui.edges.serve.server.serve", started)
    for args, says in (
        (["--seed", "3", "i_love_ai"], "--seed goes only with --export worksheet"),
        (["--blanks", "4", "--export", "json", "i_love_ai"], "--blanks goes only with --export worksheet"),
        (["--blanks", "4", "--seed", "1", "--check", "i_love_ai"], "--blanks and --seed go only with --export worksheet"),
        (["--seed", "0", "--serve", "i_love_ai"], "--seed goes only with --export worksheet"),
        (["--port", "9000", "i_love_ai"], "--port goes only with --serve"),
        (["--host", "0.0.0.0", "--export", "markdown", "i_love_ai"], "--host goes only with --serve"),
    ):
        run = cli(*args)
        assert (run.code, run.out) == (2, ""), args
        assert run.err == f"error: {says} (see qkv-tui --help)\n", args


def test_worksheet_options_still_work_in_a_worksheet(cli) -> None:
    default = cli("--export", "worksheet", "i_love_ai")
    assert default.code == 0 and default.out == cli("--export", "worksheet", "--blanks", "25%", "--seed", "0", "i_love_ai").out
    other = cli("--export", "worksheet", "--blanks", "5", "--seed", "7", "i_love_ai")
    assert other.code == 0 and other.out != default.out
    assert cli("--export", "worksheet", "--blanks", "lots", "i_love_ai").code == 2


# --- the app needs a terminal ------------------------------------------------------------------------


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("TEXTUAL_DRIVER", None)
    return env


NO_TERMINAL = ("error: the app needs a terminal, and {what} not one; without a terminal, use --export FORMAT"
               " (to a file) or --serve (in web browsers)\n")


def test_without_a_terminal_the_app_refuses_to_start(tmp_path) -> None:
    """`qkv-tui </dev/null >/dev/null` (a cron job, a CI step, a pipe): once it ran unseen, using CPU, until killed."""
    import time

    for new_session in (False, True):  # True: setsid, no controlling terminal at all
        started = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "qkv_tui", "i_love_ai"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120,
                              env=_env(), cwd=tmp_path, start_new_session=new_session)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr == NO_TERMINAL.format(what="standard input and standard error are")
        assert time.monotonic() - started < 60  # it returns at once (the limit only absorbs a busy machine)


def test_a_terminal_on_standard_error_is_not_enough_without_one_on_input() -> None:
    import pty

    leader, follower = pty.openpty()
    try:
        proc = subprocess.run([sys.executable, "-m", "qkv_tui", "i_love_ai"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=follower, timeout=120, env=_env())
        os.close(follower)
        follower = -1
        said = b""
        while b"\n" not in said:
            said += os.read(leader, 4096)
    finally:
        if follower >= 0:
            os.close(follower)
        os.close(leader)
    assert proc.returncode == 2
    assert said.decode().replace("\r\n", "\n") == NO_TERMINAL.format(what="standard input is")


def test_in_a_terminal_the_app_starts_and_quits() -> None:
    """The check lets a real terminal through: the app draws its first operation, and q ends it with 0."""
    import pty
    import select
    import time

    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "qkv_tui", "i_love_ai"], stdin=follower, stdout=follower,
                            stderr=follower, env={**_env(), "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40"},
                            start_new_session=True)
    os.close(follower)
    seen = b""
    try:
        deadline = time.monotonic() + 90
        while b"op 1/66" not in seen and time.monotonic() < deadline:  # a poll for the condition, not a sleep
            if select.select([leader], [], [], 0.5)[0]:
                try:
                    seen += os.read(leader, 65536)
                except OSError:
                    break
        assert b"op 1/66" in seen, seen[-400:]
        os.write(leader, b"q")
        while proc.poll() is None and time.monotonic() < deadline + 30:
            if select.select([leader], [], [], 0.5)[0]:
                with contextlib.suppress(OSError):
                    os.read(leader, 65536)  # keep the terminal drained so the app can write its goodbye
        assert proc.wait(timeout=30) == 0
        assert b"needs a terminal" not in seen
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(leader)
