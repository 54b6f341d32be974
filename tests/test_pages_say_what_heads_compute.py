"""A page says what its heads compute: the Markdown export's and the worksheet's first line, and the heads view's
formula, name scaled dot-product attention only where every head is one (a state, an SSD head, two maps or a
selection of keys is said as what it is; core/part_questions.py lead and map_formula)."""

from __future__ import annotations

import pytest

from qkv_tui import compute, load_scenario
from qkv_tui.core import part_questions as ask
from qkv_tui.edges.export_markdown import to_markdown
from qkv_tui.edges.worksheet.sheet import lead

PLAIN = "softmax(QKᵀ/√dₖ)V"
SAID = {
    "i_love_ai": ("Scaled dot-product attention, ", PLAIN),
    "linear": ("Linear attention", ""),
    "deltanet": ("The gated delta rule", ""),
    "kda": ("The gated delta rule with a gate per key channel (Kimi Delta Attention)", ""),
    "ssd": ("Mamba-2's state-space duality, ", "y = (L ∘ C·Bᵀ)·(dt·x) + D·x"),
    "differential": ("Differential attention, ", "(1 − λ_init)·SubNorm((softmax(Q₁K₁ᵀ/√d) − λ·softmax(Q₂K₂ᵀ/√d))V)"),
}


@pytest.mark.parametrize("name", sorted(SAID))
def test_the_markdown_page_and_the_worksheet_say_what_the_heads_compute(name: str) -> None:
    sc = load_scenario(name)
    words, formula = SAID[name]
    assert ask.lead(sc) == (words, formula)
    intro = to_markdown(compute(sc)).split("\n\n")[2]
    assert intro.startswith(f"{words}**{formula}**," if formula else words), intro
    assert lead(sc)[:2] == (words, formula)


@pytest.mark.parametrize("name", ["ssd", "differential", "dsa"])
def test_a_part_says_what_its_map_holds(name: str) -> None:
    said = ask.map_formula(compute(load_scenario(name)).heads)
    assert said is not None and "softmax(Q·Kᵀ/√dₖ)·V" not in "".join(text for text, _ in said)


def test_a_plain_head_leaves_the_formula_to_the_view() -> None:
    assert ask.map_formula(compute(load_scenario("i_love_ai")).heads) is None
