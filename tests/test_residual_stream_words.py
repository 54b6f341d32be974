"""The Input stage says what each earlier layer added to the residual stream: an attention output and an MLP
output in a Transformer, the mixer's output in Mamba-2, whose blocks have neither (and whose model adds no
position embedding)."""

from __future__ import annotations

from pathlib import Path

from qkv_tui import compute
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.teach.trace import Trace

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
RESIDUAL = '\n[input]\nkind = "residual"\nlayer = 2\n'


def _input_meaning(text: str) -> str:
    trace = Trace(compute(parse_scenario(text, "layer2.toml")))
    seg = trace.segments[0]
    assert seg.stage == "embed"
    return trace.spec(seg.stage).meaning(trace, None)


def test_a_mamba2_layers_stream_holds_mixer_outputs() -> None:
    words = _input_meaning((SCENARIOS / "ssd.toml").read_text(encoding="utf-8") + RESIDUAL)
    assert "layers 0 … 1 ran over it, each adding its mixer's output" in words
    assert "MLP output" not in words and "learned embedding of its position" not in words


def test_a_transformers_stream_holds_attention_and_mlp_outputs() -> None:
    words = _input_meaning((SCENARIOS / "i_love_ai.toml").read_text(encoding="utf-8") + RESIDUAL)
    assert "each adding its attention output and then its MLP output back into the row" in words
