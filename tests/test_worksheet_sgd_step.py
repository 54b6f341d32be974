"""The SGD step that ends a backward worksheet (edges/worksheet/sgd.py, issue 34): each trained weight of [backward]
``train`` moved once, new w = w − lr·g, cell by cell from the weight as printed and the gradient as printed, rounded
once (the printed-page policy), so every answer re-computes from its printed operands on a calculator; in every
format, and without moving the blanks of the page before it."""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import pytest

from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import load_scenario, parse_scenario
from qkv_tui.edges.worksheet.export import render
from qkv_tui.edges.worksheet.make import Worksheet, build
from qkv_tui.edges.worksheet.sgd import sgd_tables
from qkv_tui.kernels.policy import round_to

from .arith_check import check
from .conftest import SCENARIOS
from .test_deltanet_worksheet_backward import case
from .worksheet_lesson import lesson

GQA_BACKWARD = "\n[backward]\ntarget = [[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]]\nlr = 0.25\n"


def sgd(ws: Worksheet) -> list:
    return [t for t in ws.tables if t.stage == "sgd"]


def check_steps(ws: Worksheet) -> None:
    """Each new weight is its printed weight minus lr times its printed gradient, rounded to the page's decimals,
    and every SGD blank's key line re-computes on the calculator."""
    bw = ws.comp.scenario.backward
    assert bw is not None
    by_key = {t.key: t for t in ws.tables}
    for table in sgd(ws):
        key = table.key.removeprefix("sgd.")
        if key.startswith("sink."):
            h = int(key.split(".")[1])
            w = by_key["sinks"].values[:, h:h + 1]
            g = by_key[f"dsink.{h}"].values
        else:
            w = by_key[key].values
            grads = [t for t in ws.tables if t.stage == "backward" and t.name == table.heading.rpartition("lr·")[2]
                     and t.values.shape == w.shape and t.key.endswith(key[key.find("."):] if "." in key else t.key)]
            g = grads[-1].values  # a shared K/V head's: the sum over its readers, printed after their shares
        assert np.array_equal(table.values, round_to(w - bw.lr * g, ws.decimals)), table.key
    steps = [b for b in ws.blanks if b.table.startswith("sgd.")]
    assert steps
    for b in steps:
        assert check(b.working) is True, b.working


def test_learn_to_look_ends_with_the_step_on_w_q_and_w_k() -> None:
    ws = build(compute(load_scenario("learn_to_look")), "100%")
    assert [t.key for t in sgd(ws)] == ["sgd.W_Q.0", "sgd.W_K.0"]  # train = ["W_Q", "W_K"]: W_V stays
    assert [t.key for t in ws.tables][-2:] == ["sgd.W_Q.0", "sgd.W_K.0"]
    check_steps(ws)
    line = next(b.working for b in ws.blanks if b.table == "sgd.W_Q.0")
    assert line.startswith("new W_Q[0,0] = W_Q[0,0] − lr·dW_Q[0,0] = 1 − 0.5·")
    page = ws.markdown()
    assert "## SGD step" in page and "- SGD step: each trained weight moves once against its gradient" in page
    assert "lr = 0.5" in page


def test_every_weight_of_the_default_train_list_gets_its_step() -> None:
    ws = build(lesson(), "100%")
    assert {t.key for t in sgd(ws)} == {"sgd.W_Q.0", "sgd.W_K.0", "sgd.W_V.0", "sgd.W_G.0", "sgd.sink.0",
                                        "sgd.W_Q.1", "sgd.W_K.1", "sgd.W_V.1", "sgd.W_G.1", "sgd.sink.1",
                                        "sgd.W_O", "sgd.gamma", "sgd.gamma_q", "sgd.gamma_k"}
    check_steps(ws)


@pytest.mark.parametrize("decimals", [2, 4])
def test_grouped_heads_move_a_shared_k_v_once_by_the_sum(decimals: int) -> None:
    path = next(p for p in SCENARIOS if p.stem == "gqa")
    sc = parse_scenario(path.read_text(encoding="utf-8") + GQA_BACKWARD, "gqa.toml")
    ws = build(compute(sc), "100%", decimals=decimals)
    keys = [t.key for t in sgd(ws)]
    assert keys.count("sgd.W_K.0") == 1 and "sgd.W_K.1" not in keys and "sgd.W_K.2" in keys  # K/V heads 1 and 2
    check_steps(ws)
    line = next(b.working for b in ws.blanks if b.table == "sgd.W_K.0")
    assert "lr·dW_K" in line


