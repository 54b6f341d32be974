"""Gemma 3n's text decoder in NumPy (importers/hf_gemma3n.py) against transformers' own eager forward.

A tiny random Gemma3nForCausalLM, built and saved by transformers' own classes: 6 layers alternating sliding and
full attention, the last 2 reusing the K and V of layers 2 and 3 (num_kv_shared_layers = 2), Gaussian top-k
sparsity in the first two MLPs, AltUp with 4 streams, LAuReL and per-layer inputs. At every layer type
(sliding, full, the storing layers, the sharing ones) the app's X (the active prediction after input_layernorm,
what the attention reads), every head's output (o_proj's input) and the output after o_proj must match hooks in
the model's float64 eager forward; so must the folder read as "gemma3n" (a text_config, the weights under
model.language_model.).

Tolerance: float32's. transformers runs every Gemma3nRMSNorm in float32 (hidden_states.float()), computes RoPE's
cos and sin in float32, takes AltUp's router tanh in float32 and Φ⁻¹ of the sparsity in float32, whatever the
model's dtype; the stream passes through a dozen such norms a layer.

Layers 0–3 also open through a [model] table as scenarios ([input] kind "altup", [qk_norm], [v_norm], scale 1) whose
X, heads and output are held against the same hooks; the sharing layers 4 and 5 open as [shared_kv] scenarios
(test_hf_gemma3n_shared_kv.py); the schedule marks them and the KV cache count gives them 0.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qkv_tui.core.cost import kv_cache
from qkv_tui.core.variants import v_norm
from qkv_tui.edges.export_json import to_json
from qkv_tui.importers.hf_gemma3n import Gemma3n
from qkv_tui.importers.hf_gemma3n_config import text_config
from qkv_tui.importers.safetensors_raw import TensorFiles

from .hooked_forward import catch_o_proj, forward_hooked
from .model_fixtures import llama_tokenizer
from .test_importers_families import _check, _ids, _linear, _open, _randomise

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("transformers.models.gemma3n")

FLOAT32 = 1e-4  # see the module's docstring
IDS = [2, 17, 5, 40, 33, 9, 21, 12, 30]
TYPES = ["sliding_attention", "full_attention"] * 3


def _gemma3n(folder: Path, vocab: int, seed: int = 41, **extra: Any) -> Any:
    config = transformers.Gemma3nTextConfig(**({
        "vocab_size": vocab, "vocab_size_per_layer_input": 36, "hidden_size": 32,
        "intermediate_size": [48, 40, 48, 48, 56, 48], "num_hidden_layers": 6, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 8, "hidden_size_per_layer_input": 8, "laurel_rank": 4, "sliding_window": 4,
        "layer_types": TYPES, "num_kv_shared_layers": 2, "activation_sparsity_pattern": [0.95, 0.6, 0.0, 0.0, 0.0, 0.0],
        "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 50.0},
                            "full_attention": {"rope_type": "default", "rope_theta": 1000.0}},
        "max_position_embeddings": 64, "pad_token_id": 0} | extra))
    assert config.kv_sharing_modes == [None, None, "store", "store", "reuse", "reuse"]
    model = transformers.Gemma3nForCausalLM._from_config(config, attn_implementation="eager")
    _randomise(model, seed)
    with torch.no_grad():  # AltUp's coefficients at the random init's size would swamp the stream after a few layers
        for block in model.model.layers:
            block.altup.prediction_coefs.weight.mul_(0.25)
            block.altup.correction_coefs.weight.mul_(0.25)
    transformers.utils.logging.disable_progress_bar()
    model.save_pretrained(folder)
    return model.double().eval()


def _reference(model: Any, layer: int, ids: list[int] = IDS) -> dict[str, np.ndarray]:
    seen: dict[str, np.ndarray] = {}
    att = model.model.layers[layer].self_attn

    def before_attention(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        seen["X"] = kwargs["hidden_states"][0].detach().numpy().copy()

    forward_hooked(model, ids, [att.register_forward_pre_hook(before_attention, with_kwargs=True),
                                *catch_o_proj(att.o_proj, seen)])
    return seen


def _opened(folder: Path) -> Gemma3n:
    path = folder / "config.json"
    data = json.loads(path.read_text())
    return Gemma3n(text_config(path.name, data, data["model_type"]), TensorFiles(sorted(folder.glob("*.safetensors"))))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    root = tmp_path_factory.mktemp("gemma3n")
    vocab = llama_tokenizer(root / "tokenizer.json")
    folder = root / "text"
    model = _gemma3n(folder, vocab)
    (root / "tokenizer.json").rename(folder / "tokenizer.json")
    return folder, model


@pytest.mark.parametrize("layer", range(6))
def test_every_layer_type_matches_the_eager_forward(built: tuple[Path, Any], layer: int) -> None:
    folder, model = built
    ref = _reference(model, layer)
    opened = _opened(folder).open(IDS, layer)
    np.testing.assert_allclose(opened.X, ref["X"], rtol=FLOAT32, atol=FLOAT32)
    np.testing.assert_allclose(opened.heads, ref["merged"], rtol=FLOAT32, atol=FLOAT32)
    np.testing.assert_allclose(opened.output, ref["attn"], rtol=FLOAT32, atol=FLOAT32)
    assert opened.kv_source == {4: 2, 5: 3}.get(layer)
    assert np.abs(ref["X"]).max() > 0.5  # the stream is not vanishing: the comparison has something to compare


def test_a_gemma3n_folder_reads_its_text_config_and_the_language_models_weights(built: tuple[Path, Any],
                                                                                tmp_path: Path) -> None:
    from safetensors.numpy import load_file, save_file

    folder, model = built
    wrapped = tmp_path / "gemma3n"
    wrapped.mkdir()
    text = json.loads((folder / "config.json").read_text())
    (wrapped / "config.json").write_text(json.dumps({"model_type": "gemma3n", "text_config": text,
                                                     "vision_config": {}, "audio_config": {}}))
    weights = load_file(str(folder / "model.safetensors"))
    save_file({k.replace("model.", "model.language_model.", 1): v for k, v in weights.items()},
              str(wrapped / "model.safetensors"))
    ref = _reference(model, 5)
    opened = _opened(wrapped).open(IDS, 5)
    np.testing.assert_allclose(opened.output, ref["attn"], rtol=FLOAT32, atol=FLOAT32)
    (wrapped / "tokenizer.json").write_bytes((folder / "tokenizer.json").read_bytes())
    comp = _open(tmp_path, wrapped, 3)  # and through a [model] table
    ref = _reference(model, 3, _ids(comp.scenario.description))
    np.testing.assert_allclose(comp.output, ref["attn"], rtol=FLOAT32, atol=FLOAT32)


def test_the_kv_sharing_rule_is_transformers_own() -> None:
    for layers, shared, types in [(6, 2, TYPES), (35, 15, None), (10, 4, ["full_attention"] * 10), (8, 0, None)]:
        extra = {} if types is None else {"layer_types": types}
        config = transformers.Gemma3nTextConfig(num_hidden_layers=layers, num_kv_shared_layers=shared,
                                                activation_sparsity_pattern=[0.0] * layers, **extra)
        ours = text_config("config.json", json.loads(config.to_json_string()), "gemma3n_text")
        modes = config.kv_sharing_modes
        for i in range(layers):
            source = ours.kv_source(i)
            assert (source is not None) == (modes[i] == "reuse")
            if source is not None:
                assert modes[source] == "store" and config.layer_types[source] == config.layer_types[i]


@pytest.mark.parametrize("layer", range(4))
def test_every_layer_computing_its_own_kv_opens_as_a_scenario(built: tuple[Path, Any], tmp_path: Path,
                                                              layer: int) -> None:
    """Through a [model] table: X (kind "altup", no [norm]), W_Q/W_K/W_V, [qk_norm] with plain γ, [v_norm], scale 1,
    the layer type's RoPE and mask; every head's output and the output after W_O as transformers computes them."""
    folder, model = built
    comp = _open(tmp_path, folder, layer)
    ref = _reference(model, layer, _ids(comp.scenario.description))
    att = model.model.layers[layer].self_attn
    _check(comp, ref, _linear(att.q_proj.weight), _linear(att.k_proj.weight), _linear(att.v_proj.weight), kv_heads=2,
           tol=FLOAT32)
    sc = comp.scenario
    assert sc.input.kind == "altup" and sc.input.layer == layer and sc.norm is None
    assert v_norm.TABLE.of(sc) == 1e-6 and comp.heads[0].scale == 1.0 and sc.scale_from is not None
    assert sc.qk_norm is not None and sc.qk_norm.over == "head"
    np.testing.assert_array_equal(sc.qk_norm.gamma_q, att.q_norm.weight.detach().numpy().astype(np.float32))
    np.testing.assert_array_equal(sc.qk_norm.gamma_k, att.k_norm.weight.detach().numpy().astype(np.float32))
    assert sc.rope is not None and sc.rope.base == (50.0 if layer % 2 == 0 else 1000.0)
    assert (sc.mask_kind, sc.window) == (("sliding", 4) if layer % 2 == 0 else ("causal", None))
    assert sc.input.kv_source_layer is None
    assert json.loads(to_json(comp))["kv_source_layer"] is None  # the layer computes its own; 4 and 5 do not
    cache = kv_cache(sc, 2, 10)  # every layer's K/V heads as this one's: 2·(8 + 8)·2 bytes, none for 4 and 5
    assert [lc.per_token.value for lc in cache.layers] == [64, 64, 64, 64, 0, 0]
    assert cache.at_context == 2 * 4 * 64 + 2 * 10 * 64


def test_the_schedule_names_each_shared_layers_source(built: tuple[Path, Any]) -> None:
    from qkv_tui.core.layer_schedule import entry_error, schedule_line

    folder, model = built
    schedule = _opened(folder).schedule()
    assert schedule == ("sliding 4", "full", "sliding 4", "full", "sliding 4 kv-from 2", "full kv-from 3")
    assert all(entry_error(e) is None for e in schedule)
    modes = model.config.kv_sharing_modes
    assert [e.endswith(("kv-from 2", "kv-from 3")) for e in schedule] == [m == "reuse" for m in modes]
    assert schedule_line(schedule, 4).endswith("· [4 SR] · 5 FR (S sliding 4, F full, R reuses an earlier layer's K and V)")


def test_one_walk_serves_every_layer_in_any_order(built: tuple[Path, Any]) -> None:
    """The heads view's [ and ]: the opened model keeps its walk of the text; a layer opened later, or earlier,
    is the layer a fresh walk gives."""
    folder, _ = built
    walked = _opened(folder)
    for layer in (3, 0, 5, 1):
        fresh = _opened(folder).open(IDS, layer)
        again = walked.open(IDS, layer)
        np.testing.assert_array_equal(again.X, fresh.X)
        np.testing.assert_array_equal(again.output, fresh.output)
    assert len(walked.open(IDS[:4], 0).X) == 4  # another text walks again
