"""Qwen3.5's full-attention layers against transformers' own eager forward (tests/test_importers_families.py's method).

A tiny random Qwen3_5ForCausalLM whose layer_types put full-attention layers first: the app's X, every
head's Query and gate columns (cut from q_proj's interleaved per-head rows), every head's gated output
(the input of o_proj) and the output after W_O must match hooks in the model's float64 eager forward.
The linear-attention (Gated DeltaNet) layers open as [deltanet] scenarios and run in the residual stream beneath
a full one: tests/test_importers_qwen3next.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qkv_tui.kernels.gate import Gated

from .test_importers_families import (
    ROPE_FLOAT32,
    TEXT,
    _build,
    _decoder_reference,
    _linear,
    _open,
    _place_tokenizer,
    _with_tokenizer,
)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

HEADS, KV_HEADS, D_K = 4, 2, 16


def _qwen35(tmp_path: Path, layer_types: list[str], seed: int) -> tuple[Path, Any]:
    folder, vocab = _with_tokenizer(tmp_path, "qwen35")
    config = transformers.Qwen3_5TextConfig(
        vocab_size=vocab, hidden_size=32, intermediate_size=48, num_hidden_layers=len(layer_types),
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=D_K, layer_types=layer_types,
        max_position_embeddings=64, linear_num_value_heads=2, linear_num_key_heads=2, linear_key_head_dim=8,
        linear_value_head_dim=8, pad_token_id=0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
    )
    model = _build(folder, "Qwen3_5ForCausalLM", config, seed=seed)
    _place_tokenizer(tmp_path, folder)
    return folder, model


@pytest.mark.parametrize("layer", [0, 1])
def test_qwen35_full_attention_layer_with_its_gate_qk_norm_and_partial_rope(tmp_path: Path, layer: int) -> None:
    folder, model = _qwen35(tmp_path, ["full_attention", "full_attention", "linear_attention"], seed=21)
    comp = _open(tmp_path, folder, layer)
    ref = _decoder_reference(model, comp, layer)
    att = model.model.layers[layer].self_attn
    q_and_gate = _linear(att.q_proj.weight).reshape(32, HEADS, 2, D_K)  # (d_model, H, [q | gate], d_k)
    k, v = _linear(att.k_proj.weight), _linear(att.v_proj.weight)
    sc = comp.scenario
    np.testing.assert_allclose(sc.X, ref["X"], rtol=ROPE_FLOAT32, atol=ROPE_FLOAT32)
    for h, head in enumerate(comp.heads):
        g = h // (HEADS // KV_HEADS)
        assert head.kv_head == g
        np.testing.assert_array_equal(head.W_Q, q_and_gate[:, h, 0])
        np.testing.assert_array_equal(head.need(Gated).W_G, q_and_gate[:, h, 1])
        np.testing.assert_array_equal(head.W_K, k[:, g * D_K:(g + 1) * D_K])
        np.testing.assert_array_equal(head.W_V, v[:, g * D_K:(g + 1) * D_K])
        assert head.part(Gated) is not None
        np.testing.assert_allclose(head.need(Gated).gated, ref["merged"][:, h * D_K:(h + 1) * D_K],
                                   rtol=ROPE_FLOAT32, atol=ROPE_FLOAT32)
    np.testing.assert_allclose(comp.output, ref["attn"], rtol=ROPE_FLOAT32, atol=ROPE_FLOAT32)
    assert sc.qk_norm is not None and sc.qk_norm.over == "head"  # (1 + γ): the stored weight plus one
    np.testing.assert_array_equal(sc.qk_norm.gamma_q, att.q_norm.weight.detach().numpy() + 1.0)
    assert sc.norm is not None
    np.testing.assert_array_equal(sc.norm.gamma, model.model.layers[layer].input_layernorm.weight.detach().numpy() + 1.0)
    assert sc.rope is not None and sc.rope.partial == 0.25
    assert sc.input.schedule == ("full", "full", "linear")
    assert "1 + γ" in sc.description


def test_qwen35_chosen_heads_carry_their_own_gate(tmp_path: Path) -> None:
    folder, model = _qwen35(tmp_path, ["full_attention", "linear_attention"], seed=22)
    path = tmp_path / "heads.toml"
    path.write_text(f'[model]\nsource = "{folder}"\ntext = "{TEXT}"\nheads = [3, 0]\n', encoding="utf-8")
    from qkv_tui.core.engine import compute
    from qkv_tui.core.scenario import parse_scenario
    comp = compute(parse_scenario(path.read_text(encoding="utf-8"), str(path)))
    ref = _decoder_reference(model, comp, 0)
    for head, h in zip(comp.heads, (3, 0), strict=True):
        np.testing.assert_allclose(head.need(Gated).gated, ref["merged"][:, h * D_K:(h + 1) * D_K],
                                   rtol=ROPE_FLOAT32, atol=ROPE_FLOAT32)


def test_qwen35_chosen_heads_of_a_linear_attention_layer_are_one_line(cli: Any, tmp_path: Path) -> None:
    folder, _ = _qwen35(tmp_path, ["full_attention", "linear_attention", "full_attention"], seed=23)
    path = tmp_path / "head.toml"
    path.write_text(f'[model]\nsource = "{folder}"\ntext = "{TEXT}"\nlayer = 1\nheads = [0]\n', encoding="utf-8")
    run = cli("--check", str(path))
    assert run.code == 2 and run.out == "", run.err
    assert run.err.count("\n") == 1 and "Traceback" not in run.err, run.err
    assert "a linear-attention layer opens as one [deltanet] scenario of every value head" in run.err, run.err


def test_qwen35_multimodal_config_and_transformers_default_schedule(cli: Any, tmp_path: Path) -> None:
    """model_type "qwen3_5" reads its text_config; without layer_types, every fourth layer is full (layer 0 is linear,
    read as one: its linear_attn weights are asked for)."""
    folder, _ = _qwen35(tmp_path, ["full_attention", "linear_attention"], seed=24)
    text = json.loads((folder / "config.json").read_text())
    del text["layer_types"]
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen3_5", "text_config": text}))
    path = tmp_path / "head.toml"
    path.write_text(f'[model]\nsource = "{folder}"\ntext = "{TEXT}"\n', encoding="utf-8")
    run = cli("--check", str(path))
    # the default schedule makes layer 0 linear attention, which this checkpoint (built full) has no weights for
    assert run.code == 2 and run.err.count("\n") == 1, run.err
    assert "no tensor 'model.layers.0.linear_attn.in_proj_qkv.weight'" in run.err, run.err


@pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=["120x40", "80x24"])
def test_qwen35_gate_stage_snapshot(snap_compare: Any, tmp_path: Path, size: tuple[int, int]) -> None:
    """The Gate stage of an imported layer: W_G cut from q_proj's gate rows, g = σ(X̂·W_G) with its arithmetic."""
    from qkv_tui.ui.app import QKVApp
    _qwen35(tmp_path, ["full_attention", "full_attention", "linear_attention"], seed=25)
    path = tmp_path / "qwen35.toml"  # a relative source: the description names it as written, not the tmp folder
    path.write_text(f'[model]\nsource = "qwen35"\ntext = "{TEXT}"\nlayer = 1\n', encoding="utf-8")
    assert snap_compare(QKVApp(path), press=["0"], terminal_size=size)
