"""Typeset worksheets (--format pdf|html, --key separate): the PDF's text read back against the answer key,
the HTML self-contained, hostile scenario text printed as written, the description's rule, the errors.

The PDF's text is extracted with pypdf from the bytes the command line writes, page by page, and
checked against the Markdown page's own key: every key number on the key pages, no blank's answer
on the question pages where only the blank is printed.
"""

from __future__ import annotations

import dataclasses
import html
import io
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pypdf  # the test extra pins it and typst (the pdf extra): CI typesets every page tested here
import pytest

from qkv_tui import compute, load_scenario
from qkv_tui.edges.worksheet.export import key_path
from qkv_tui.edges.worksheet.make import build
from qkv_tui.edges.worksheet.render import markdown as md
from qkv_tui.edges.worksheet.render.formulas import pieces
from qkv_tui.edges.worksheet.sheet import intro, sheet

from .conftest import SCENARIOS, Run

NUMBER = re.compile(r"\d+(?:\.\d+)?")
# i_love_ai, a multi-head, a masked and a 2026 variant (the output gate) built-in
PRINTED = ["i_love_ai", "two_heads", "causal_mask", "gated"]


def pages(data: bytes) -> list[str]:
    assert data.startswith(b"%PDF-")
    return [page.extract_text() for page in pypdf.PdfReader(io.BytesIO(data)).pages]


def numbers(text: str) -> set[str]:
    return set(NUMBER.findall(text))


def split_at_key(texts: list[str]) -> tuple[str, str]:
    """The question pages' text and the key pages' (the key starts a page of its own)."""
    start = next(n for n, text in enumerate(texts) if text.startswith("Answer key"))
    assert all("Answer key" not in text for text in texts[:start])
    return "\n".join(texts[:start]), "\n".join(texts[start:])


def pdf_of(cli: Callable[..., Run], tmp_path: Path, *args: str) -> bytes:
    out = tmp_path / "sheet.pdf"
    run = cli("--export", "worksheet", "--format", "pdf", "-o", str(out), *args)
    assert (run.code, run.out, run.err) == (0, "", "")
    return out.read_bytes()


@pytest.mark.parametrize("name", PRINTED)
def test_pdf_text_matches_the_answer_key(cli: Callable[..., Run], tmp_path: Path, name: str) -> None:
    ws = build(compute(load_scenario(name)))
    questions, key = split_at_key(pages(pdf_of(cli, tmp_path, name)))
    assert questions.startswith(f"Worksheet: {ws.comp.scenario.title}\nName:") and "Date:" in questions
    # what the question pages print besides the blanks (the Markdown's questions, without the description)
    printed = numbers("\n".join(md.questions(dataclasses.replace(sheet(ws), description=""))))
    for blank in ws.blanks:
        assert f"({blank.number})" in questions and f"({blank.number})" in key
        assert numbers(blank.working) <= numbers(key), blank  # every number of its arithmetic, the answer last
        if "." in blank.answer and blank.answer.lstrip("-") not in printed:
            assert blank.answer.lstrip("-") not in numbers(questions), blank
    assert len(re.findall(r"^\(\d+\) ", key, re.M)) == len(ws.blanks)
    kept = intro(ws.comp.scenario.description or "")
    flat = " ".join(questions.split())
    # its words as written (its formulas, W_Q, are set as math)
    assert all(" ".join(part.split()) in flat for formula, part in pieces(kept) if not formula) if kept else "Name:" in questions


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_every_builtin_typesets(path: Path) -> None:
    """Every formula of every built-in's page parses and compiles, every blank filled in the key (100%)."""
    from qkv_tui.edges.worksheet.make import WorksheetError
    from qkv_tui.edges.worksheet.render.formulas import parse
    from qkv_tui.edges.worksheet.render.typst import pdf, source

    try:
        ws = build(compute(load_scenario(path)), "100%")
    except WorksheetError:
        return  # a real model's head: refused in every format
    assert all(parse(b.working) is not None for b in ws.blanks)  # set as math, none left as plain text
    texts = pages(pdf(source(sheet(ws))))
    assert "\n".join(texts).count("Answer key") == 1


