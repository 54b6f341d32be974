"""DeepSeek-V2 and V3 folders against transformers' own eager forward: the chosen layer's attention as an [mla] table.

Each case builds a tiny random checkpoint with transformers' DeepseekV2ForCausalLM or DeepseekV3ForCausalLM
(both query forms: q_proj, and q_a_proj/q_a_layernorm/q_b_proj; V3 with and without rope_interleave),
opens it through a [model] table and compares X, every head's output (the input of o_proj) and the
attention output after W_O with hooks in the model's float64 eager forward, at layer 0 and at layer 1
(which runs layer 0's latent attention and dense MLP in the residual stream).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from .test_importers_families import (
    ROPE_FLOAT32,
    _build,
    _edit_config,
    _opened,
    _place_tokenizer,
    _with_tokenizer,
)

transformers = pytest.importorskip("transformers")

# V2 turns its rotary parts as float32 complex numbers (apply_rotary_emb's .float()), whatever the model's dtype
V2_FLOAT32 = 1e-4


def _config(cls_name: str, vocab: int, **extra: Any) -> Any:
    base = dict(vocab_size=vocab, hidden_size=32, intermediate_size=48, moe_intermediate_size=8, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=8, qk_nope_head_dim=4, qk_rope_head_dim=4,
                v_head_dim=6, first_k_dense_replace=2, n_routed_experts=4, num_experts_per_tok=2,
                max_position_embeddings=64, rope_parameters={"rope_type": "default", "rope_theta": 1000.0},
                pad_token_id=0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    return getattr(transformers, cls_name)(**(base | extra))


def _compare(comp: Any, ref: dict[str, np.ndarray], d_v: int, tol: float) -> None:
    np.testing.assert_allclose(comp.scenario.X, ref["X"], rtol=tol, atol=tol)
    for h, head in enumerate(comp.heads):
        np.testing.assert_allclose(head.output, ref["merged"][:, h * d_v:(h + 1) * d_v], rtol=tol, atol=tol)
    np.testing.assert_allclose(comp.output, ref["attn"], rtol=tol, atol=tol)


CASES = [
    ("DeepseekV3Config", "DeepseekV3ForCausalLM", {"q_lora_rank": 12}, "interleaved", ROPE_FLOAT32),
    ("DeepseekV3Config", "DeepseekV3ForCausalLM", {"q_lora_rank": None, "rope_interleave": False}, "half", ROPE_FLOAT32),
    ("DeepseekV2Config", "DeepseekV2ForCausalLM", {"q_lora_rank": None}, "interleaved", V2_FLOAT32),
    ("DeepseekV2Config", "DeepseekV2ForCausalLM", {"q_lora_rank": 12}, "interleaved", V2_FLOAT32),
]


@pytest.mark.parametrize("layer", [0, 1])
@pytest.mark.parametrize(("config_cls", "model_cls", "extra", "layout", "tol"), CASES)
def test_deepseek_latent_attention_matches_transformers(tmp_path: Path, layer: int, config_cls: str, model_cls: str,
                                                        extra: dict[str, Any], layout: str, tol: float) -> None:
    folder, vocab = _with_tokenizer(tmp_path, "deepseek")
    model = _build(folder, model_cls, _config(config_cls, vocab, **extra), seed=11)
    comp, ref = _opened(tmp_path, folder, model, layer)
    _compare(comp, ref, d_v=6, tol=tol)
    mla, att = comp.scenario.mla, model.model.layers[layer].self_attn
    assert mla is not None and mla.num_heads == 4 and (mla.d_nope, mla.d_rope, mla.d_v, mla.d_c) == (4, 4, 6, 8)
    assert mla.kv_norm and (mla.W_DQ is not None) == (extra["q_lora_rank"] is not None) == mla.q_norm
    assert mla.rope is not None and mla.rope.layout == layout and mla.rope.base == 1000.0
    kv_a = att.kv_a_proj_with_mqa.weight.detach().numpy().T
    np.testing.assert_array_equal(mla.W_DKV, kv_a[:, :8])
    np.testing.assert_array_equal(mla.W_KR, kv_a[:, 8:])
    assert comp.heads[0].scale_is_default  # qk_head_dim^-0.5, the [mla] default


def _deepseek_folder(tmp_path: Path, **extra: Any) -> Path:
    folder, vocab = _with_tokenizer(tmp_path, "deepseek")
    _build(folder, "DeepseekV3ForCausalLM", _config("DeepseekV3Config", vocab, **extra), seed=3)
    _place_tokenizer(tmp_path, folder)
    return folder


def _lines(cli: Any, tmp_path: Path, folder: Path, more: str = "") -> str:
    path = tmp_path / "s.toml"
    path.write_text(f'[model]\nsource = "{folder}"\ntext = "Alice was"\n{more}', encoding="utf-8")
    result = cli(str(path), "--check")
    assert result.code != 0
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    return lines[0]


def test_what_the_importer_cannot_read_is_one_line_each(cli: Any, tmp_path: Path) -> None:
    folder = _deepseek_folder(tmp_path, num_hidden_layers=3, first_k_dense_replace=1, q_lora_rank=None)
    assert "mixture of experts" in _lines(cli, tmp_path, folder, "layer = 2\n")
    assert "leave out model.heads" in _lines(cli, tmp_path, folder, "heads = [0]\n")
    _edit_config(folder, {"rope_parameters": {"rope_type": "llama3", "factor": 4.0, "original_max_position_embeddings": 16,
                                              "low_freq_factor": 1.0, "high_freq_factor": 4.0}})
    assert "rope scaling 'llama3' is not supported" in _lines(cli, tmp_path, folder)  # YaRN is read (its own test)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    assert config["model_type"] == "deepseek_v3"
