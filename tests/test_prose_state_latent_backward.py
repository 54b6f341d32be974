"""More sentences a reviewer found untrue about what the screen shows, pinned so they stay true: a state head's
weights read as where it looks, ..."""

from __future__ import annotations

from pathlib import Path

from qkv_tui import compute, load_scenario
from qkv_tui.display.modes import Modes
from qkv_tui.display.presenter import Presenter
from qkv_tui.display.train_view import train_explanation
from qkv_tui.teach.stepper import Position
from qkv_tui.teach.summary import closing_summary
from qkv_tui.teach.trace import Trace
from qkv_tui.teach.train_walk import TrainRun

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def test_a_state_heads_weights_are_not_called_where_it_looks() -> None:
    for name, said in (("deltanet", "Whose δ each token weighs most"), ("deltanet_learns", "Whose δ each token")):
        comp = compute(load_scenario(name))
        heads = Presenter(comp).frame(Position(0, 0), Modes(view="heads")).explanation.arithmetic
        summary = next(line for line in closing_summary(comp, 0, 1, 3) if "each token" in line)
        for text in (heads, summary):
            assert text.startswith(said) and "not a distribution" in text and "looks" not in text, (name, text)
    run = TrainRun(load_scenario("deltanet_learns"))
    moved = [d for d in train_explanation(run, 2, 0, 3).details if "moved most" in d and "step 0, " in d]
    assert len(moved) == 1 and "attention" not in moved[0] and "looks" not in moved[0], moved
    assert "not a distribution" in moved[0] and "weighs the δ of \"" in moved[0], moved
    assert moved[0].startswith("the weight on δ moved most")
    meaning = train_explanation(run, 2, 0, 3).meaning
    assert "attention map" not in meaning and "where each token looks" not in meaning and "weighs each δ" in meaning
    # softmax heads keep their words
    seed = compute(load_scenario("i_love_ai"))
    assert closing_summary(seed, 0, 1, 3)[1].startswith("Where each token looks, this head: I\u00a0→\u00a0love 0.707")
    learn = [d for d in train_explanation(TrainRun(load_scenario("learn_to_look")), 2, 0, 3).details
             if d.startswith("attention moved most: ")]
    assert len(learn) == 1 and "looks most at" in learn[0] and "distribution" not in learn[0]
    assert "where each token looks changes." in train_explanation(TrainRun(load_scenario("learn_to_look")), 2, 0, 3).meaning


def test_the_mla_learns_description_names_the_head_its_numbers_are_from() -> None:
    sc = load_scenario("mla_learns")
    assert "AI's row (head 1), 0.322 on I at step 0, 0.623 after 2 steps, 0.813 after 6" in sc.description
    run = TrainRun(sc)
    ai, i = sc.labels.index("AI"), sc.key_labels.index("I")
    assert [f"{float(run.at(k).weights[0][ai, i]):.3f}" for k in (0, 2, 6)] == ["0.322", "0.623", "0.813"]
    assert f"{float(run.at(2).weights[1][ai, i]):.3f}" != "0.623"  # head 2's differ: the "(head 1)" is needed


def test_the_glossary_gives_root_dk_only_to_a_norm_over_each_head() -> None:
    from qkv_tui.teach.trace_variants import VARIANT_NOTES

    note = dict(VARIANT_NOTES)["QK-norm ([qk_norm])"]
    each, whole = note.split("OLMo 2 normalises")[-2:] if note.count("OLMo 2 normalises") else ("", "")
    assert "each has length √dₖ" in each and "each has length √dₖ" not in whole
    assert "need not have length √dₖ" in whole
    assert note.count("√dₖ") == 2  # the per-head claim and OLMo 2's denial, nothing said of every model


def test_the_conv_stage_counts_the_kernels_tokens_without_calling_it_k() -> None:
    from qkv_tui.core.scenario import parse_scenario

    from .test_deltanet_io import WITH_IO  # conv_q … with 2 taps: the token itself and 1 before it

    meaning = Trace(compute(parse_scenario(WITH_IO, "io.toml"))).meaning("conv", 0)
    assert "K − 1" not in meaning and "the same channel of the 1 token before it" in meaning
    assert "(a short causal convolution of kernel_size 2, one kernel per channel" in meaning


def test_the_closing_summary_after_the_backward_stages_says_what_they_computed() -> None:
    comp = compute(load_scenario("mla_learns"))
    trace = Trace(comp)
    trained = {s.target for s in trace.segments if s.target in ("dW_QA_h", "dW_UK_h", "dW_KR")}
    assert trained == {"dW_QA_h", "dW_UK_h", "dW_KR"}  # the walk does compute each trained weight's gradient
    lines = closing_summary(comp, 0, len(trace), 3)
    assert lines[1] == ("Backward: the stages after the forward pass carried ∂loss/∂output, loss = ½·Σ (output − target)²,"
                        " back through it, to the gradient ∂loss/∂W of each weight [backward] trains (W_Q, W_UK, W_KR).")
    assert not any(line.startswith("Backward") for line in closing_summary(compute(load_scenario("mla")), 0, 1, 3))


def test_the_gates_prose_names_the_x_its_lines_read() -> None:
    trace = _trace("deltanet_learns")  # no [norm]: the lines read X[I]·W_a, so the prose must not say X̂
    assert trace.comp.norm is None
    for key in ("gates", "dgates"):
        assert "X̂" not in trace.meaning(key, 0) and "X·W_a + dt_bias" in trace.meaning(key, 0), key
    gated = load_scenario("gated")
    assert gated.norm is None and "σ(X·W_G)" in gated.description and "X̂" not in gated.description
    assert "g = σ(X·W_G)" in _trace("gated").meaning("gate", 0)
    from qkv_tui.core.scenario import parse_scenario

    text = (SCENARIOS / "deltanet_learns.toml").read_text(encoding="utf-8") + '[norm]\nkind = "rms"\n'
    normed = Trace(compute(parse_scenario(text, "normed.toml")))  # with a [norm] the gates read X̂
    assert normed.comp.norm is not None
    for key in ("gates", "dgates"):
        assert "X̂·W_a + dt_bias" in normed.meaning(key, 0), key


def _trace(name: str) -> Trace:
    return Trace(compute(load_scenario(name)))
