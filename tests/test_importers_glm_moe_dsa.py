"""GLM-5 folders ("glm_moe_dsa") against transformers' own eager forward: [mla] with [indexer], and the shared layers.

As tests/test_importers_deepseek_v32.py does for DeepSeek-V3.2, on a tiny GlmMoeDsaForCausalLM whose
``indexer_types`` are full, shared, full: layer 0 and layer 2 are opened and compared (X, every head's output, the
output after o_proj, each query's selected keys against transformers' top-k), and layer 2's X runs layer 1 with
layer 0's selection, as GlmMoeDsaModel passes it up. GLM-5's indexer turns interleaved pairs, and its rms_norm_eps
(1e-5) is not the latent norms' (transformers builds q_a_layernorm and kv_a_layernorm with 1e-6). Float32 noise
as there (ROPE_FLOAT32): transformers computes RoPE's cos and sin, the RMSNorms and the index scores in float32.
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
from .test_importers_deepseek_v32 import TOP_K, _as_mask, _decisive
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

KINDS = ["full", "shared", "full"]


def _config(vocab: int, **extra: Any) -> Any:
    base = dict(vocab_size=vocab, hidden_size=32, intermediate_size=48, moe_intermediate_size=8, num_hidden_layers=3,
                num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=8, q_lora_rank=12, qk_nope_head_dim=4,
                qk_rope_head_dim=4, v_head_dim=6, first_k_dense_replace=3, n_routed_experts=4, num_experts_per_tok=2,
                n_group=1, topk_group=1, index_n_heads=8, index_head_dim=8, index_topk=TOP_K, indexer_types=KINDS,
                max_position_embeddings=64, rope_parameters={"rope_type": "default", "rope_theta": 1000.0},
                pad_token_id=0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    return transformers.GlmMoeDsaConfig(**(base | extra))


def _their_selection(model: Any, ids: list[int]) -> dict[int, np.ndarray]:
    """The top-k key indices of each layer that runs an indexer, as transformers' indexer returns them."""
    seen: dict[int, np.ndarray] = {}
    hooks = []
    for i, block in enumerate(model.model.layers):
        if block.self_attn.indexer is not None:
            hooks.append(block.self_attn.indexer.register_forward_hook(
                lambda m, a, out, i=i: seen.__setitem__(i, out[0].numpy().copy())))
    forward_hooked(model, ids, hooks)
    return seen


def _model(tmp_path: Path, seed: int, **extra: Any) -> tuple[Path, Any]:
    folder, vocab = _with_tokenizer(tmp_path, "glm_moe_dsa")
    model = _build(folder, "GlmMoeDsaForCausalLM", _config(vocab, **extra), seed=seed)
    _place_tokenizer(tmp_path, folder)
    return folder, model


@pytest.mark.parametrize("seed", [11, 12])
def test_glm_full_layers_match_transformers_through_a_shared_layer(tmp_path: Path, seed: int) -> None:
    folder, model = _model(tmp_path, seed)
    assert model.model.layers[1].self_attn.indexer is None and model.config.rms_norm_eps == 1e-5
    comps = {layer: _open(tmp_path, folder, layer) for layer in (0, 2)}
    ids = _ids(comps[0].scenario.description)
    n = len(ids)
    assert n > TOP_K + 2
    theirs = _their_selection(model, ids)
    assert sorted(theirs) == [0, 2]
    for layer, comp in comps.items():
        sel = comp.heads[0].need(Selection)
        _decisive(sel)
        assert not sel.indexed.covers_all
        assert np.array_equal(sel.mask, _as_mask(theirs[layer], n)), layer
        _compare(comp, _decoder_reference(model, comp, layer), d_v=6, tol=ROPE_FLOAT32)
        ix = comp.scenario.parts["indexer"]
        assert (ix.rope_layout, ix.rope_dims, ix.top_k) == ("interleaved", 4, TOP_K)
        assert comp.scenario.mla is not None and comp.scenario.mla.eps == 1e-6
        assert comp.scenario.norm is not None and comp.scenario.norm.eps == 1e-5
        assert "interleaved pairs (transformers' GlmMoeDsaIndexer)" in comp.scenario.description
        assert "reuse the last full layer's selection" in comp.scenario.description
        assert ("This layer's selection is also the one layer 1 attends with." in comp.scenario.description) == (layer == 0)


def test_the_shared_layer_attends_with_the_full_layers_selection(tmp_path: Path) -> None:
    """Layer 2's X with layer 1 attending fully (no selection) is not transformers' X: the test above could fail if
    the shared layer ignored layer 0's selection."""
    folder, model = _model(tmp_path, 11)
    comp = _open(tmp_path, folder, 2)
    ref = _decoder_reference(model, comp, 2)
    opened = open_source(str(folder), None)
    embedded = opened.embed(_ids(comp.scenario.description))
    below = [opened.layer(0), opened.layer(1)]
    full_at_1 = residual_stream(embedded, [below[0], replace(below[1], attend=None)], opened.rope)
    np.testing.assert_allclose(residual_stream(embedded, below, opened.rope), ref["X"], rtol=ROPE_FLOAT32,
                               atol=ROPE_FLOAT32)
    assert np.abs(full_at_1 - ref["X"]).max() > 100 * ROPE_FLOAT32


def test_what_the_glm_importer_cannot_read_is_one_line_each(cli: Any, tmp_path: Path) -> None:
    folder, _ = _model(tmp_path, 3)
    assert 'layer 1 runs no indexer of its own (indexer_types[1] = "shared"' in _lines(cli, tmp_path, folder, "layer = 1\n")
    assert "leave out model.heads" in _lines(cli, tmp_path, folder, "heads = [0]\n")
    _edit_config(folder, {"indexer_types": ["shared", "full", "full"]})
    assert 'indexer_types[0] is "shared"' in _lines(cli, tmp_path, folder)
    _edit_config(folder, {"indexer_types": ["full", "sparse", "full"]})
    assert "indexer_types must list" in _lines(cli, tmp_path, folder)
