"""Backward worksheets of every variant (edges/worksheet/backward/tables.py): every key answer is core/gradients.py's
gradient on the printed page, rounded as printed; every blank's operands are printed or earlier answers; every
key line checks out on a calculator; the typeset PDF holds the key on its key pages and no blanked answer on
its question pages. On every built-in that has a backward pass (a target appended where it has none) and on
generated scenarios combining the variants."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv_tui.core.engine import compute
from qkv_tui.core.fmt import fmt
from qkv_tui.core.gradients import Gradients, gradients
from qkv_tui.core.scenario import Scenario, parse_scenario
from qkv_tui.edges.worksheet.backward.tables import SHEET, PageBackward, covered, page_trig, printed_computation
from qkv_tui.edges.worksheet.chain import Table
from qkv_tui.edges.worksheet.make import Worksheet, build
from qkv_tui.edges.worksheet.render import markdown as md
from qkv_tui.edges.worksheet.sheet import sheet
from qkv_tui.edges.worksheet.working import Working
from qkv_tui.kernels.gate_backward import GateBack
from qkv_tui.kernels.linear_backward import LinearBack
from qkv_tui.kernels.mla_backward import MlaBack
from qkv_tui.teach.stages.printed import PrintedChain
from qkv_tui.teach.trace import Trace

from .arith_check import check
from .test_backward_torch import BUILT_INS, _builtin, shape_of, with_backward
from .variants_cases import ModernCase, matrix, modern_cases

line = SHEET.worksheet_line  # the answer key's line as the page writes it: the Loss's own first, then the chain's

Cell = tuple[str, int, int]


def scenario_of(name: str) -> Scenario:
    text = _builtin(name)
    if "[backward]" in text:
        return parse_scenario(text, f"{name}.toml")
    n, d_out = shape_of(text)
    return with_backward(text, np.random.default_rng(len(name)).normal(size=(n, d_out)).round(2).tolist())


def page_grads(ws: Worksheet) -> Gradients:
    """core/gradients.py on the page's printed forward pass, under the page's policy."""
    printed = PrintedChain(ws.comp, ws.decimals)
    for spec, head in Trace(ws.comp).walk():
        printed.add(spec.worksheet_tables(printed, head))
    return gradients(printed_computation(printed), PageBackward(ws.decimals), page_trig(printed))


def gradient_of(G: Gradients, key: str) -> Any:
    """The gradient a backward table prints, by its key (written here apart from the page's own tables)."""
    kind, _, suffix = key.partition(".")
    if (mb := G.part(MlaBack)) is not None and kind in MLA:
        value = getattr(mb, MLA[kind])
        return value[int(suffix)] if suffix else value
    if not suffix and (ce := G.cross_entropy) is not None and kind in CROSS_ENTROPY:  # the cross-entropy's Loss
        return getattr(ce, CROSS_ENTROPY[kind]) if kind != "ce_loss" else ce.nll[:, None]
    if not suffix:
        return {"dO": G.dO, "dConcat": G.d_concat, "dW_O": G.dW_O, "db_O": G.db_O, "dX_in": G.dX_norm, "dX": G.dX,
                "dgamma": G.dgamma, "dbeta": G.dbeta, "dgamma_q": G.dgamma_q, "dgamma_k": G.dgamma_k}.get(kind)
    h = int(suffix)
    hg = G.heads[h]
    if kind.startswith("kv"):
        kv = next(k for k in G.kv_heads if k.heads[0] == h)
        return getattr(kv, kind[2:])
    a = hg.attend
    table = {"dV": a.dV, "dP": a.dP, "D": a.D, "dS": a.dS, "dscores": a.dscores, "dQu": a.dQ_used, "dKu": a.dK_used,
             "dQt": hg.dQ_turned, "dKt": hg.dK_turned, "dQ": hg.dQ, "dK": hg.dK, "dW_Q": hg.dW_Q, "dW_K": hg.dW_K,
             "dW_V": hg.dW_V, "db_Q": hg.db_Q, "db_K": hg.db_K, "db_V": hg.db_V, "dgamma_q": hg.dgamma_q,
             "dgamma_k": hg.dgamma_k, "dsink": None if a.dsink is None else np.array([[a.dsink]])}
    if (gb := hg.part(GateBack)) is not None:
        table |= {"dOh": gb.d_output, "dz": gb.d_logit, "dW_G": gb.dW_G}
    if (lb := hg.part(LinearBack)) is not None:
        table |= {"dP": lb.dweights, "dA": lb.dA, "dphiQ": lb.dphi_Q, "dphiK": lb.dphi_K}
    if kind == "dcap":
        return a.dscaled
    return table.get(kind)


# [mla]'s latent tables by key: MlaBack's fields
MLA = {"mqR": "dq_R_raw", "mkR": "dk_R", "mkRraw": "dk_R_raw", "mcKV": "dc_KV", "mW_UK": "dW_UK", "mW_UV": "dW_UV",
       "mW_KR": "dW_KR", "mW_Q": "dW_Q", "mW_DKV": "dW_DKV"}

# the cross-entropy Loss's tables by key: CrossEntropy's fields (edges/worksheet/backward/cross_entropy.py)
CROSS_ENTROPY = {"ce_logits": "logits", "ce_p": "probs", "ce_loss": "nll", "ce_dlogits": "dlogits", "dW_U": "dW_U"}

# what the backward's own working prints as a table of its own (the norms' r, x̂ and m, a sink's share)
INTERMEDIATE = ("qroot", "kroot", "qhat", "khat", "qm", "km", "xroot", "xhat", "xm", "xgbar", "psink",
                "aqroot", "aqhat", "aqm", "akroot", "akhat", "akm", "akc")  # the last: QK-norm over every head's


class Recorder(Working):
    """The page's cells, noting every operand a line reads."""

    read: list[Cell]

    def txt(self, key: str, row: int, col: int) -> str:
        self.read.append((key, row, col))
        return super().txt(key, row, col)


def check_page(ws: Worksheet) -> int:
    """Every backward blank: its answer is the gradient, its operands are on the page before it, its line checks
    out. Returns how many backward blanks the page has."""
    sc = ws.comp.scenario
    G = page_grads(ws)
    order = {t.key: n for n, t in enumerate(ws.tables)}
    by_key = {t.key: t for t in ws.tables}
    blanks = {(b.table, b.row, b.col): b for b in ws.blanks}
    work = Recorder(sc, by_key, ws.decimals, ws.specs)
    count = 0
    for b in ws.blanks:
        table = by_key[b.table]
        if table.stage != "backward":
            continue
        count += 1
        kind = b.table.partition(".")[0]
        if kind not in INTERMEDIATE:
            value = gradient_of(G, b.table)
            assert value is not None, b.table
            grid = np.atleast_2d(np.asarray(value, dtype=float))
            grid = grid.T if kind == "D" else grid
            assert b.answer == fmt(float(grid[b.row, b.col]), False, ws.decimals), (b.table, b.row, b.col)
        assert check(b.working) is True, b.working
        work.read = []
        assert line(work, table, b.row, b.col, b.answer) == b.working
        assert work.read or " = 0 = " in b.working, b.working  # a key no query attends reads nothing
        for ref in work.read:
            operand = by_key[ref[0]]
            assert operand.given or order[ref[0]] < order[b.table], (b.working, ref)  # printed before this table
            earlier = blanks.get(ref)
            assert earlier is None or earlier.number < b.number, (b.working, ref)  # or an earlier answer
    return count


def _table(ws: Worksheet, key: str) -> Table:
    return next(t for t in ws.tables if t.key == key)


BACKWARD_BUILT_INS = [name for name in BUILT_INS if covered(scenario_of(name))]


@pytest.mark.parametrize("name", BACKWARD_BUILT_INS)
@pytest.mark.parametrize(("blanks", "seed", "decimals"), [("100%", 0, 3), ("30%", 1, 2), ("100%", 2, 4)])
def test_every_builtin_backward_page_checks_out(name: str, blanks: str, seed: int, decimals: int) -> None:
    ws = build(compute(scenario_of(name)), blanks, seed, decimals)
    assert check_page(ws) > 0
    assert "## Backward" in ws.markdown()
    assert "not cover" not in ws.markdown()


@pytest.mark.parametrize("name", ["pre_norm", "gated", "softcap", "qk_norm", "gqa", "rope_scaling", "sink"])
def test_the_page_stays_near_the_exact_gradients(name: str) -> None:
    """The page works from rounded numbers; at 6 decimals its gradients drift from the exact ones by little."""
    comp = compute(scenario_of(name))
    ws = build(comp, "0", decimals=6)
    exact, page = gradients(comp), page_grads(ws)
    for ours, theirs in ((page.dX, exact.dX), (page.heads[0].dW_Q, exact.heads[0].dW_Q),
                         (page.heads[0].dW_V, exact.heads[0].dW_V)):
        assert np.allclose(ours, theirs, atol=2e-3 * max(1.0, float(np.abs(theirs).max()))), name


def test_every_variant_walks_its_stages() -> None:
    keys = {name: {t.key.partition(".")[0] for t in build(compute(scenario_of(name)), "0").tables}
            for name in ("gated", "softcap", "sink", "rope", "qk_norm", "gqa", "pre_norm", "two_heads")}
    assert {"dOh", "dz", "dW_G"} <= keys["gated"]
    assert "dcap" in keys["softcap"]
    assert {"psink", "dsink"} <= keys["sink"]
    assert {"dQt", "dKt"} <= keys["rope"]
    assert {"qroot", "qhat", "qm", "dQ", "dK", "dgamma_q", "dgamma_k"} <= keys["qk_norm"]
    assert {"kvdW_K", "kvdW_V"} <= keys["gqa"]
    assert {"xroot", "xhat", "xm", "dX", "dgamma"} <= keys["pre_norm"]
    assert {"dConcat", "dW_O"} <= keys["two_heads"]
    assert all({"dO", "dV", "dP", "D", "dS", "dscores", "dQu", "dKu", "dW_Q", "dW_K", "dW_V", "dX_in"} <= k
               for k in keys.values())


def test_a_given_dO_is_printed_as_an_input() -> None:
    text = _builtin("rope")
    n, d_out = shape_of(text)
    sc = with_backward(text, np.random.default_rng(5).normal(size=(n, d_out)).round(2).tolist(), key="dO")
    ws = build(compute(sc), "100%")
    assert _table(ws, "dO").given and "target" not in {t.key for t in ws.tables}
    assert check_page(ws) > 0


def _softcapped(case: ModernCase, cap: float | None) -> str:
    return case.toml if cap is None else f"softcap = {cap!r}\n{case.toml}"


@settings(max_examples=40, deadline=None)
@given(modern_cases(), st.sampled_from([None, 1.5, 4.0]), st.sampled_from(["100%", "40%"]), st.integers(1, 4),
       st.data())
def test_generated_backward_pages_check_out(case: ModernCase, cap: float | None, blanks: str, decimals: int,
                                            data: st.DataObject) -> None:
    text = _softcapped(case, cap)
    n, d_out = shape_of(text)
    sc = with_backward(text, data.draw(matrix(n, d_out)))
    ws = build(compute(sc), blanks, 0, decimals)
    if covered(sc):
        assert check_page(ws) > 0 or blanks != "100%"
    else:
        assert "do not cover" in ws.markdown()


NUMBER = re.compile(r"\d+(?:\.\d+)?")


@pytest.mark.parametrize("name", ["learn_to_look", "gated", "pre_norm", "rope", "gqa", "sink", "softcap", "qk_norm"])
def test_the_pdf_prints_the_backward_key_on_the_key_pages_only(name: str) -> None:
    assert_backward_key_on_key_pages_only(build(compute(scenario_of(name)), "25%"))


def assert_backward_key_on_key_pages_only(ws: Any) -> None:
    """The typeset PDF: every backward blank numbered on both sides, its working's numbers in the key, and no
    blanked answer among the question pages' numbers (unless the page prints it elsewhere)."""
    import io

    import pypdf

    from qkv_tui.edges.worksheet.render.typst import pdf, source

    texts = [page.extract_text() for page in pypdf.PdfReader(io.BytesIO(pdf(source(sheet(ws))))).pages]
    start = next(n for n, text in enumerate(texts) if text.startswith("Answer key"))
    questions, key = "\n".join(texts[:start]), "\n".join(texts[start:])
    printed = set(NUMBER.findall("\n".join(md.questions(dataclasses.replace(sheet(ws), description="")))))
    backward = [b for b in ws.blanks if _table(ws, b.table).stage == "backward"]
    assert backward
    for blank in backward:
        assert f"({blank.number})" in questions and f"({blank.number})" in key
        assert set(NUMBER.findall(blank.working)) <= set(NUMBER.findall(key)), blank
        if "." in blank.answer and blank.answer.lstrip("-") not in printed:
            assert blank.answer.lstrip("-") not in set(NUMBER.findall(questions)), blank

