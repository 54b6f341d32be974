"""DeepSeek-V3 and V3.2 folders whose RoPE is scaled by YaRN, as the real checkpoints' are, against transformers'
own eager forward: [mla] turns its rotary parts with YaRN's frequencies (transformers' _compute_yarn_parameters:
the ramp between the pairs kept and those divided by factor), cos and sin times the attention factor
m(mscale) / m(mscale_all_dim), and divides its scores by √d_qk / m(mscale_all_dim)² (DeepseekV3Attention's
softmax_scale·mscale²); V3.2's indexer turns with the same cos and sin. Tiny random checkpoints built with
transformers' classes, compared at layer 0 and layer 1 (whose X runs layer 0 under the same YaRN), with mscale ≠
mscale_all_dim so that the attention factor is not 1; the frequencies of the JSON export are held against the
model's own rotary embedding's inv_freq and attention_scaling; a scenario written back reads the same."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qkv_tui import compute
from qkv_tui.core.indexer_part import Selection
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.edges.export_json import to_json
from qkv_tui.edges.export_toml import to_toml

from .test_importers_deepseek import _compare, _config, _lines
from .test_importers_deepseek_v32 import TOP_K, _as_mask, _decisive, _their_selection
from .test_importers_deepseek_v32 import _config as _v32_config
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

FACTOR, MSCALE, MSCALE_ALL_DIM = 4.0, 0.707, 1.0
YARN = {"rope_type": "yarn", "rope_theta": 1000.0, "factor": FACTOR, "original_max_position_embeddings": 16,
        "beta_fast": 32.0, "beta_slow": 1.0, "mscale": MSCALE, "mscale_all_dim": MSCALE_ALL_DIM}


def _m(scale: float, mscale: float) -> float:
    return 0.1 * mscale * math.log(scale) + 1.0  # transformers' yarn_get_mscale, for scale > 1


def _their_rope(model: Any) -> tuple[np.ndarray, float]:
    rotary = model.model.rotary_emb
    return rotary.inv_freq.double().numpy(), float(rotary.attention_scaling)


def _check_yarn(comp: Any, model: Any) -> None:
    """The scenario's [rope.scaling], divisor and exported frequencies, against the model's own."""
    mla = comp.scenario.mla
    assert mla is not None and mla.rope is not None and mla.rope.scaling is not None
    s = mla.rope.scaling
    assert (s.type, s.factor, s.mscale, s.mscale_all_dim) == ("yarn", FACTOR, MSCALE, MSCALE_ALL_DIM)
    d_qk = mla.d_nope + mla.d_rope
    att = model.model.layers[0].self_attn
    np.testing.assert_allclose(1.0 / comp.heads[0].scale, att.scaling, rtol=1e-12)  # qk_head_dim^-0.5·m²
    np.testing.assert_allclose(comp.heads[0].scale, math.sqrt(d_qk) / _m(FACTOR, MSCALE_ALL_DIM) ** 2, rtol=1e-12)
    assert not comp.heads[0].scale_is_default
    inv_freq, a = _their_rope(model)
    assert a != 1.0 and not np.allclose(inv_freq, 1000.0 ** (-np.arange(0, mla.d_rope, 2) / mla.d_rope))
    exported = json.loads(to_json(comp))["rope"]
    np.testing.assert_allclose(exported["inv_freq"], inv_freq, rtol=1e-6)  # theirs is float32
    np.testing.assert_allclose(exported["attention_factor"], a, rtol=1e-12)
    assert exported["rotated_dims"] == mla.d_rope


@pytest.mark.parametrize("layer", [0, 1])
@pytest.mark.parametrize("extra", [{"q_lora_rank": 12}, {"q_lora_rank": None, "rope_interleave": False}])
def test_deepseek_v3_with_yarn_matches_transformers(tmp_path: Path, layer: int, extra: dict[str, Any]) -> None:
    folder, vocab = _with_tokenizer(tmp_path, "deepseek")
    model = _build(folder, "DeepseekV3ForCausalLM", _config("DeepseekV3Config", vocab, rope_parameters=YARN, **extra),
                   seed=11)
    _place_tokenizer(tmp_path, folder)
    comp = _open(tmp_path, folder, layer)
    _compare(comp, _decoder_reference(model, comp, layer), d_v=6, tol=ROPE_FLOAT32)
    _check_yarn(comp, model)
    assert "YaRN" in comp.scenario.description


@pytest.mark.parametrize("layer", [0, 1])
def test_deepseek_v32_with_yarn_matches_transformers_selection_and_all(tmp_path: Path, layer: int) -> None:
    folder, vocab = _with_tokenizer(tmp_path, "deepseek_v32")
    model = _build(folder, "DeepseekV32ForCausalLM", _v32_config(vocab, rope_parameters=YARN), seed=11)
    _place_tokenizer(tmp_path, folder)
    comp = _open(tmp_path, folder, layer)
    ids = _ids(comp.scenario.description)
    assert len(ids) > TOP_K + 2
    sel = comp.heads[0].need(Selection)
    _decisive(sel)
    assert np.array_equal(sel.mask, _as_mask(_their_selection(model, ids)[layer], len(ids)))
    _compare(comp, _decoder_reference(model, comp, layer), d_v=6, tol=ROPE_FLOAT32)
    _check_yarn(comp, model)


def test_the_scenario_written_back_reads_the_same(tmp_path: Path) -> None:
    folder, vocab = _with_tokenizer(tmp_path, "deepseek")
    _build(folder, "DeepseekV3ForCausalLM", _config("DeepseekV3Config", vocab, rope_parameters=YARN, q_lora_rank=12),
           seed=3)
    _place_tokenizer(tmp_path, folder)
    comp = _open(tmp_path, folder, 0)
    text = to_toml(comp.scenario)
    assert "[rope.scaling]" in text and "mscale_all_dim = 1.0" in text and "mscale = 0.707" in text
    again = compute(parse_scenario(text, "again.toml"))
    assert again.scenario.mla is not None and again.scenario.mla.rope == comp.scenario.mla.rope
    np.testing.assert_array_equal(again.output, comp.output)


def test_a_scaling_deepseek_does_not_use_is_one_line(cli: Any, tmp_path: Path) -> None:
    folder, vocab = _with_tokenizer(tmp_path, "deepseek")
    _build(folder, "DeepseekV3ForCausalLM", _config("DeepseekV3Config", vocab, q_lora_rank=None), seed=3)
    _place_tokenizer(tmp_path, folder)
    _edit_config(folder, {"rope_parameters": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1000.0}})
    assert "rope scaling 'linear' is not supported" in _lines(cli, tmp_path, folder)
