"""What X is: a real model's residual stream is named so in the trace, the panes and the exports.

A hand-made scenario keeps "embedding"; glassllm's layer 0 is its token embeddings; GPT-2's layer 0
adds learned position embeddings; from layer 1 on X is the residual stream entering the layer.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from qkv_tui import compute, load_scenario
from qkv_tui.core.inputs import Input
from qkv_tui.core.scenario import ScenarioError, parse_scenario
from qkv_tui.display.view import View
from qkv_tui.edges.export_markdown import to_markdown
from qkv_tui.edges.export_toml import to_toml
from qkv_tui.edges.worksheet.make import to_worksheet
from qkv_tui.importers import expand_model
from qkv_tui.teach.stepper import Position
from qkv_tui.teach.trace import Trace

from .conftest import BASE, HEAD
from .model_fixtures import build_gpt2


def glass(layer: int) -> str:
    return f'[model]\nsource = "glassllm:en"\ntext = "The cat sat"\nlayer = {layer}\nheads = [0]\n'


def first_screen(trace: Trace) -> tuple[str, str, str]:
    """(the stage bar's first stage, the X pane's title, the first operation's line)."""
    model = View(trace)
    explanation = model.explain(Position(0, 0))
    pane = next(p for p in model.panes(Position(0, 0))[0] if p.key == "X@None")
    return explanation.stages[0][0], pane.title, trace.op(0).arithmetic


def test_a_later_layer_reads_the_residual_stream() -> None:
    trace = Trace(compute(parse_scenario(glass(2), "g.toml")))
    assert trace.comp.scenario.input == Input("residual", 2)
    stage, title, line = first_screen(trace)
    assert stage == "1 Input" and title.startswith("X (residual stream into layer 2)")
    assert line.startswith('X[The] = residual stream entering layer 2 at "The" = [')
    meaning = trace.meaning("embed", None)
    assert meaning.startswith("X is not an embedding here: it is the residual stream entering layer 2.")
    assert "layers 0 … 1 ran over it" in meaning and "embedding of" not in line
    assert View(trace).explain(Position(0, 0)).stage_label == "1/8 Input"


def test_layer_0_of_glassllm_is_its_embeddings() -> None:
    trace = Trace(compute(parse_scenario(glass(0), "g.toml")))
    assert trace.comp.scenario.input == Input()
    stage, title, line = first_screen(trace)
    assert (stage, line[:28]) == ("1 Embed", 'X[The] = embedding of "The" ')
    assert title.startswith("X (embeddings)")


def test_gpt2_layer_0_adds_position_embeddings(tmp_path: Path) -> None:
    weights = build_gpt2(tmp_path / "g")
    doc = expand_model({"model": {"source": str(tmp_path / "g"), "text": "Alice was", "layer": 0}})
    assert doc["input"] == {"kind": "embedding+position", "schedule": ["full", "full", "full"]}
    ids = [int(i) for i in doc["description"].rsplit("ids ", 1)[1].rstrip(".").split()]
    np.testing.assert_allclose(doc["X"][1], weights["wte.weight"][ids[1]] + weights["wpe.weight"][1])  # what the line says
    trace = Trace(compute(parse_scenario(to_toml(parse_scenario(_plain(doc), "d.toml")), "again.toml")))
    stage, title, line = first_screen(trace)
    assert line.startswith('X[Alice] = embedding of "Alice" + embedding of position 0 = [')
    assert stage == "1 Embed" and title.startswith("X (token + position embeddings)")
    assert trace.op(1).arithmetic.startswith('X[Ġwas] = embedding of "Ġwas" + embedding of position 1 = [')
    later = expand_model({"model": {"source": str(tmp_path / "g"), "text": "Alice was", "layer": 2}})
    assert later["input"] == {"kind": "residual", "layer": 2, "schedule": ["full", "full", "full"]}


def _plain(doc: dict) -> str:  # type: ignore[type-arg]
    """The expanded dict as a file, through the loader and the TOML export (as a frozen head is written)."""
    from qkv_tui.core.scenario import _Validator

    return to_toml(_Validator("d.toml").scenario(doc, "d"))


def test_a_hand_made_scenario_keeps_embedding() -> None:
    trace = Trace(compute(load_scenario("i_love_ai")))
    stage, title, line = first_screen(trace)
    assert stage == "1 Embed" and title.startswith("X (embeddings)")
    assert line == 'X[I] = embedding of "I" = [1, 0, 1, 0]'
    assert "[input]" not in to_toml(trace.comp.scenario)


def test_the_exports_say_what_x_is() -> None:
    sc = parse_scenario(glass(1), "g.toml")
    page = to_markdown(compute(sc))
    assert "## 1 · Input" in page and "## 1 · Embed" not in page
    assert "residual stream entering layer 1" in page and 'embedding of "The"' not in page
    frozen = parse_scenario(to_toml(sc), "frozen.toml")  # the frozen head keeps it
    assert frozen.input == Input("residual", 1)
    assert Trace(compute(frozen)).op(0).arithmetic.startswith('X[The] = residual stream entering layer 1 at "The"')


def test_a_hand_made_residual_file_and_its_worksheet() -> None:
    text = BASE + '\n[input]\nkind = "residual"\nlayer = 3\n' + HEAD
    comp = compute(parse_scenario(text, "r.toml"))
    assert Trace(comp).op(0).arithmetic == 'X[I] = residual stream entering layer 3 at "I" = [1, 0, 1, 0]'
    sheet = to_worksheet(comp, blanks="0")
    assert "X (residual stream into layer 3)" in sheet and "X (embeddings)" not in sheet


@pytest.mark.parametrize(
    ("table", "needle"),
    [
        ('kind = "hidden"', "[input] kind = 'hidden' is not allowed; expected one of: 'embedding', 'embedding+position', 'residual'"),
        ('kind = "residual"', "[input] kind = 'residual' needs layer, the 0-based layer X enters (1 or more)"),
        ('kind = "residual"\nlayer = 0', "[input] layer = 0; expected a whole number from 1 to 2^53 (at layer 0, X is the embeddings)"),
        ('kind = "residual"\nlayer = "2"', "[input] layer = a string ('2'); expected a whole number from 1 to 2^53"),
        ('kind = "embedding"\nlayer = 2', "[input] layer goes with kind = 'residual' (the layer X enters); kind is 'embedding'"),
        ('kinds = "residual"', "unknown key 'kinds' in [input]; did you mean 'kind'?"),
    ],
)
def test_bad_input_tables(table: str, needle: str) -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(BASE + f"\n[input]\n{table}\n" + HEAD, "r.toml")
    assert needle in str(info.value)


def test_input_cannot_be_written_beside_a_model() -> None:
    with pytest.raises(ScenarioError, match=r"'input' cannot sit beside \[model\]"):
        parse_scenario('[input]\nkind = "residual"\nlayer = 1\n' + glass(1), "g.toml")
