"""Sentences a reviewer found false about the math on screen, pinned so they stay true: the Softmax stage of a
head without a sink, QK-norm over every head, and the side views of a state head ([deltanet]), which takes no
softmax."""

from __future__ import annotations

from qkv_tui import compute, load_scenario
from qkv_tui.display.modes import Modes
from qkv_tui.display.presenter import Presenter
from qkv_tui.edges.export_markdown import to_markdown
from qkv_tui.teach.stepper import Position
from qkv_tui.teach.trace import Trace


def _trace(name: str) -> Trace:
    return Trace(compute(load_scenario(name)))


def test_only_a_head_with_a_sink_is_told_its_rows_add_up_to_less_than_1() -> None:
    trace = _trace("gated")  # head 1 has a sink (logit 1), head 2 none: its weight rows add to 1
    sink, plain = trace.meaning("softmax", 0), trace.meaning("softmax", 1)
    assert "less than 1" in sink and "add to 1." not in sink  # not "add to 1" and then "less than 1"
    assert "sink" not in plain and "add to 1." in plain
    page = to_markdown(compute(load_scenario("gated")))
    assert page.count("less than 1.") == 1  # the markdown page takes each head's own words


def test_qk_norm_over_every_head_does_not_claim_a_head_row_is_root_dk_long() -> None:
    per_head, every = _trace("qk_norm").meaning("qk_norm", 0), _trace("qk_norm_all").meaning("qk_norm", 0)
    assert "has length √dₖ" in per_head
    assert "has length √dₖ" not in every and "whole Q row" in every and "not √dₖ" in every


def test_what_if_on_a_state_head_shows_no_softmax_table() -> None:
    presenter = Presenter(compute(load_scenario("deltanet_learns")))
    notes = presenter.frame(Position(3, 0), Modes(whatif=True)).notes
    assert len(notes) == 1 and "no scaling table" in notes[0] and "softmax with" not in notes[0]


def test_the_heads_view_of_a_state_head_names_no_softmax() -> None:
    for name, formula in (("deltanet", "(q·kᵀ)·e^(G_t − G_s)"), ("linear", "φ(Q)·φ(K)ᵀ")):
        frame = Presenter(compute(load_scenario(name))).frame(Position(0, 0), Modes(view="heads"))
        text = "".join(part for part, _ in frame.explanation.formula)
        assert "softmax" not in text and formula in text, name
        assert frame.explanation.counter == "1 head", name
    seed = Presenter(compute(load_scenario("two_heads"))).frame(Position(0, 0), Modes(view="heads"))
    assert seed.explanation.formula[0][0] == "softmax(Q·Kᵀ/√dₖ)" and seed.explanation.counter == "2 heads"


def test_the_soft_cap_words_hold_for_negative_scores() -> None:
    from qkv_tui.teach.stages.soft_cap import pull_note

    meaning = _trace("softcap").meaning("scale", 0)
    assert "far below" not in meaning and "much smaller than 5 in size" in meaning
    assert "the larger |s| is next to 5" in pull_note(-20.0, -4.9986, 5.0, 3)


def test_the_help_of_a_state_scenario_heads_its_stages_without_a_softmax() -> None:
    from rich.console import Console

    from qkv_tui.ui.widgets.screens import HelpScreen

    def text(name: str) -> str:
        console = Console(width=120, record=True, color_system=None)
        console.print(HelpScreen([], load_scenario(name)).body())
        return console.export_text()

    assert "Stages: the state's rule, no softmax, one operation at a time" in text("deltanet")
    assert "Stages: softmax(QKᵀ/√dₖ)V, one operation at a time" in text("i_love_ai")


def test_the_backward_words_give_the_gradient_its_sign() -> None:
    trace = _trace("learn_to_look")
    assert "how fast the loss would rise if token t gave key j more weight" in trace.meaning("dmix", 0)
    assert "would fall" not in trace.meaning("dmix", 0)  # dP = ∂loss/∂P: positive where more weight costs
    assert "better than" not in trace.meaning("dsoftmax", 0)


def test_dembed_names_every_path_its_line_adds() -> None:
    meaning = _trace("deltanet_learns").meaning("dembed", None)
    assert "dX adds da·W_aᵀ + db·W_bᵀ" in meaning
    assert "W_a" not in _trace("learn_to_look").meaning("dembed", None)
