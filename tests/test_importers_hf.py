"""Hugging Face folders (GPT-2 and LLaMA-family) against forward passes written in the tests.

The checkpoints are built by tests/model_fixtures.py: random weights, real key names and shapes,
float32 / float16 / bfloat16, a tokenizer.json trained by the tokenizers library.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from qkv_tui.importers import ImporterError, expand_model
from qkv_tui.importers.safetensors_raw import TensorFiles

from .model_fixtures import build_gpt2, build_llama, evaluate_scenario_dict, gpt2_reference, llama_reference

TEXT = "Alice was reading the book of her sister"


def expand(folder: Path, **model: object) -> dict:
    return expand_model({"model": {"source": str(folder), "text": TEXT} | model})


def ids_of(doc: dict) -> list[int]:
    return [int(i) for i in doc["description"].rsplit("ids ", 1)[1].rstrip(".").split()]


def check_against(doc: dict, ref: dict, heads: list[int], tol: float = 1e-9) -> None:
    np.testing.assert_allclose(np.array(doc["X"]), ref["X"], rtol=tol, atol=tol)
    got = evaluate_scenario_dict(doc)
    for out, h in zip(got["heads"], heads, strict=True):
        np.testing.assert_allclose(out, ref["heads"][h], rtol=1e-7, atol=1e-9)
    if "output" in doc:
        np.testing.assert_allclose(got["output"], ref["attn"], rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("dtype", ["F32", "F16", "BF16"])
@pytest.mark.parametrize("prefix", ["transformer.", ""])
def test_gpt2_every_head_matches_the_reference(tmp_path: Path, dtype: str, prefix: str) -> None:
    weights = build_gpt2(tmp_path / "gpt2", dtype=dtype, prefix=prefix)
    cfg = json.loads((tmp_path / "gpt2" / "config.json").read_text())
    doc = expand(tmp_path / "gpt2", layer=2)
    assert doc["tokens"][1] == "Ġwas"  # byte-level BPE labels as the tokenizer spells them
    ref = gpt2_reference(weights, cfg, ids_of(doc), 2)
    check_against(doc, ref, [0, 1, 2, 3])
    assert doc["norm"]["kind"] == "layer" and "beta" in doc["norm"] and doc["norm"]["eps"] == 1e-5
    assert "rope" not in doc and doc["mask"] == "causal" and "scale" not in doc
    assert doc["attention"]["num_heads"] == doc["attention"]["num_kv_heads"] == 4
    assert len(doc["attention"]["b_Q"]) == 16 and len(doc["output"]["b_O"]) == 16


def test_gpt2_inverse_layer_scale_and_a_head_subset(tmp_path: Path) -> None:
    weights = build_gpt2(tmp_path / "g", config={"scale_attn_by_inverse_layer_idx": True})
    cfg = json.loads((tmp_path / "g" / "config.json").read_text())
    doc = expand(tmp_path / "g", layer=1, heads=[3, 0])
    assert doc["scale"] == pytest.approx(2.0 * 2.0)  # sqrt(d_k 4) · (layer 1 + 1)
    assert [h["name"] for h in doc["heads"]] == ["L1 H3", "L1 H0"]
    assert [h["kv_head"] for h in doc["heads"]] == [3, 0] and "output" not in doc
    check_against(doc, gpt2_reference(weights, cfg, ids_of(doc), 1), [3, 0])


@pytest.mark.parametrize("dtype", ["F32", "F16", "BF16"])
def test_llama_every_head_matches_the_reference(tmp_path: Path, dtype: str) -> None:
    weights = build_llama(tmp_path / "ll", dtype=dtype)
    cfg = json.loads((tmp_path / "ll" / "config.json").read_text())
    doc = expand(tmp_path / "ll", layer=2)
    assert doc["tokens"][:2] == ["<s>", "▁Alice"]  # the post-processor's <s> included
    check_against(doc, llama_reference(weights, cfg, ids_of(doc), 2), [0, 1, 2, 3])
    assert doc["rope"] == {"layout": "half", "base": 500.0, "positions": list(range(len(doc["tokens"])))}
    assert doc["norm"] == {"kind": "rms", "gamma": doc["norm"]["gamma"], "eps": 1e-6}
    att = doc["attention"]
    assert (att["num_heads"], att["num_kv_heads"], len(att["W_Q"][0]), len(att["W_K"][0])) == (4, 2, 24, 12)
    assert "b_Q" not in att and "b_O" not in doc["output"]


def test_qwen2_biases_and_grouped_heads(tmp_path: Path) -> None:
    weights = build_llama(tmp_path / "q", model_type="qwen2", biases=True, head_dim=4)
    cfg = json.loads((tmp_path / "q" / "config.json").read_text())
    doc = expand(tmp_path / "q", layer=1, heads=[1, 2, 3])
    assert [h["kv_head"] for h in doc["heads"]] == [0, 1, 1]
    assert np.array_equal(doc["heads"][1]["W_K"], doc["heads"][2]["W_K"]) and doc["heads"][1]["b_V"] == doc["heads"][2]["b_V"]
    assert len(doc["heads"][0]["b_Q"]) == 4
    check_against(doc, llama_reference(weights, cfg, ids_of(doc), 1), [1, 2, 3])


QWEN_SLIDING = {"sliding_window": 3, "use_sliding_window": True, "max_window_layers": 1}
TYPES = {"sliding_window": 2, "layer_types": ["full_attention", "sliding_attention", "full_attention"]}


@pytest.mark.parametrize(
    ("model_type", "extra", "windows"),
    [
        ("mistral", {"sliding_window": 3}, [3, 3, 3]),
        ("mistral", {"sliding_window": None}, [None, None, None]),
        ("qwen2", QWEN_SLIDING, [None, 3, 3]),  # from layer max_window_layers on
        ("qwen2", QWEN_SLIDING | {"use_sliding_window": False}, [None, None, None]),
        ("llama", TYPES, [None, None, None]),  # LlamaAttention reads neither (transformers 5.24)
        ("qwen2", TYPES | {"use_sliding_window": True}, [None, 2, None]),
    ],
)
@pytest.mark.parametrize("layer", [0, 1, 2])
def test_sliding_windows(tmp_path: Path, model_type: str, extra: dict, windows: list[int | None], layer: int) -> None:
    weights = build_llama(tmp_path / "m", model_type=model_type, config=extra)
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    doc = expand(tmp_path / "m", layer=layer)
    assert doc["mask"] == ("causal" if windows[layer] is None else {"kind": "sliding", "window": windows[layer]})
    # the layers before slide too where the config says so
    check_against(doc, llama_reference(weights, cfg, ids_of(doc), layer, windows), [0, 1, 2, 3])


def test_transformers5_rope_parameters(tmp_path: Path) -> None:
    weights = build_llama(tmp_path / "t5", config={"rope_theta": ..., "rope_parameters": {"rope_type": "default", "rope_theta": 123.0}})
    cfg = json.loads((tmp_path / "t5" / "config.json").read_text())
    doc = expand(tmp_path / "t5", layer=1)
    assert doc["rope"]["base"] == 123.0
    check_against(doc, llama_reference(weights, cfg, ids_of(doc), 1), [0, 1, 2, 3])


@pytest.mark.parametrize("dtype", ["F32", "F16"])
def test_the_raw_reader_agrees_with_safetensors_own_numpy_api(tmp_path: Path, dtype: str) -> None:
    from safetensors.numpy import load_file

    build_gpt2(tmp_path / "g", dtype=dtype)
    path = tmp_path / "g" / "model.safetensors"
    theirs = load_file(str(path))
    ours = TensorFiles([path])
    assert sorted(ours.names()) == sorted(theirs)
    for name, value in theirs.items():
        np.testing.assert_array_equal(ours.get(name, value.shape), value.astype(np.float64))


def test_bf16_is_widened_exactly(tmp_path: Path) -> None:
    from safetensors import TensorSpec, serialize_file

    halves = np.array([0x3F80, 0xC040, 0x0000, 0x7F7F, 0x3EAB], dtype="<u2")  # 1, -3, 0, bf16 max, ~1/3
    spec = TensorSpec(dtype="bfloat16", shape=[5], data_ptr=halves.ctypes.data, data_len=halves.nbytes)
    serialize_file({"x": spec}, str(tmp_path / "b.safetensors"))
    got = TensorFiles([tmp_path / "b.safetensors"]).get("x", (5,))
    assert got.tolist() == [1.0, -3.0, 0.0, 3.3895313892515355e38, 0.333984375]


# --- errors: one line each, naming what is wrong ---------------------------------------------


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        ({"model_type": "gemma"}, "model_type 'gemma' is not supported"),
        ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "rope_scaling of rope_type 'llama3' is missing 'low_freq_factor'"),
        ({"rope_scaling": {"type": "dynamic", "factor": 2.0}}, "rope_scaling.rope_type 'dynamic' is not supported"),
        ({"partial_rotary_factor": 0.5}, "partial_rotary_factor = 0.5 is not supported"),
        ({"rope_theta": ..., "rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4}}, "rope_parameters.rope_type 'longrope'"),
        ({"hidden_act": "mish"}, "hidden_act 'mish' is not supported"),
        ({"num_key_value_heads": 3}, "num_key_value_heads = 3 does not divide"),
        ({"model_type": "qwen2", "layer_types": ["full_attention", "chunked_attention", "full_attention"]},
         "layer_types[1] = 'chunked_attention'"),
    ],
)
def test_unsupported_features_are_named(tmp_path: Path, config: dict, needle: str) -> None:
    build_llama(tmp_path / "m", config=config)
    with pytest.raises(ImporterError, match=None) as info:
        expand(tmp_path / "m", layer=1)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_missing_folder_and_files(tmp_path: Path) -> None:
    with pytest.raises(ImporterError, match="no such folder"):
        expand(tmp_path / "nowhere")
    build_gpt2(tmp_path / "g")
    for name in ("tokenizer.json", "config.json"):
        (tmp_path / "g" / name).rename(tmp_path / "g" / f"{name}.away")
        with pytest.raises(ImporterError, match=f"has no {name}"):
            expand(tmp_path / "g")
        (tmp_path / "g" / f"{name}.away").rename(tmp_path / "g" / name)
    (tmp_path / "g" / "model.safetensors").rename(tmp_path / "g" / "model.bin")
    with pytest.raises(ImporterError, match=r"no \*\.safetensors weights"):
        expand(tmp_path / "g")


def test_a_relative_folder_is_found_from_the_scenario_file(tmp_path: Path) -> None:
    build_gpt2(tmp_path / "models" / "tiny")
    doc = expand_model({"model": {"source": "models/tiny", "text": "Alice"}}, tmp_path)
    assert doc["tokens"] == ["Alice"]


def test_text_longer_than_the_context(tmp_path: Path) -> None:
    build_gpt2(tmp_path / "g")  # 24 positions
    with pytest.raises(ImporterError, match=r"model\.text is \d+ tokens long but .* takes at most 24"):
        expand_model({"model": {"source": str(tmp_path / "g"), "text": " ".join([TEXT] * 4)}})


def test_truncated_weights(tmp_path: Path) -> None:
    build_gpt2(tmp_path / "g")
    path = tmp_path / "g" / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(ImporterError, match="beyond the end of the file"):
        expand(tmp_path / "g")
