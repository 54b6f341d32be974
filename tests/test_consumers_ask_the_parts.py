"""The overflow rule, the diagnosis, the trace's labels, the Embed stage, the cost view and the help screen ask
the parts and the scenario's tables generic questions (core/part_questions.py) instead of naming a variant
(issue 30): no variant's name in their code, as benchmarks/variant_reach.py reads it, but the two RoPE keeps for
a reason; and the answers, asked in the order the parts run, say what the consumers said when they named them."""

from __future__ import annotations

import ast
import re

import pytest

from qkv_tui.core import part_questions as ask
from qkv_tui.core.diagnose import problem_of
from qkv_tui.core.engine import ComputeError, compute
from qkv_tui.core.scenario import builtin_dir, builtin_names, load_scenario, parse_scenario
from qkv_tui.teach.trace import Trace

from .conftest import ROOT
from .test_views_ask_the_parts import _reach

CONSUMERS = ("core/engine.py", "core/diagnose.py", "teach/trace.py", "teach/stages/embed.py", "core/cost.py",
             "teach/cost.py", "display/cost_view.py", "ui/widgets/screens.py")
# what a consumer still names, and why
KEPT = {
    ("core/engine.py", "rope"): "turn_of is re-exported for core/gradients.py, and rotate() for tests/test_variants.py",
    ("core/diagnose.py", "rope"): "rope_layout is one of the learner's mistakes it names (the JSON report's names)",
}


def test_the_consumers_name_no_variant() -> None:
    reach = _reach()
    named = {}
    for module in CONSUMERS:
        used = reach.names_in(ast.parse((ROOT / "qkv_tui" / module).read_text(encoding="utf-8")))
        for variant, pattern in reach.VARIANTS.items():
            hits = sorted(n for n in used if re.search(pattern, n))
            if hits and (module, variant) not in KEPT:
                named[(module, variant)] = hits
    assert not named, named


def test_a_scaled_rotation_is_named_before_the_qk_norm_gains() -> None:
    """Two tables speak to the scores' hint: [qk_norm] names its gains in the hint's place, then [rope.scaling]
    names its attention factor first (the scores carry a²); the other way round the factor would be lost."""
    text = (builtin_dir() / "rope_scaling.toml").read_text(encoding="utf-8")
    text = text.replace("original_max_position_embeddings = 256\n",
                        "original_max_position_embeddings = 256\nattention_factor = 1e200\n", 1)
    text = text.replace("[[heads]]", '[qk_norm]\nover = "head"\ngamma_q = [1, 1, 1, 1]\ngamma_k = [1, 1, 1, 1]\n\n'
                        "[[heads]]", 1)
    with pytest.raises(ComputeError) as caught:
        compute(parse_scenario(text, "f.toml"))
    assert caught.value.fact.startswith("head 1: values in scores overflow float64 at row 1")
    assert caught.value.hint == ("expected a smaller [rope.scaling] attention_factor (a = 1e+200 multiplies cos and"
                                 " sin, so the scores carry a²) or smaller [qk_norm] gains (gamma_q, gamma_k), so that"
                                 " every product stays finite")


MANY_PARTS = """
tokens = ["a", "b", "c"]
X = [[1, 0], [0, 1], [1, 1]]
mask = "causal"

[norm]
kind = "rms"

[alibi]
slopes = [0.5, 0.25]

[[heads]]
name = "h1"
softcap = 5.0
W_Q = [[1, 0], [0, 1]]
W_K = [[1, 0], [0, 1]]
W_V = [[1, 0], [0, 1]]
W_G = [[1, 0], [0, 1]]

[[heads]]
name = "h2"
sink = 0.5
b_Q = [1, 0]
W_Q = [[1, 0], [0, 1]]
W_K = [[1, 0], [0, 1]]
W_V = [[1, 0], [0, 1]]
W_G = [[0, 1], [1, 0]]
"""


def test_the_diagnosis_lists_what_is_not_plain_in_the_order_it_did() -> None:
    """The tables first (in the format's order), then b_O, shared K/V heads and RoPE's partial or scaling, then
    each head's keys in the order the heads give them: h1's soft-cap and gate before h2's bias and sink."""
    said = problem_of(parse_scenario(MANY_PARTS, "f.toml"))
    assert said == ("the mistakes are tried on plain attention; this scenario has [norm], [alibi], soft-caps,"
                    " output gates, biases, sinks")


@pytest.mark.parametrize("name", builtin_names())
def test_a_table_with_a_state_is_one_whose_stages_compute_no_weights_by_a_softmax(name: str) -> None:
    """The help screen and the cost view ask whether a table puts a state in place of the softmax: exactly the
    built-ins whose trace has no Scale stage (the one that divides the scores before a softmax; differential
    attention has two)."""
    sc = load_scenario(name)
    assert ask.scenario_has(sc, "state") == (not any("scale" in key for key in Trace(compute(sc)).stage_keys))
