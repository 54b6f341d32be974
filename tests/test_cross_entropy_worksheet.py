"""The backward worksheet of a cross-entropy scenario that trains with AdamW (issue 34; next_token_adamw):
the Loss's tables (edges/worksheet/backward/cross_entropy.py: logits, p, −ln p, dlogits, dO, dW_U), the chain below
them as any backward sheet has it, and the AdamW step that ends the sheet (edges/worksheet/adamw.py), never titled or
computed as SGD. Each table is torch's operation on the operands the page prints (torch.nn.functional.cross_entropy,
autograd, torch.optim.AdamW), rounded once; it stays near the app's exact numbers (the trace's, the Train view's
first step); every key line re-computes on a calculator; and ``--stages backward --heads 1`` takes a page, its key
another, at 9 pt."""

from __future__ import annotations

import dataclasses
import io
import re
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from qkv_tui.core.engine import compute
from qkv_tui.core.gradients import gradients
from qkv_tui.core.scenario import Scenario, load_scenario, parse_scenario
from qkv_tui.core.training import steps
from qkv_tui.edges.worksheet.make import Worksheet, build
from qkv_tui.edges.worksheet.render import typst as typ
from qkv_tui.edges.worksheet.sheet import sheet
from qkv_tui.kernels.policy import round_to

from .arith_check import check, evaluate
from .conftest import SCENARIOS, Run
from .test_cross_entropy_adamw_lines import generated
from .test_worksheet_backward_variants import check_page
from .test_worksheet_stages_and_heads import check_questions_read_the_page

torch = pytest.importorskip("torch")
F = torch.nn.functional
NAME = "next_token_adamw"
LOSS = ("ce_logits", "ce_p", "ce_loss", "ce_dlogits", "dO", "dW_U")
STEPS = {"sgd.W_Q.0": ("W_Q.0", "dW_Q.0"), "sgd.W_K.0": ("W_K.0", "dW_K.0"), "sgd.W_V.0": ("W_V.0", "dW_V.0"),
         "sgd.W_U": ("W_U", "dW_U")}


def scenario(**backward: object) -> Scenario:
    sc = load_scenario(NAME)
    assert sc.backward is not None
    return dataclasses.replace(sc, backward=dataclasses.replace(sc.backward, **backward)) if backward else sc


def page(blanks: str = "100%", decimals: int = 3, **kw: object) -> tuple[Worksheet, dict[str, np.ndarray]]:
    ws = build(compute(scenario()), blanks, decimals=decimals, **kw)  # type: ignore[arg-type]
    return ws, {t.key: t.values for t in ws.tables}


def t64(x: np.ndarray, grad: bool = False) -> object:
    return torch.tensor(np.asarray(x, dtype=np.float64), requires_grad=grad)


@pytest.mark.parametrize("decimals", [2, 3, 4])
def test_the_loss_tables_are_torchs_on_the_printed_operands(decimals: int) -> None:
    ws, v = page(decimals=decimals)
    sc = ws.comp.scenario
    assert sc.backward is not None and sc.backward.W_U is not None and sc.backward.next is not None
    unit = 10.0 ** -decimals
    nxt = torch.tensor(sc.backward.next, dtype=torch.long)
    out, W_U = v["output.0"], v["W_U"]
    assert np.array_equal(W_U, sc.backward.W_U) and v["next"][:, 0].tolist() == list(sc.backward.next)
    # each table from the ones printed before it, rounded once
    assert np.array_equal(v["ce_logits"], round_to((t64(out) @ t64(W_U)).numpy(), decimals))
    assert np.allclose(v["ce_p"], round_to(torch.softmax(t64(v["ce_logits"]), dim=1).numpy(), decimals), atol=1e-12)
    p_next = v["ce_p"][np.arange(sc.n), sc.backward.next]
    assert np.allclose(v["ce_loss"][:, 0], round_to(-np.log(p_next), decimals), atol=1e-12)
    onehot = F.one_hot(nxt, W_U.shape[1]).double().numpy()
    assert np.allclose(v["ce_dlogits"], round_to((v["ce_p"] - onehot) / sc.n, decimals), atol=1e-12)
    assert np.allclose(v["dO"], round_to(v["ce_dlogits"] @ W_U.T, decimals), atol=1e-12)
    assert np.allclose(v["dW_U"], round_to(out.T @ v["ce_dlogits"], decimals), atol=1e-12)
    # torch's cross_entropy and autograd on the printed output and W_U: the page drifts from them by its rounding
    o, w = t64(out, True), t64(W_U, True)
    logits = o @ w
    logits.retain_grad()
    per_token = F.cross_entropy(logits, nxt, reduction="none")
    per_token.mean().backward()
    near = 8 * unit  # −ln of a p printed at `decimals` (0.086 for 0.0857) moves by a few units
    assert np.abs(v["ce_loss"][:, 0] - per_token.detach().numpy()).max() <= near
    for key, grad in (("ce_dlogits", logits.grad), ("dO", o.grad), ("dW_U", w.grad)):
        assert np.abs(v[key] - grad.numpy()).max() <= 2 * unit, key