def test_latent_attention_moves_its_latent_weights() -> None:
    ws = build(compute(load_scenario("mla_learns")), "100%")
    assert [t.key for t in sgd(ws)] == ["sgd.W_UK", "sgd.W_KR", "sgd.W_QA"]  # train = ["W_Q", "W_UK", "W_KR"]
    for b in ws.blanks:
        if b.table.startswith("sgd."):
            assert check(b.working) is True, b.working


def test_no_step_without_a_worked_backward() -> None:
    assert not sgd(build(compute(load_scenario("two_heads")), "100%"))
    big = parse_scenario(case(9, 1, 5, 4, d_model=5)[0], "big.toml")  # a delta rule's dg of 20 terms: left to the app
    ws = build(compute(big), "100%")
    assert not sgd(ws) and "this page has the forward pass only" in ws.markdown()
    assert "SGD step" not in ws.markdown()  # nor its rule


def test_the_step_keeps_the_blanks_of_the_page_before_it() -> None:
    sc = load_scenario("learn_to_look")
    assert sc.backward is not None
    still = dataclasses.replace(sc, backward=dataclasses.replace(sc.backward, train=()))
    for blanks in ("25%", "7"):
        with_step, without = build(compute(sc), blanks, seed=3), build(compute(still), blanks, seed=3)
        assert not sgd(without) and sgd(with_step)
        before = [(b.table, b.row, b.col) for b in with_step.blanks if not b.table.startswith("sgd.")]
        if blanks.endswith("%"):
            assert before == [(b.table, b.row, b.col) for b in without.blanks]
        assert len(with_step.blanks) == (7 if blanks == "7" else len(with_step.blanks))


def test_every_format_prints_the_step() -> None:
    ws = build(compute(load_scenario("learn_to_look")), "25%")
    answers = [b for b in ws.blanks if b.table.startswith("sgd.")]
    assert answers
    md, _ = render(ws, "markdown", False)
    html, _ = render(ws, "html", False)
    assert "## SGD step" in md.decode() and "new W_Q = W_Q − lr·dW_Q" in md.decode()
    text = html.decode()
    assert "SGD step" in text and "new" in text and f"({answers[0].number})" in text
    pypdf = pytest.importorskip("pypdf")
    pytest.importorskip("typst")
    questions, key = render(ws, "pdf", True)
    assert key is not None
    sheet_text = " ".join(page.extract_text() for page in pypdf.PdfReader(io.BytesIO(questions)).pages)
    key_text = " ".join(page.extract_text() for page in pypdf.PdfReader(io.BytesIO(key)).pages)
    # the section's name, run in before its first table's caption, and the table's corner
    assert "\nSGD step new 𝑊𝑄" in sheet_text and "new 𝑊𝑄 0 1 2" in sheet_text
    assert answers[-1].answer.replace("-", "−") in key_text or answers[-1].answer in key_text


def test_a_step_past_float64_is_left_off_rather_than_printed_as_inf() -> None:
    ws = build(compute(load_scenario("learn_to_look")))
    sc = ws.comp.scenario
    assert sc.backward is not None
    huge = dataclasses.replace(ws.comp, scenario=dataclasses.replace(sc, backward=dataclasses.replace(sc.backward,
                                                                                                       lr=1e300)))
    tables = [t for t in ws.tables if t.stage != "sgd"]
    steps = sgd_tables(tables, huge, ws.decimals)
    # dW_Q and dW_K hold cells of a few tenths: 1e300 times them stays finite, so both print; past float64, none
    assert [t.key for t in steps] == ["sgd.W_Q.0", "sgd.W_K.0"]
    past = [dataclasses.replace(t, values=t.values * 1e10) if t.key == "dW_K.0" else t for t in tables]
    assert [t.key for t in sgd_tables(past, huge, ws.decimals)] == ["sgd.W_Q.0"]
