"""The command line: check, export, version, built-in names from any folder."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys

from .conftest import SCENARIOS


def test_check_all_shipped(cli) -> None:
    run = cli("--check", *map(str, SCENARIOS))
    assert run.code == 0 and run.err == ""
    assert run.out.count("ok: ") == len(SCENARIOS) == 16


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
                         "Q_rot", "K_rot", "bias", "sink", "kv_head", "b_Q", "b_K", "b_V"}  # contracts §7, then biases
    assert (head["Q_rot"], head["K_rot"], head["bias"], head["sink"], head["kv_head"]) == (None, None, None, None, 0)
    assert (data["X_norm"], data["positions"], data["b_O"]) == (None, [0, 1, 2], None)


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
    assert "'my causal'" in cli("--check", "causal_mask").out
    assert "'my causal'" in cli("--check", "causal_mask.toml").out
    assert "'my causal'" in cli("--check", "./causal_mask.toml").out


def test_builtin_when_nothing_local(cli, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli("--check", "causal_mask").out.startswith("ok: causal_mask: 'I love AI, causal'")
    assert cli("--check", "causal_mask.toml").out.startswith("ok: causal_mask.toml: 'I love AI, causal'")
    run = cli("--check", "./causal_mask.toml")  # a path is only a path
    assert run.code == 2 and "no such file" in run.err


def test_a_file_without_extension_is_taken_as_given(cli, write, tmp_path, monkeypatch) -> None:
    from .conftest import BASE, HEAD

    write('title = "bare"\n' + BASE + HEAD, "i_love_ai")
    write('title = "dot toml"\n' + BASE + HEAD, "i_love_ai.toml")
    monkeypatch.chdir(tmp_path)
    assert "'bare'" in cli("--check", "i_love_ai").out


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
    assert cli("i_love_ai").code == 0


def test_a_missing_bare_name_says_where_it_looked(cli, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    run = cli("--check", "cat_sat")
    assert run.code == 2
    assert run.err.startswith("error: cat_sat: no such file, no cat_sat.toml in this folder, and no built-in scenario"
                              " of that name (built-in scenarios: ")
    assert "causal_mask, " in run.err and run.err.count("\n") == 1