def test_the_page_stays_near_the_apps_exact_numbers() -> None:
    """The trace's Loss (kernels/cross_entropy.py, exact) and the page's tables differ by the page's rounding."""
    _, v = page(decimals=4)
    g = gradients(compute(scenario()))
    ce = g.cross_entropy
    assert ce is not None
    exact = {"ce_logits": ce.logits, "ce_p": ce.probs, "ce_loss": ce.nll[:, None], "ce_dlogits": ce.dlogits,
             "dO": ce.dO, "dW_U": ce.dW_U, "dW_Q.0": g.heads[0].dW_Q, "dW_K.0": g.heads[0].dW_K,
             "dW_V.0": g.heads[0].dW_V, "dX_in": g.dX}
    for key, want in exact.items():
        assert np.abs(v[key] - want).max() <= 2e-3, key


def test_the_step_is_adamws_first_as_torch_takes_it() -> None:
    ws, v = page()
    sc = ws.comp.scenario
    bw = sc.backward
    assert bw is not None and bw.adamw
    assert [t.key for t in ws.tables if t.stage == "sgd"] == list(STEPS)
    params = {key: t64(v[w], True) for key, (w, _) in STEPS.items()}
    for key, (_, g) in STEPS.items():
        params[key].grad = t64(v[g])
    opt = torch.optim.AdamW(list(params.values()), lr=bw.lr, betas=bw.betas, eps=bw.eps, weight_decay=bw.weight_decay)
    opt.step()
    for key, p in params.items():  # torch's step on the printed weight and gradient, rounded once
        assert np.allclose(v[key], round_to(p.detach().numpy(), ws.decimals), atol=1e-12), key
    # and the Train view's first step (exact gradients) to within a unit: m̂/√v̂ is the gradient's sign either way
    first = next(s for s in steps(sc, 1) if s.step == 1).scenario
    assert first.backward is not None and first.backward.W_U is not None
    moved = {"sgd.W_Q.0": first.heads[0].W_Q, "sgd.W_K.0": first.heads[0].W_K, "sgd.W_V.0": first.heads[0].W_V,
             "sgd.W_U": first.backward.W_U}
    for key, want in moved.items():
        assert np.abs(v[key] - want).max() <= 10.0 ** -ws.decimals * (1 + 1e-9), key


def test_no_sgd_under_adamw_and_sgd_where_the_file_says_so() -> None:
    ws, _ = page()
    text = ws.markdown()
    assert "## AdamW step" in text and "SGD" not in text
    assert "new W_Q: AdamW, g = dW_Q" in text and "wd = 0.01" in text
    plain = build(compute(scenario(optimizer="sgd")), "100%")
    steps_ = {t.key: t for t in plain.tables if t.stage == "sgd"}
    assert list(steps_) == list(STEPS) and "## SGD step" in plain.markdown() and "AdamW step" not in plain.markdown()
    v = {t.key: t.values for t in plain.tables}
    for key, (w, g) in STEPS.items():
        assert np.array_equal(steps_[key].values, round_to(v[w] - 0.1 * v[g], 3)), key


