"""The HTML worksheet keeps the space between a formula and the word or number after it: MathML drops the
source's spaces, so the key's ``dV·W_Vᵀ at [I,0]`` was set ``W_Vᵀat``, ``Σ over the heads of dK`` as
``Σoverthe headsofdK`` and ``(head 1)`` as ``head1``. Checked over every backward built-in's page with every
cell a blank (so every key line is there), parsed with html.parser: inside a formula, no word or number
follows an atom without a space between; outside, no formula runs into the next word."""

from __future__ import annotations

import itertools
import re
from html.parser import HTMLParser

import pytest

from qkv_tui.core.scenario import builtin_names, load_scenario
from qkv_tui.edges.worksheet.render.formulas import to_mathml, to_typst

BACKWARD = [name for name in builtin_names() if load_scenario(name).backward is not None]
ATOMS = {"mi", "mn", "msub", "msup", "msubsup", "msqrt", "mover", "mtext"}


class _Glued(HTMLParser):
    """Each place in a <math> where a word (an upright name of two letters or more, a number, a label) comes right
    after an atom, with no operator or space between: (what came before, the word, the formula's text so far)."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[list[dict[str, str]]] = []  # the children seen so far of each open element in a formula
        self.text: list[str] = []
        self.found: list[tuple[str, str, str]] = []

    def _child(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.stack:
            self.stack[-1].append({"tag": tag, "normal": str(("mathvariant", "normal") in attrs), "text": ""})

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "math":
            self.stack, self.text = [[]], []
            return
        if self.stack:
            self._child(tag, attrs)
            self.stack.append([])

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.stack:
            self._child(tag, attrs)
            self.text.append(" " if tag == "mspace" else "")

    def handle_data(self, data: str) -> None:
        if len(self.stack) >= 2:
            self.stack[-2][-1]["text"] += data
            self.text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack:
            return
        kids = self.stack.pop()
        for a, b in itertools.pairwise(kids):
            after_atom = a["tag"] in ATOMS or (a["tag"] == "mo" and a["text"] in (")", "]"))
            word = ((b["tag"] == "mi" and b["normal"] == "True" and len(b["text"]) > 1)
                    or b["tag"] in ("mn", "mtext"))
            if after_atom and word:
                self.found.append((a["text"] or a["tag"], b["text"], "".join(self.text)[-60:]))
        if tag == "math":
            self.stack = []


def glued(page: str) -> list[tuple[str, str, str]]:
    parser = _Glued()
    parser.feed(page)
    return parser.found


@pytest.mark.parametrize("blanks", ["100%", "25%"])
@pytest.mark.parametrize("name", BACKWARD)
def test_no_formula_runs_into_the_next_word(cli, name: str, blanks: str) -> None:
    run = cli("--export", "worksheet", "--format", "html", "--blanks", blanks, name)
    assert run.code == 0, run.err
    assert "<math>" in run.out
    assert glued(run.out) == []
    assert not re.search(r"</math>[^\W_]", run.out)  # prose: a formula and the word after it stay apart


def test_the_backward_built_ins_are_the_three() -> None:
    assert {"learn_to_look", "mla_learns", "deltanet_learns"} <= set(BACKWARD)


SPACE = '<mspace width="0.22em"/>'


@pytest.mark.parametrize(("formula", "kept"), [
    ("dX[I,0] = dQ·W_Qᵀ + dV·W_Vᵀ at [I,0] = 1·2", f'</msubsup>{SPACE}<mi mathvariant="normal">at</mi>'),
    ("dk_R'[I,0] = Σ over the heads of dK[I,0] = 1 + 2", f'<mi>Σ</mi>{SPACE}<mi mathvariant="normal">over</mi>'),
    ("dW_UK[0,1] = Σ c_KV[·,0]·dk_C[·,1] (head 1) = 2", f'<mi mathvariant="normal">head</mi>{SPACE}<mn>1</mn>'),
])
def test_a_word_after_a_formula_keeps_its_space(formula: str, kept: str) -> None:
    assert glued(to_mathml(formula)) == []
    assert kept in to_mathml(formula)


def test_typst_sets_these_as_before() -> None:
    # Typst spaces a word from the atom before it by itself; an extra " " would set two spaces
    assert to_typst("dV·W_Vᵀ at [I,0]") == '$"dV" dot.op W_(V)^(T) "at"" "["I", 0]$'
    assert to_typst("Σ over the heads") == '$Σ "over" "the" "heads"$'
