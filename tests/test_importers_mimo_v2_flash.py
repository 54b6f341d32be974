"""MiMo-V2-Flash folders against transformers' own eager forward (tests/test_importers_families.py's method).

A tiny random MiMoV2FlashForCausalLM, built and saved by transformers' own classes (the sinks saved under the
Hub's name attention_sink_bias, the experts one by one), opened through a [model] table at every layer type:
a full layer (K/V heads num_key_value_heads, no sink), sliding layers (twice the K/V heads, a sink per head,
their own RoPE base and window), dense and mixture-of-experts MLPs beneath the deeper layers. The app's X,
every head's W_Q/W_K/W_V columns, every head's output (the input of o_proj) and the output after W_O must match
hooks in the model's float64 eager forward. Query/key heads are 12 wide, value heads 6, and
partial_rotary_factor 0.334 turns int(12·0.334) = 4 of each head's dimensions.

Tolerance: float32's. transformers computes RoPE's cos and sin in float32 (its inv_freq is a float32 arange),
its RMSNorm in float32 (hidden_states.to(torch.float32)) and the router's logits and σ in float32
(F.linear(hidden_states.type(torch.float32), …)) whatever the model's dtype.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qkv_tui.core.cost import kv_cache
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.core.variants import value_scale
from qkv_tui.edges.export_toml import to_toml
from qkv_tui.kernels.sinks import Sunk

from .test_importers_families import (
    TEXT,
    _build,
    _check,
    _decoder_reference,
    _linear,
    _open,
    _place_tokenizer,
    _with_tokenizer,
)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("transformers.models.mimo_v2_flash")

FLOAT32 = 5e-5  # see the module's docstring: RoPE, RMSNorm and the router in float32
TYPES = ["full_attention", "sliding_attention", "sliding_attention", "full_attention", "sliding_attention"]


def _mimo(tmp_path: Path, seed: int = 31, **extra: Any) -> tuple[Path, Any]:
    folder, vocab = _with_tokenizer(tmp_path, "mimo")
    config = transformers.MiMoV2FlashConfig(**({
        "vocab_size": vocab, "hidden_size": 32, "intermediate_size": 48, "moe_intermediate_size": 16,
        "num_hidden_layers": 5, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 12, "v_head_dim": 6,
        "n_routed_experts": 4, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1, "sliding_window": 4,
        "attention_value_scale": 0.6, "layer_types": TYPES, "max_position_embeddings": 64,
        "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1000.0, "partial_rotary_factor": 0.334},
                            "sliding_attention": {"rope_type": "default", "rope_theta": 50.0,
                                                  "partial_rotary_factor": 0.334}},
        "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False} | extra))
    model = _build(folder, "MiMoV2FlashForCausalLM", config, seed=seed, experts_implementation="eager")
    with torch.no_grad():  # the correction bias is a buffer _randomise leaves at 0: give it something to steer
        for block in model.model.layers[1:]:
            block.mlp.gate.e_score_correction_bias.copy_(torch.linspace(-0.3, 0.3, 4, dtype=torch.float64))
    transformers.utils.logging.disable_progress_bar()
    model.float().save_pretrained(folder)  # again, with the bias
    model = model.double().eval()
    _place_tokenizer(tmp_path, folder)
    return folder, model


@pytest.mark.parametrize("layer", [0, 1, 2, 3, 4])
def test_every_layer_type_matches_the_eager_forward(tmp_path: Path, layer: int) -> None:
    folder, model = _mimo(tmp_path)
    comp = _open(tmp_path, folder, layer)
    ref = _decoder_reference(model, comp, layer)
    att = model.model.layers[layer].self_attn
    sliding = TYPES[layer] == "sliding_attention"
    kv = 2 if sliding else 1  # MiMoV2FlashAttention doubles a sliding layer's K/V heads
    _check(comp, ref, _linear(att.q_proj.weight), _linear(att.k_proj.weight), _linear(att.v_proj.weight), kv_heads=kv,
           tol=FLOAT32)
    sc = comp.scenario
    assert comp.heads[0].d_k == 12 and comp.heads[0].d_v == 6 and value_scale.TABLE.of(sc) == 0.6
    assert sc.rope is not None and sc.rope.partial == 0.334 and sc.rope.base == (50.0 if sliding else 1000.0)
    assert sc.rope.inv_freq(12).shape == (2,)  # int(12·0.334) = 4 dimensions, 2 pairs
    sinks = [h.read(Sunk, lambda s: s.sink) for h in comp.heads]
    if sliding:
        assert sinks == att.sinks.detach().numpy().astype(np.float32).tolist()
        assert sc.mask_kind == "sliding" and sc.window == 4
    else:
        assert sinks == [None] * 4 and sc.mask_kind == "causal"
    assert sc.input.schedule == ("full", "sliding 4", "sliding 4", "full", "sliding 4")


def test_the_router_chooses_by_the_biased_score_within_the_best_group(tmp_path: Path) -> None:
    """The NumPy mixture of experts against transformers' MiMoV2FlashMoE on the same inputs, float32 routing."""
    from qkv_tui.importers.hf_folder import open_folder

    folder, model = _mimo(tmp_path, seed=32)
    opened = open_folder(folder, str(folder))
    rng = np.random.default_rng(3)
    x = rng.normal(size=(7, 32)) * 2.0
    for i in (1, 4):
        ours = opened.layer(i).mlp(x)
        with torch.no_grad():
            theirs = model.model.layers[i].mlp(torch.tensor(x[None]))[0].numpy()
        np.testing.assert_allclose(ours, theirs, rtol=FLOAT32, atol=FLOAT32)