def text(x: Decimal) -> str:
    return format(x.normalize(), "f")


@pytest.mark.parametrize("decimals", [2, 3])
def test_every_key_line_recomputes(decimals: int) -> None:
    ws, _ = page(decimals=decimals)
    by_key = {t.key: t for t in ws.tables}
    assert {b.table for b in ws.blanks} >= {*LOSS, *STEPS}
    for b in ws.blanks:
        assert check(b.working) is True, b.working
    for b in (b for b in ws.blanks if b.table.startswith("sgd.")):
        # m = 0.1·g and v = 0.001·g·g as the chain's first numbers, m̂ = g and v̂ = g·g its next, exact decimals
        g = Decimal(by_key[STEPS[b.table][1]].text(b.row, b.col, decimals))
        m, v = Decimal("0.1") * g, Decimal("0.001") * g * g
        sides = b.working.split(" = ")
        assert f"/ (√({text(v)} / 0.001) + 0.00000001)" in sides[2] and text(m) in sides[2], b.working
        assert f"{text(g)}" in sides[4] and f"/ (√({text(g * g)}) + 0.00000001)" in sides[4], b.working
        for side in (sides[2], sides[4]):  # every numeric side gives the answer
            value = evaluate(side)
            assert value is not None and abs(float(value) - float(b.answer)) <= 10.0 ** -decimals, (side, b.answer)


def test_a_one_head_backward_sheet_asks_the_loss_the_chain_and_the_step() -> None:
    ws = build(compute(scenario()), "100%", stages="backward", heads=[1])
    assert ws.asked is not None and set(LOSS) | set(STEPS) <= ws.asked
    assert {"dV.0", "dP.0", "D.0", "dS.0", "dscores.0", "dQu.0", "dKu.0", "dW_Q.0", "dW_K.0", "dW_V.0", "dX_in"} <= ws.asked
    assert "stages Loss … AdamW; head 1" in ws.markdown()  # a run of four or more stages by its ends
    check_questions_read_the_page(ws)
    only = build(compute(scenario()), "100%", stages="AdamW")
    assert only.asked == set(STEPS)
    loss = build(compute(scenario()), "100%", stages="Loss")
    assert loss.asked == set(LOSS)
    check_questions_read_the_page(loss)


def test_the_whole_sheet_asks_the_backward_too() -> None:
    ws, _ = page(blanks="25%")
    asked = {b.table for b in ws.blanks}
    assert asked & set(LOSS) and asked & set(STEPS) and "dW_Q.0" in {t.key for t in ws.tables}
    assert "forward pass only" not in ws.markdown()


def test_sgd_names_no_stage_of_an_adamw_scenario(cli: Callable[..., Run]) -> None:
    run = cli("--export", "worksheet", "--stages", "sgd", NAME)
    assert run.code == 2 and run.err.count("\n") == 1 and run.err.startswith("error:")
    assert "Loss, dMix, dSoftmax, dScale, dScore, dProject, dEmbed, AdamW" in run.err


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("decimals", [2, 3])
def test_two_heads_through_w_o_and_other_betas(seed: int, decimals: int) -> None:
    """Two heads, a W_O (dW_U one table below dO: after dConcat), a vocabulary of 5, β = 0.8, 0.99 and wd = 0.1: every
    backward answer is core's gradient on the page, every line checks, and the step is torch's AdamW."""
    sc = generated(seed)
    ws = build(compute(sc), "100%", decimals=decimals)
    assert check_page(ws) > 0
    keys = [t.key for t in ws.tables]
    assert keys.index("dW_U") == keys.index("dConcat") + 1
    v = {t.key: t.values for t in ws.tables}
    bw = sc.backward
    assert bw is not None
    moved = {t.key: t for t in ws.tables if t.stage == "sgd"}
    assert set(moved) == {"sgd.W_Q.0", "sgd.W_K.0", "sgd.W_V.0", "sgd.W_Q.1", "sgd.W_K.1", "sgd.W_V.1", "sgd.W_O",
                          "sgd.W_U"}
    for key in moved:
        w = key.removeprefix("sgd.")
        p = t64(v[w], True)
        p.grad = t64(v[f"d{w}"])
        torch.optim.AdamW([p], lr=bw.lr, betas=bw.betas, eps=bw.eps, weight_decay=bw.weight_decay).step()
        assert np.allclose(v[key], round_to(p.detach().numpy(), decimals), atol=1e-12), key
    for b in ws.blanks:
        if b.table.startswith("sgd."):
            assert check(b.working) is True, b.working
            assert "1 − β₁" in b.working and " 0.2 / " in b.working and "/ 0.01)" in b.working  # 1 − 0.8, 1 − 0.99


