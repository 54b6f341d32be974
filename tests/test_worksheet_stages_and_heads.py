"""``--stages`` and ``--heads`` on a worksheet (edges/worksheet/select.py, issue 34): the sheet asks only about the
stages and heads named, its key follows, every question still reads numbers printed on the page, and a stage or
head the scenario lacks is one ``error:`` line naming what was given and what exists."""

from __future__ import annotations

import pytest

from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import load_scenario
from qkv_tui.edges.worksheet.make import Worksheet, WorksheetError, build
from qkv_tui.edges.worksheet.select import stage_of
from qkv_tui.edges.worksheet.working import Working
from qkv_tui.teach.trace import Trace

from .arith_check import check
from .worksheet_lesson import LESSON, lesson


class Recorder(Working):
    """The page's cells, noting every table a line looks up."""

    read: set[str]

    def txt(self, key: str, row: int, col: int) -> str:
        self.read.add(key)
        return super().txt(key, row, col)


def asked_stages(ws: Worksheet) -> set[str]:
    stage = stage_of(ws.tables, Trace(ws.comp).stage_keys)
    return {stage[b.table] for b in ws.blanks}


def check_questions_read_the_page(ws: Worksheet) -> None:
    """Every blank's working checks out on a calculator and reads only tables this sheet prints: given ones, or
    asked ones before its own."""
    order = {t.key: n for n, t in enumerate(ws.tables)}
    by_key = {t.key: t for t in ws.tables}
    work = Recorder(ws.comp.scenario, by_key, ws.decimals, ws.specs)
    assert ws.asked is not None
    for b in ws.blanks:
        assert b.table in ws.asked
        assert check(b.working) is not False, b.working
        work.read = set()
        assert work.line(by_key[b.table], b.row, b.col) == b.working
        for key in work.read - {b.table}:
            assert key in by_key, (b.working, key)  # printed on this sheet
            operand = by_key[key]
            assert operand.given or key not in ws.asked or order[key] < order[b.table], (b.working, key)


def test_the_default_sheet_asks_about_every_table() -> None:
    ws = build(lesson(), "100%")
    assert ws.asked is None and ws.chosen == ""
    assert "asks about" not in ws.markdown()


def test_a_backward_only_sheet_asks_only_the_backward_and_prints_what_it_reads() -> None:
    full = build(lesson(), "100%")
    ws = build(lesson(), "100%", stages="backward")
    assert ws.asked is not None
    kinds = {t.stage for t in ws.tables if t.key in ws.asked}
    assert kinds == {"backward", "sgd"}  # the SGD step is in the backward group
    assert asked_stages(ws) == {"loss", "dwo", "dgate", "dmix", "dsoftmax", "dscale", "dscore", "drotate", "dqk_norm",
                                "dproject", "dembed", "dnorm", "sgd"}
    check_questions_read_the_page(ws)
    # the forward tables printed are the ones a question reads, given whole: not Q·Kᵀ's scores, which none reads
    forward = [t for t in ws.tables if t.stage not in ("backward", "sgd") and not t.given]
    assert forward and all(t.key not in ws.asked for t in forward)
    assert "scores.0" in {t.key for t in full.tables} and "scores.0" not in {t.key for t in forward}
    assert len(ws.blanks) < len(full.blanks) and len(ws.tables) < len(full.tables)
    page = ws.markdown()
    assert "(given):" in page
    # the backward group, a run of the stage bar's, by its first and last stage
    assert "- This sheet asks about stages Loss … SGD only (--stages, --heads)" in page
    assert "- Softmax, row by row" not in page  # the forward's rules give way to the stages asked


def test_one_head_asks_nothing_of_the_other() -> None:
    ws = build(lesson(), "100%", heads=[1])
    assert ws.asked is not None
    for key in ws.asked:
        table = ws.table(key)
        assert table.head in (None, 0), key
    assert not any(ws.table(b.table).head == 1 for b in ws.blanks)
    # a table of no head that reads the other head's numbers (Concat's, dX̂'s sum) is given, not asked
    assert "dX_in" not in ws.asked and "dX_in" in {t.key for t in ws.tables}
    check_questions_read_the_page(ws)
    page = ws.markdown()
    assert "This sheet asks about head 1 only" in page
    # the other head's scale is not asked, and a sheet of one head's tables names no head on its lines and sections
    assert "- Scale: divide" in page and "- Scale (head" not in page and "## Softmax (head" not in page


def test_backward_and_one_head_together_shrink_the_sheet() -> None:
    full = build(lesson())
    ws = build(lesson(), stages="backward", heads=[1])
    assert ws.asked is not None
    assert all(ws.table(b.table).head in (None, 0) and ws.table(b.table).stage in ("backward", "sgd") for b in ws.blanks)
    assert len(ws.blanks) * 2 < len(full.blanks)
    check_questions_read_the_page(ws)