def test_pdf_key_separate_is_two_files(cli: Callable[..., Run], tmp_path: Path) -> None:
    out = tmp_path / "sheet.pdf"
    run = cli("--export", "worksheet", "--format", "pdf", "--key", "separate", "-o", str(out), "two_heads")
    assert (run.code, run.out, run.err) == (0, "", "")
    assert key_path(out) == tmp_path / "sheet-key.pdf"
    questions = "\n".join(pages(out.read_bytes()))
    key = "\n".join(pages(key_path(out).read_bytes()))
    assert "Answer key" not in questions and key.startswith("Answer key: I love AI, two heads")
    blanks = build(compute(load_scenario("two_heads"))).blanks
    assert all(f"({b.number})" in questions and f"({b.number}) " in key for b in blanks)


def test_pdf_to_a_pipe_is_the_same_document(cli: Callable[..., Run], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    class Pipe(io.StringIO):
        def __init__(self) -> None:
            super().__init__()
            self.buffer = io.BytesIO()

    pipe = Pipe()
    monkeypatch.setattr(sys, "stdout", pipe)
    from qkv_tui.edges.cli import main

    assert main(["--export", "worksheet", "--format", "pdf", "i_love_ai"]) == 0
    assert pages(pipe.buffer.getvalue()) == pages(pdf_of(cli, tmp_path, "i_love_ai"))


HOSTILE = r"""#set text(red) $x^2$ *bold* _it_ <label> @ref \\ "q" 'a' // [b] `raw` ~ = - + /* c"""


def hostile_scenario(tmp_path: Path) -> Path:
    title = HOSTILE.replace("\\", "\\\\").replace('"', '\\"')
    path = tmp_path / "hostile.toml"
    path.write_text(f'''title = "{title}"
description = "A # title $ with * markup _ and < numbers 3 @ \\\\ everywhere."
tokens = ["#a", "$b$", "*c_d<e>@f\\\\"]
X = [[1, 0], [0, 1], [1, 1]]

[[heads]]
name = "h#1 $x$"
W_Q = [[1, 0], [0, 1]]
W_K = [[1, 0], [0, 1]]
W_V = [[1, 0], [0, 1]]
''', encoding="utf-8")
    return path


def test_hostile_text_prints_as_written(cli: Callable[..., Run], tmp_path: Path) -> None:
    path = hostile_scenario(tmp_path)
    texts = pages(pdf_of(cli, tmp_path, "--blanks", "100%", str(path)))
    questions, key = split_at_key(texts)
    flat = " ".join(questions.split())
    assert f"Worksheet: {' '.join(HOSTILE.split())}" in flat
    assert "A # title $ with * markup _ and < numbers" not in flat  # the description has a digit: not printed
    assert "Query tokens: #a, $b$, *c_d<e>@f\\; mask: none" in flat  # the scenario's words never read as math
    for token in ("#a", "$b$", "*c_d<e>@f\\"):
        assert token in flat and token in key
    page = cli("--export", "worksheet", "--format", "html", str(path)).out
    assert f"<title>Worksheet: {html.escape(HOSTILE)}</title>" in page
    assert "<e>" not in page and html.escape("*c_d<e>@f\\") in page


def test_html_is_self_contained_and_prints_the_key_on_a_new_page(cli: Callable[..., Run]) -> None:
    run = cli("--export", "worksheet", "--format", "html", "causal_mask")
    assert run.code == 0 and run.err == ""
    page = run.out
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert not re.search(r"https?:|<script|<link|<img|src=|@import|url\(", page)  # nothing fetched
    assert re.search(r"@media print \{[^@]*\.key \{ break-before: page; \}", page)
    assert '<section class="key">' in page and "<math" in page and "<msqrt>" in page
    assert "Name:" in page and "Date:" in page
    ws = build(compute(load_scenario("causal_mask")))
    questions, key = page.split('<section class="key">')
    for blank in ws.blanks:
        assert f"<td>({blank.number}) <span class=\"blank\"></span></td>" in questions
        assert f"<p>({blank.number}) <math>" in key and f"<mn>{blank.answer.lstrip('-')}</mn>" in key


@pytest.mark.parametrize("fmt", ["markdown", "html", "pdf"])
def test_key_separate_in_every_format(cli: Callable[..., Run], tmp_path: Path, fmt: str) -> None:
    out = tmp_path / f"sheet.{ {'markdown': 'md'}.get(fmt, fmt) }"
    run = cli("--export", "worksheet", "--format", fmt, "--key", "separate", "--output", str(out), "i_love_ai")
    assert (run.code, run.out, run.err) == (0, "", "")
    assert out.exists() and key_path(out).exists()
    inline = cli("--export", "worksheet", "--format", fmt, "-o", str(tmp_path / f"inline{out.suffix}"), "i_love_ai")
    assert inline.code == 0 and not key_path(tmp_path / f"inline{out.suffix}").exists()


def test_markdown_is_the_default_format(cli: Callable[..., Run], tmp_path: Path) -> None:
    default = cli("--export", "worksheet", "i_love_ai").out
    assert cli("--export", "worksheet", "--format", "markdown", "i_love_ai").out == default
    assert "The seed walkthrough" not in default  # its first sentence already holds a number (dₖ = 3)
    out = tmp_path / "sheet.md"
    assert cli("--export", "worksheet", "-o", str(out), "i_love_ai").code == 0
    assert out.read_text(encoding="utf-8") == default
    assert cli("--export", "worksheet", "--key", "separate", "-o", str(out), "i_love_ai").code == 0
    questions, key = out.read_text(encoding="utf-8"), key_path(out).read_text(encoding="utf-8")
    assert default == questions + key.replace("# Answer key: I love AI\n", "## Answer key\n", 1)


WITH_NUMBERS = [p.stem for p in SCENARIOS if any(ch.isdigit() for ch in (load_scenario(p).description or ""))]


def test_builtins_with_numbers_in_their_description() -> None:
    assert len(WITH_NUMBERS) >= 15 and "i_love_ai" in WITH_NUMBERS  # the rule is tested on each below


@pytest.mark.parametrize("name", WITH_NUMBERS)
def test_no_description_sentence_with_a_number_is_typeset(cli: Callable[..., Run], name: str) -> None:
    description = load_scenario(name).description or ""
    kept = intro(description)
    assert not any(ch.isdigit() for ch in kept)
    assert " ".join(description.split()).startswith(kept)
    run = cli("--export", "worksheet", "--format", "html", name)
    if run.code != 0:  # a real model's head: too large to work by hand; a part without printed tables yet
        assert run.err.startswith("error: ") and ("too large for a worksheet" in run.err
                                                  or "is not written yet" in run.err), run.err
        return
    questions = run.out.split('<section class="key">')[0]
    sentences = re.split(r"(?<=[.!?])\s+", " ".join(description.split()))
    for sentence in sentences:
        if any(ch.isdigit() for ch in sentence):
            assert html.escape(sentence) not in questions, sentence
    if kept:  # as written, its formulas (W_Q) in MathML: the same characters once the markup is gone
        bare = re.sub(r"<[^>]+>|\s|_", "", html.unescape(questions))
        assert re.sub(r"\s|_", "", kept) in bare
    markdown = cli("--export", "worksheet", name).out.split("## Answer key")[0]
    for sentence in sentences:
        if any(ch.isdigit() for ch in sentence):
            assert sentence not in " ".join(markdown.split()), sentence
    if kept:
        assert f"\n{kept}\n" in markdown


def test_the_description_rule() -> None:
    assert intro("The seed's numbers under a causal mask: each token sees its past. At Scale the future cells"
                 " become −∞; at Softmax they get weight exactly 0. More.") == (
        "The seed's numbers under a causal mask: each token sees its past.")
    assert intro("Cross-attention (Vaswani et al. §3.2.3): the decoder asks.") == ""  # not cut after "al."
    assert intro("") == "" and intro("No numbers here. None at all.") == "No numbers here. None at all."


def test_errors_are_one_line(cli: Callable[..., Run], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def says(args: list[str], line: str) -> None:
        run = cli(*args)
        assert (run.code, run.out, run.err) == (2, "", f"error: {line}\n"), args

    help_ = " (see qkv-tui --help)"
    says(["--export", "worksheet", "--format", "docx", "i_love_ai"],
         f"argument --format: invalid choice: 'docx' (choose from 'markdown', 'html', 'pdf'){help_}")
    says(["--format", "pdf", "i_love_ai"], f"--format goes only with --export worksheet{help_}")
    says(["--export", "markdown", "--key", "separate", "i_love_ai"], f"--key goes only with --export worksheet{help_}")
    says(["--export", "json", "-o", "x.json", "i_love_ai"], f"--output goes only with --export worksheet{help_}")
    says(["--export", "worksheet", "--key", "separate", "i_love_ai"],
         f"--key separate needs --output FILE (the key is written beside it, as FILE-key with FILE's extension){help_}")
    says(["--export", "worksheet", "--key", "inline", "i_love_ai"],
         f"argument --key: invalid choice: 'inline' (choose from 'separate'){help_}")
    missing = tmp_path / "no such folder" / "sheet.pdf"
    says(["--export", "worksheet", "--format", "pdf", "-o", str(missing), "i_love_ai"],
         f"{missing}: cannot write the worksheet: No such file or directory")
    says(["--export", "worksheet", "--format", "html", "-o", str(tmp_path), "i_love_ai"],
         f"{tmp_path}: --output is a directory, not a regular file; expected a new file or a regular file to replace"
         " (leave out --output to write to standard output)")  # refused before anything is computed (edges/cli.py)
    monkeypatch.setitem(sys.modules, "typst", None)  # not installed
    says(["--export", "worksheet", "--format", "pdf", "-o", str(tmp_path / "x.pdf"), "i_love_ai"],
         "--format pdf needs the typst package: pip install 'qkv-tui[pdf]'")
    assert not (tmp_path / "x.pdf").exists()


def test_pdf_on_a_terminal_is_refused(cli: Callable[..., Run], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("qkv_tui.edges.cli._is_terminal", lambda stream: stream is sys.stdout)
    run = cli("--export", "worksheet", "--format", "pdf", "i_love_ai")
    assert run.code == 2 and run.err == ("error: --format pdf writes a binary file: give --output FILE, or redirect"
                                         " standard output to a file (see qkv-tui --help)\n")


def test_a_power_of_a_bracketed_index_is_set_as_math() -> None:
    import typst

    from qkv_tui.edges.worksheet.render.formulas import to_mathml, to_typst

    formula = to_typst("q[AI,1] = Q[AI,1] / √(ΣQ[AI]² + 1e-6) / √2")  # the deltanet page's normalise line
    assert "Op(" not in formula and ']^(2)' in formula
    typst.compile(formula.encode("utf-8"), format="pdf")
    assert "<msup><mo>]</mo><mrow><mn>2</mn></mrow></msup>" in to_mathml("ΣQ[AI]²")


def test_a_page_typst_refuses_is_one_line(cli: Callable[..., Run], tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from qkv_tui.edges.worksheet.render import typst as worksheet_typst

    monkeypatch.setattr(worksheet_typst, "source", lambda page, part="all": "$(\n")  # a formula written wrong
    run = cli("--export", "worksheet", "--format", "pdf", "-o", str(tmp_path / "x.pdf"), "i_love_ai")
    assert (run.code, run.out) == (2, "") and run.err.count("\n") == 1, run.err
    assert run.err.startswith("error: the PDF could not be typeset (Typst: ") and "Traceback" not in run.err
    assert not (tmp_path / "x.pdf").exists()