def test_a_next_word_printed_with_p_zero_takes_the_form_without_p() -> None:
    """A logit far below its row's max prints p = 0.000: −ln p would be ∞, so the line works ln Σ − (z − max)."""
    path = next(p for p in SCENARIOS if p.stem == NAME)
    given = "W_U = [\n  [1, 0, 1, -1],\n  [0, 1, -1, 1],\n]"
    assert given in path.read_text(encoding="utf-8")
    text = path.read_text(encoding="utf-8").replace(given, "W_U = [\n  [1, 0, 40, -40],\n  [0, 1, -40, 40],\n]")
    ws = build(compute(parse_scenario(text, "far.toml")), "100%")
    v = {t.key: t.values for t in ws.tables}
    assert (v["ce_p"][np.arange(3), [1, 2, 3]] == 0).any()
    lines = [b.working for b in ws.blanks if b.table == "ce_loss"]
    assert any("ln Σ e^(z − max) − (z[next] − max)" in line for line in lines)
    for line in lines:
        assert check(line) is True, line
    assert np.isfinite(v["ce_loss"]).all()


def test_adamw_leaves_out_a_parts_own_sgd_step() -> None:
    """differential_learns trains only its λ vectors, whose step is written as SGD's: under AdamW it is not printed,
    and the rule says so."""
    sc = load_scenario("differential_learns")
    assert sc.backward is not None
    adam = dataclasses.replace(sc, backward=dataclasses.replace(sc.backward, optimizer="adamw"))
    assert [t for t in build(compute(sc), "100%").tables if t.stage == "sgd"]
    ws = build(compute(adam), "100%")
    assert not [t for t in ws.tables if t.stage == "sgd"] and "SGD" not in ws.markdown()
    assert ("Not on this page: the step of lambda_q1, lambda_k1, lambda_q2, lambda_k2 (the Train view takes it)"
            in ws.markdown())
    assert "Not on this page" not in page()[0].markdown()


pypdf = pytest.importorskip("pypdf")


def count(data: bytes) -> int:
    return len(pypdf.PdfReader(io.BytesIO(data)).pages)


def test_the_one_head_backward_sheet_and_its_key_take_two_pages(cli: Callable[..., Run], tmp_path: Path) -> None:
    pytest.importorskip("typst")
    out = tmp_path / "sheet.pdf"
    run = cli("--export", "worksheet", "--stages", "backward", "--heads", "1", "--format", "pdf", "--key", "separate",
              "-o", str(out), NAME)
    assert run.code == 0, run.err
    assert count(out.read_bytes()) == 1 and count((tmp_path / "sheet-key.pdf").read_bytes()) == 1
    together = tmp_path / "together.pdf"
    run = cli("--export", "worksheet", "--stages", "backward", "--heads", "1", "--format", "pdf", "-o", str(together),
              NAME)
    assert run.code == 0, run.err
    assert count(together.read_bytes()) <= 2
    text = typ.source(sheet(build(compute(scenario()), stages="backward", heads=[1])))
    sizes = [float(s) for s in re.findall(r"size: ([\d.]+)pt", text)]
    assert sizes and min(sizes) >= 9.0