@pytest.mark.parametrize(("stages", "expected"), [
    ("dsoftmax,DSCORE", {"dsoftmax", "dscore"}),
    ("Score..softmax", {"score", "scale", "softmax"}),
    (" qk-norm ", {"qk_norm"}),
    ("sgd", {"sgd"}),
    ("forward", {"norm", "project", "qk_norm", "rotate", "score", "scale", "softmax", "mix", "gate", "wo"}),
])
def test_stages_are_named_as_the_stage_bar_names_them(stages: str, expected: set[str]) -> None:
    ws = build(lesson(), "100%", stages=stages)
    assert asked_stages(ws) == expected
    check_questions_read_the_page(ws)


def test_the_key_follows_the_selection(cli, tmp_path) -> None:
    path = tmp_path / "lesson.toml"
    path.write_text(LESSON, encoding="utf-8")
    out = tmp_path / "sheet.md"
    run = cli(str(path), "--export", "worksheet", "--stages", "dW_O,sgd", "--heads", "2", "--key", "separate",
              "-o", str(out))
    assert (run.code, run.err) == (0, "")
    sheet, key = out.read_text(encoding="utf-8"), (tmp_path / "sheet-key.md").read_text(encoding="utf-8")
    numbers = [line for line in key.splitlines() if line.startswith("- (")]
    assert numbers and f"blanks: {len(numbers)}." in sheet
    assert all(line.split(") ")[1].startswith(("dConcat", "dW_O", "new ")) for line in numbers), numbers
    assert not any("new W_Q" in line and "(head 1)" in line for line in numbers)


@pytest.mark.parametrize(("args", "expected"), [
    (["--stages", "attend"], "error: --stages 'attend' is not a stage of this scenario; this scenario's stages: Embed,"
                             " Norm, Project, QK-norm, Rotate, Score, Scale, Softmax, Mix, Gate, Concat, W_O, Loss,"),
    (["--stages", "softmax..score"], "error: --stages 'softmax..score': Softmax comes after Score on the stage bar;"),
    (["--stages", "mix,"], "error: --stages 'mix,' names an empty stage; expected NAME,NAME"),
    (["--heads", "3"], "error: --heads 3 is out of range: a worksheet's --heads counts the heads from 1, as --head and"
                       " the status line's (1/2) do; this scenario has heads 1 … 2"),
    (["--heads", "0"], "error: --heads 0 is out of range: a worksheet's --heads counts the heads from 1"),
    (["--heads", "-1"], "error: --heads -1 is out of range: a worksheet's --heads counts the heads from 1"),
    (["--heads", "2,2"], "error: --heads lists head 2 twice; expected each head at most once (heads 1 … 2)"),
    (["--stages", "concat", "--heads", "1"], "error: --stages and --heads leave this worksheet nothing to ask"),
])
def test_a_stage_or_head_the_scenario_lacks_is_one_error_line(cli, tmp_path, args: list[str], expected: str) -> None:
    path = tmp_path / "lesson.toml"
    path.write_text(LESSON, encoding="utf-8")
    run = cli(str(path), "--export", "worksheet", *args)
    assert (run.code, run.out) == (2, "")
    said = expected.removeprefix("error: ")  # after the file's name, as every worksheet error names it
    assert run.err.startswith(f"error: {path}: {said}") and run.err.count("\n") == 1, run.err
    assert "Traceback" not in run.err


def test_backward_on_a_scenario_without_it_says_so(cli) -> None:
    run = cli("two_heads", "--export", "worksheet", "--stages", "backward")
    assert (run.code, run.out) == (2, "")
    assert run.err.startswith("error: ") and "--stages backward: this scenario has no [backward] table" in run.err
    assert "or the groups forward" in run.err and run.err.count("\n") == 1


def test_stages_go_only_with_a_worksheet(cli) -> None:
    run = cli("two_heads", "--export", "json", "--stages", "score")
    assert run.code == 2 and "--stages goes only with --export worksheet" in run.err


def test_heads_without_a_worksheet_or_a_model_still_asks_for_a_model(cli) -> None:
    run = cli("two_heads", "--heads", "1")
    assert run.code == 2 and "--heads go with --model SOURCE" in run.err


def test_help_says_how_a_worksheets_heads_count(cli) -> None:
    text = " ".join(cli("--help").out.split())
    assert "on a worksheet of a SCENARIO, the heads the sheet asks about, counted from 1 as --head counts" in text
    assert "--stages NAME,NAME worksheet: the stages the sheet asks about" in text


def test_one_head_of_a_builtin_backward_scenario() -> None:
    ws = build(compute(load_scenario("learn_to_look")), "100%", stages="backward", heads=[1])
    check_questions_read_the_page(ws)
    with pytest.raises(WorksheetError, match="--heads 2 is out of range"):
        build(compute(load_scenario("learn_to_look")), stages="backward", heads=[2])