def test_chosen_heads_keep_the_value_scale_and_their_sinks(tmp_path: Path) -> None:
    folder, model = _mimo(tmp_path, seed=33)
    path = tmp_path / "heads.toml"
    path.write_text(f'[model]\nsource = "{folder}"\ntext = "{TEXT}"\nlayer = 2\nheads = [3, 1]\n', encoding="utf-8")
    from qkv_tui.core.engine import compute

    comp = compute(parse_scenario(path.read_text(encoding="utf-8"), str(path)))
    ref = _decoder_reference(model, comp, 2)
    for head, h in zip(comp.heads, (3, 1), strict=True):
        assert head.kv_head == h // 2
        np.testing.assert_allclose(head.output, ref["merged"][:, h * 6:(h + 1) * 6], rtol=FLOAT32, atol=FLOAT32)
    again = parse_scenario(to_toml(comp.scenario), "frozen.toml")  # a written-out head keeps the factor
    assert value_scale.TABLE.of(again) == 0.6


def test_the_cache_counts_each_layer_type_with_its_own_kv_heads(tmp_path: Path) -> None:
    """The schedule's layers each hold the K/V heads of the layer shown: a full layer's scenario counts
    its 1 K/V head of (12 + 6) numbers, and the sliding layers hold at most 4 tokens."""
    folder, _ = _mimo(tmp_path, seed=34)
    comp = _open(tmp_path, folder, 0)
    cache = kv_cache(comp.scenario, 2, 100)
    assert [lc.kind for lc in cache.layers] == ["full", "sliding 4", "sliding 4", "full", "sliding 4"]
    assert cache.layers[0].per_token.value == (12 + 6) * 2
    assert cache.at_context == 2 * 100 * 36 + 3 * 4 * 36


@pytest.mark.parametrize(("change", "needle"), [
    ({"quantization_config": {"quant_method": "fp8"}}, "quantization_config is set; expected unquantised weights"),
    ({"rope_parameters": {"full_attention": {"rope_type": "yarn", "rope_theta": 10.0, "factor": 2.0},
                          "sliding_attention": {"rope_type": "default", "rope_theta": 10.0}}},
     "rope_parameters.full_attention.rope_type 'yarn' is not supported for MiMo-V2-Flash"),
    ({"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 10.0, "partial_rotary_factor": 0.42},
                          "sliding_attention": {"rope_type": "default", "rope_theta": 10.0}}},
     "turns int(12·0.42) = 5 dimensions of each head; expected an even number"),
    ({"layer_types": ["full_attention", "chunked_attention", "full_attention", "full_attention", "full_attention"]},
     "layer_types[1] = 'chunked_attention' is not supported"),
])
def test_what_the_format_cannot_express_is_one_line(cli: Any, tmp_path: Path, change: dict[str, Any],
                                                    needle: str) -> None:
    folder, _ = _mimo(tmp_path, seed=35)
    data = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(data | change))
    path = tmp_path / "head.toml"
    path.write_text(f'[model]\nsource = "{folder}"\ntext = "{TEXT}"\nlayer = 1\n', encoding="utf-8")
    run = cli("--check", str(path))
    assert run.code == 2 and run.out == "" and run.err.count("\n") == 1, run.err
    assert needle in run.err, run.err
