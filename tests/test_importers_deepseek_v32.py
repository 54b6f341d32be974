"""DeepSeek-V3.2 folders against transformers' own eager forward: the chosen layer as [mla] with [indexer] beside it.

Each case builds a tiny random checkpoint with transformers' DeepseekV32ForCausalLM (index_topk smaller than the
keys most queries see, so the selection drops keys), opens it through a [model] table and compares X, every head's
output (the input of o_proj) and the attention output after W_O with hooks in the model's float64 eager forward,
at layer 0 and at layer 1 (whose X runs layer 0's latent attention, narrowed by layer 0's own selection, and its
dense MLP), and a layer beneath whose MLP is the mixture of experts. transformers computes RoPE's cos and sin, the latent RMSNorms and the indexer's scores in float32
whatever the model's dtype, so the numbers agree to float32 noise (ROPE_FLOAT32), and the selection is compared
index for index with the top-k transformers' indexer returns, on draws whose k-th and next scores are far apart
(torch.topk orders equal scores as it likes, and ReLU's zeros tie often).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qkv_tui.core.indexer_part import Selection
from qkv_tui.importers.expand import open_source
from qkv_tui.importers.stack import residual_stream

from .hooked_forward import forward_hooked
from .test_importers_deepseek import _compare, _lines
from .test_importers_families import (
    ROPE_FLOAT32,
    _build,
    _decoder_reference,
    _edit_config,
    _ids,
    _open,
    _place_tokenizer,
    _with_tokenizer,
)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TOP_K = 3
H_I, D_I, D_ROPE = 8, 8, 4


def _config(vocab: int, **extra: Any) -> Any:
    base = dict(vocab_size=vocab, hidden_size=32, intermediate_size=48, moe_intermediate_size=8, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=8, q_lora_rank=12, qk_nope_head_dim=4,
                qk_rope_head_dim=D_ROPE, v_head_dim=6, first_k_dense_replace=2, n_routed_experts=4,
                num_experts_per_tok=2, n_group=1, topk_group=1, index_n_heads=H_I, index_head_dim=D_I,
                index_topk=TOP_K, max_position_embeddings=64,
                rope_parameters={"rope_type": "default", "rope_theta": 1000.0}, pad_token_id=0, bos_token_id=1,
                eos_token_id=2, tie_word_embeddings=False)
    return transformers.DeepseekV32Config(**(base | extra))


def _their_selection(model: Any, ids: list[int]) -> list[np.ndarray]:
    """Each layer's top-k key indices as transformers' indexer returns them, (n, top_k) per layer."""
    seen: list[np.ndarray] = []
    hooks = [block.self_attn.indexer.register_forward_hook(lambda m, a, out: seen.append(out[0].numpy().copy()))
             for block in model.model.layers]
    forward_hooked(model, ids, hooks)
    return seen


def _as_mask(indices: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros((n, n), dtype=bool)
    for t, keys in enumerate(indices):
        out[t, keys] = True
    return out & np.tril(np.ones((n, n), dtype=bool))  # a row with fewer visible keys than top_k lists masked ones too


def _decisive(sel: Selection) -> None:
    """Each row's k-th and next visible scores far apart, so neither a tie nor float32 rounding decides the pick."""
    n = sel.indexed.scores.shape[0]
    for t in range(n):
        row = np.sort(sel.indexed.scores[t, : t + 1])[::-1]
        if len(row) > TOP_K:
            assert row[TOP_K - 1] - row[TOP_K] > 1e-4 * max(1.0, abs(row[TOP_K - 1])), (t, row)


@pytest.mark.parametrize("seed", [11, 12])
def test_deepseek_v32_layers_match_transformers_with_each_layers_selection(tmp_path: Path, seed: int) -> None:
    folder, vocab = _with_tokenizer(tmp_path, "deepseek_v32")
    model = _build(folder, "DeepseekV32ForCausalLM", _config(vocab), seed=seed)
    _place_tokenizer(tmp_path, folder)
    comps = [_open(tmp_path, folder, layer) for layer in (0, 1)]
    ids = _ids(comps[0].scenario.description)
    n = len(ids)
    assert n > TOP_K + 2
    theirs = _their_selection(model, ids)
    for layer, comp in enumerate(comps):
        sel = comp.heads[0].need(Selection)
        _decisive(sel)
        assert not sel.indexed.covers_all  # the selection drops keys: this is not full attention
        assert np.array_equal(sel.mask, _as_mask(theirs[layer], n)), layer
        assert all(np.array_equal(hr.need(Selection).mask, sel.mask) for hr in comp.heads)
        _compare(comp, _decoder_reference(model, comp, layer), d_v=6, tol=ROPE_FLOAT32)
        ix, att = comp.scenario.parts["indexer"], model.model.layers[layer].self_attn.indexer
        assert (ix.num_heads, ix.d_index, ix.top_k, ix.rope_dims, ix.rope_layout) == (H_I, D_I, TOP_K, D_ROPE, "half")
        assert ix.from_latent and ix.k_norm and ix.k_eps == 1e-6
        np.testing.assert_array_equal(ix.W_q, att.wq_b.weight.detach().numpy().T)
        np.testing.assert_array_equal(ix.k_beta, att.k_norm.bias.detach().numpy())
        assert "top 3 keys" in comp.scenario.description and "half-split" in comp.scenario.description


