"""Qwen3-Next's and Qwen3.5's linear-attention (Gated DeltaNet) layers run in the residual stream, against transformers.

Tiny random Qwen3NextForCausalLM (a sparse mixture of experts with a shared expert, one dense layer) and
Qwen3_5ForCausalLM checkpoints whose first layers are linear attention, with fewer key heads than value heads:
the residual stream after every layer must match the model's own hidden states (output_hidden_states), and a
full-attention layer above the linear ones opens, its heads matching hooks in the model's eager forward.
transformers runs the delta rule, the short convolution's input and the gated norm in float32 whatever the
model's dtype, so the agreement is float32's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qkv_tui.importers.hf_folder import open_folder
from qkv_tui.importers.stack import residual_stream
from qkv_tui.kernels.gate import Gated

from .test_importers_families import (
    TEXT,
    _build,
    _decoder_reference,
    _ids,
    _linear,
    _open,
    _place_tokenizer,
    _reference,
    _with_tokenizer,
)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

FLOAT32 = 2e-5  # relative to each hidden state's largest cell
LAYERS = ["linear_attention", "linear_attention", "full_attention", "linear_attention"]
HEADS, KV_HEADS, D_K = 4, 2, 16


def qwen_linear(tmp_path: Path, kind: str, seed: int, layer_types: list[str] = LAYERS) -> tuple[Path, Any]:
    """A tiny checkpoint of ``kind`` ("qwen3_next" or "qwen3_5"), 2 key heads serving 4 value heads, K = 4."""
    folder, vocab = _with_tokenizer(tmp_path, kind)
    common = dict(vocab_size=vocab, hidden_size=32, intermediate_size=48, num_hidden_layers=len(layer_types),
                  num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=D_K, max_position_embeddings=64,
                  linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=8, linear_value_head_dim=6,
                  linear_conv_kernel_dim=4, pad_token_id=0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
                  layer_types=layer_types)
    if kind == "qwen3_next":
        config = transformers.Qwen3NextConfig(**common, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=12,
                                              shared_expert_intermediate_size=10, mlp_only_layers=[1])
        model = _build(folder, "Qwen3NextForCausalLM", config, seed=seed, experts_implementation="eager")
    else:
        model = _build(folder, "Qwen3_5ForCausalLM", transformers.Qwen3_5TextConfig(**common), seed=seed)
    _place_tokenizer(tmp_path, folder)
    return folder, model


@pytest.mark.parametrize("kind", ["qwen3_next", "qwen3_5"])
def test_every_layer_of_the_residual_stream_matches_the_models_hidden_states(tmp_path: Path, kind: str) -> None:
    folder, model = qwen_linear(tmp_path, kind, seed=31)
    opened = open_folder(folder, str(folder))
    assert opened.schedule == ("linear", "linear", "full", "linear")
    _, ids = opened.tokenize(TEXT)
    with torch.no_grad():
        hidden = [h[0].numpy() for h in model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states]
    x = opened.embed(ids)  # (n, d_model)
    np.testing.assert_array_equal(x, hidden[0])
    for i in range(3):  # the last entry is after the final norm, which no layer's input sees
        x = residual_stream(x, [opened.layer(i)], opened.rope)
        np.testing.assert_allclose(x, hidden[i + 1], rtol=0, atol=FLOAT32 * float(np.abs(hidden[i + 1]).max()))


@pytest.mark.parametrize("kind", ["qwen3_next", "qwen3_5"])
def test_a_full_attention_layer_above_linear_ones_opens(tmp_path: Path, kind: str) -> None:
    folder, model = qwen_linear(tmp_path, kind, seed=32)
    comp = _open(tmp_path, folder, 2)
    ref = _decoder_reference(model, comp, 2)
    sc = comp.scenario
    scale = float(np.abs(ref["X"]).max())
    np.testing.assert_allclose(sc.X, ref["X"], rtol=0, atol=FLOAT32 * scale)
    q_and_gate = _linear(model.model.layers[2].self_attn.q_proj.weight).reshape(32, HEADS, 2, D_K)
    for h, head in enumerate(comp.heads):
        np.testing.assert_array_equal(head.W_Q, q_and_gate[:, h, 0])
        assert head.part(Gated) is not None
        # transformers runs in float32 through two delta-rule layers first: its noise scales with the largest
        # value (|-11.35| here), as the output's tolerance below does; a flat 1e-4 failed by 1.3e-4 on one cell
        merged = ref["merged"][:, h * D_K:(h + 1) * D_K]
        np.testing.assert_allclose(head.need(Gated).gated, merged, rtol=1e-4, atol=1e-4 * float(np.abs(ref["merged"]).max()))
    np.testing.assert_allclose(comp.output, ref["attn"], rtol=1e-4, atol=1e-4 * float(np.abs(ref["attn"]).max()))
    assert sc.input.schedule == ("linear", "linear", "full", "linear")
    assert ("Qwen3-Next" if kind == "qwen3_next" else "Qwen3.5") in sc.description


@pytest.mark.parametrize("kind", ["qwen3_next", "qwen3_5"])
@pytest.mark.parametrize("layer", [0, 3])
def test_a_linear_attention_layer_opens_as_deltanet(tmp_path: Path, kind: str, layer: int) -> None:
    """Every value head a [deltanet] head: W_Q/W_K repeated per value head, the convolution, g and β from the
    weights, the gated norm; what out_proj reads and its output match the model's own forward."""
    folder, model = qwen_linear(tmp_path, kind, seed=33 + layer)
    comp = _open(tmp_path, folder, layer)
    sc = comp.scenario
    # what out_proj reads: every head's gated-normed output
    ref = _reference(model, model.model.layers, _ids(sc.description), layer, lambda b: b.linear_attn,
                     lambda b: b.linear_attn.out_proj)
    assert sc.deltanet is not None and sc.deltanet.io is not None and sc.deltanet.io.taps == 4
    assert len(comp.heads) == 4 and comp.heads[0].d_k == 8 and comp.heads[0].d_v == 6
    np.testing.assert_array_equal(comp.heads[0].W_Q, comp.heads[1].W_Q)  # value heads 0, 1 share key head 0
    np.testing.assert_array_equal(comp.heads[2].W_K, comp.heads[3].W_K)
    assert sc.rope is None  # a linear-attention layer has no RoPE
    scale = float(np.abs(ref["X"]).max())
    np.testing.assert_allclose(sc.X, ref["X"], rtol=0, atol=FLOAT32 * scale)
    np.testing.assert_allclose(comp.concat, ref["merged"], rtol=1e-4, atol=1e-4 * float(np.abs(ref["merged"]).max()))
    np.testing.assert_allclose(comp.output, ref["attn"], rtol=1e-4, atol=1e-4 * float(np.abs(ref["attn"]).max()))
    assert "Gated DeltaNet" in sc.description and "1 + γ" in sc.description


@pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=["120x40", "80x24"])
@pytest.mark.parametrize("stage", ["4", "8"], ids=["conv", "output_norm"])
def test_linear_layer_stage_snapshot(snap_compare: Any, tmp_path: Path, size: tuple[int, int], stage: str) -> None:
    """An imported Qwen3-Next linear-attention layer's Conv and Output norm stages (seeded tiny checkpoint)."""
    from qkv_tui.ui.app import QKVApp
    qwen_linear(tmp_path, "qwen3_next", seed=40)
    path = tmp_path / "linear.toml"  # a relative source: the description names it as written, not the tmp folder
    path.write_text('[model]\nsource = "qwen3_next"\ntext = "Alice was reading"\nlayer = 0\n', encoding="utf-8")
    assert snap_compare(QKVApp(path), press=[stage, "right"], terminal_size=size)
