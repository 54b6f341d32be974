"""The typeset worksheet reads as typeset math, never as the plain-text notation it is written from: the PDF's text,
read back with pypdf, holds no literal ``_`` before a letter (``dO_h``, ``S′ _ love``, ``[q_C | q_R']``) outside
code, no transpose mark inside a subscript (``W_{Qᵀ}`` for W_Qᵀ), no word glued to the bracket after it
(``at[I,1]``, ``β[I](the state …)``) and no ``--`` set as an en dash. On every built-in with [backward], and on
every variant's backward tables (a target appended to the other built-ins, [linear] and QK-norm over every head
as tests/test_worksheet_backward_state.py builds them)."""

from __future__ import annotations

import io
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import Scenario, load_scenario
from qkv_tui.edges.worksheet.make import build
from qkv_tui.edges.worksheet.render.formulas import to_mathml, to_typst
from qkv_tui.edges.worksheet.sheet import sheet

from .test_backward_torch import SCENARIOS
from .test_worksheet_backward_state import scenario as state_scenario
from .test_worksheet_backward_variants import scenario_of

pypdf = pytest.importorskip("pypdf")
pytest.importorskip("typst")

WITH_BACKWARD = sorted(p.stem for p in SCENARIOS.glob("*.toml") if "[backward]" in p.read_text(encoding="utf-8"))
# one built-in per variant whose backward tables have a line or label of their own, a target appended
VARIANTS = ("alibi", "cross_attention", "gated", "gqa", "pre_norm", "qk_norm", "rope", "sink", "softcap", "split_heads",
            "linear", "qk_norm_all")

UNDERSCORE = re.compile(r"_\s*\w")  # dO_h, and S′ _ love (a subscript that fell apart)
GLUED = re.compile(r"\b(?:at|of|over|in|by|and|for|to|with|from)\[|\]\((?:the|head)\b")
SCRIPT = 8.0  # pt: the body is 9pt (8pt in wide tables); a subscript of either is set smaller


def read_back(data: bytes) -> tuple[str, list[str]]:
    """The PDF's text with code (monospace runs) left out, and the transpose marks set at a subscript's size."""
    reader = pypdf.PdfReader(io.BytesIO(data))
    runs: list[str] = []
    scripted: list[str] = []

    def visit(text: str, cm: Any, tm: Any, font: Any, size: float) -> None:
        mono = font is not None and "mono" in str(font.get("/BaseFont", "")).lower()
        runs.append(" " if mono else text)
        if size and size < SCRIPT and ("ᵀ" in text or "⊤" in text):
            scripted.append(text)

    for page in reader.pages:
        page.extract_text(visitor_text=visit)
        runs.append("\n")
    return "".join(runs), scripted


def defects(data: bytes) -> list[str]:
    text, scripted = read_back(data)
    found = [f"transpose mark in a subscript: {t!r}" for t in scripted]
    for rx in (UNDERSCORE, GLUED):
        found += [f"{rx.pattern}: …{text[max(0, m.start() - 30):m.end() + 10]!r}" for m in rx.finditer(text)]
    return found


def pdf_of(sc: Scenario) -> bytes:
    from qkv_tui.edges.worksheet.render.typst import pdf, source

    return pdf(source(sheet(build(compute(sc), "100%"))))


@pytest.mark.parametrize("name", WITH_BACKWARD)
def test_builtins_with_backward_typeset_as_math(name: str) -> None:
    assert defects(pdf_of(load_scenario(name))) == []


@pytest.mark.parametrize("name", VARIANTS)
def test_every_variants_backward_tables_typeset_as_math(name: str) -> None:
    sc = state_scenario(name) if name in ("linear", "qk_norm_all") else scenario_of(name)
    assert defects(pdf_of(sc)) == []


def test_the_checks_find_each_defect_the_old_pages_had() -> None:
    """Each pattern above finds what it is for, set as the old writer set it."""
    from qkv_tui.edges.worksheet.render.typst import pdf

    old = ('#set text(font: "New Computer Modern", size: 10pt)\n'
           '#"D = rowsum(dO_h ⊙ output)" \\ $S\' _ "love"$ \\ $W_("Qᵀ")$ \\ $"at"["I", 1]$ \\ $β["I"]("the" "state")$')
    found = defects(pdf(old))
    assert any("dO_h" in f for f in found)
    assert any("love" in f and "_" in f for f in found)
    assert any("subscript" in f for f in found)
    assert any("at[" in f for f in found)
    assert any("](the" in f for f in found)


@pytest.mark.parametrize(("text", "typst"), [
    ("dX[I,1] = dQ·W_Qᵀ at [I,1] = 2", '$"dX"["I", 1] = "dQ" dot.op W_(Q)^(T) "at"" "["I", 1] = 2$'),
    ("k_R'[I,0] = 1", "$k'_(R)[\"I\", 0] = 1$"),
    ("S'_love[0,0]", "$S'_(\"love\")[0, 0]$"),
    ("Q = [q_C | q_R']", "$Q = [q_(C) bar.v q'_(R)]$"),
    ("D = rowsum(dO_h ⊙ output)", '$D = "rowsum"("dO"_(h) dot.o "output")$'),
    ("dX̂ = 1", '$"d"hat("X") = 1$'),
    ("√(Σx² + 1e-6)", '$sqrt("Σx"^(2) + "1e-6")$'),
    ("S_t = S_{t−1}", "$S_(t) = S_(t - 1)$"),
])
def test_the_notation_is_read_as_written(text: str, typst: str) -> None:
    assert to_typst(text) == typst


def test_mathml_keeps_the_same_space_and_hat() -> None:
    assert '<mspace width="0.22em"/>' in to_mathml("W_Vᵀ at [I,1]")
    assert "<msubsup><mi>W</mi><mrow><mi>V</mi></mrow><mrow><mi>T</mi></mrow></msubsup>" in to_mathml("W_Vᵀ")
    assert to_mathml("dX̂").count("<mover") == 1 and '<mi mathvariant="normal">d</mi><mover' in to_mathml("dX̂")


def test_double_hyphens_are_not_set_as_a_dash() -> None:
    from qkv_tui.edges.worksheet.render.typst import _text

    assert _text("the app and --export markdown").startswith("#text(ligatures: false")


NOTATION = "ab_{}[]()|⊙'′ᵀₖ^ Σ√·=−-1.e\u0302XQW,:\"\\#$*<>"


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(alphabet=NOTATION, max_size=18), min_size=1, max_size=12))
def test_any_text_parses_and_typesets(texts: list[str]) -> None:
    """Labels and descriptions are anyone's text: whatever the notation's characters make (a ``^`` that ends the
    text, a lone ``√``, ``(ₖ``, braces around a half bracket), the formula is parsed and Typst takes it."""
    from qkv_tui.edges.worksheet.render.formulas import pieces
    from qkv_tui.edges.worksheet.render.typst import pdf

    for text in texts:
        to_mathml(text)
        pieces(text, ("a_b",))
    pdf("\n".join(f"{to_typst(text)} \\" for text in texts))