def test_the_stream_beneath_a_deeper_layer_needs_each_layers_selection(tmp_path: Path) -> None:
    """Layer 1's X without layer 0's selection (full latent attention at layer 0) is not transformers' X: the
    comparison above could fail if the residual stream ignored the indexer."""
    folder, vocab = _with_tokenizer(tmp_path, "deepseek_v32")
    model = _build(folder, "DeepseekV32ForCausalLM", _config(vocab), seed=11)
    _place_tokenizer(tmp_path, folder)
    comp = _open(tmp_path, folder, 1)
    ref = _decoder_reference(model, comp, 1)
    opened = open_source(str(folder), None)
    embedded = opened.embed(_ids(comp.scenario.description))
    full = residual_stream(embedded, [replace(opened.layer(0), attend=None)], opened.rope)  # [mla] alone
    sparse = residual_stream(embedded, [opened.layer(0)], opened.rope)
    np.testing.assert_allclose(sparse, ref["X"], rtol=ROPE_FLOAT32, atol=ROPE_FLOAT32)
    assert np.abs(full - ref["X"]).max() > 100 * ROPE_FLOAT32


@pytest.mark.parametrize("seed", [5])
def test_a_mixture_of_experts_layer_runs_beneath_a_deeper_layer(tmp_path: Path, seed: int) -> None:
    """Layer 1's MLP is DeepSeek-V3's router over 8 experts in 2 groups (one group kept, 2 experts per token) plus
    the shared expert: layer 2's X runs it as DeepseekV32MoE does (its router computes in float32 too)."""
    folder, vocab = _with_tokenizer(tmp_path, "deepseek_v32")
    model = _build(folder, "DeepseekV32ForCausalLM", _config(vocab, num_hidden_layers=3, first_k_dense_replace=1,
                                                             n_routed_experts=8, n_group=2, topk_group=1), seed=seed,
                   experts_implementation="eager")  # torch's grouped_mm takes no float64
    _place_tokenizer(tmp_path, folder)
    assert type(model.model.layers[1].mlp).__name__ == "DeepseekV32MoE"
    comp = _open(tmp_path, folder, 2)
    _decisive(comp.heads[0].need(Selection))
    _compare(comp, _decoder_reference(model, comp, 2), d_v=6, tol=ROPE_FLOAT32)


def test_what_the_v32_importer_cannot_read_is_one_line_each(cli: Any, tmp_path: Path) -> None:
    folder, vocab = _with_tokenizer(tmp_path, "deepseek_v32")
    _build(folder, "DeepseekV32ForCausalLM", _config(vocab, num_hidden_layers=3, first_k_dense_replace=1), seed=3)
    _place_tokenizer(tmp_path, folder)
    assert "leave out model.heads" in _lines(cli, tmp_path, folder, "heads = [0]\n")
    _edit_config(folder, {"mlp_layer_types": ["dense", "sparse", "dense"]})
    assert "dense layer after the mixture of experts" in _lines(cli, tmp_path, folder)
    _edit_config(folder, {"mlp_layer_types": ["dense", "sparse", "sparse"], "layer_types": ["indexed_attention",
                                                                                              "full_attention",
                                                                                              "indexed_attention"]})
    assert "layer_types[1] = 'full_attention' is not supported" in _lines(cli, tmp_path, folder)
    _edit_config(folder, {"layer_types": None, "q_lora_rank": None})
    assert "q_lora_rank = null is not supported" in _lines(cli, tmp_path, folder)
    _edit_config(folder, {"q_lora_rank": 12, "rope_parameters": {"rope_type": "linear", "factor": 4.0}})
    assert "rope scaling 'linear' is not supported" in _lines(cli, tmp_path, folder)  # YaRN is read (its own test)
